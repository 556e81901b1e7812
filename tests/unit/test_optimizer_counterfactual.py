"""The counterfactual evaluator: the doubly robust estimate from summed statistics equals the
per-decision formula, finds a planted better model with an interval that excludes today's,
refuses what the log cannot support; the policies' propensities and distributions; and the
replay's recorded queries, sealed per user, picked after opening."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from habitus.crypto import DirectoryKeyStore, Keyring, load_kek_ring
from habitus.crypto.columns import COLUMNS
from habitus.routing.configured import decide, distribution, routing_for
from habitus.routing.context import build_context
from habitus.routing.policies import Aggregate, RouterState, policy_for
from habitus.routing.sizes import resolve
from services.optimizer.counterfactual import (
    EvaluationLog,
    Group,
    Sample,
    estimate,
)
from services.optimizer.store import OutcomeRow, _outcome_params, distinct_queries

MODELS = ("gpt-4o-mini", "deepseek-coder-v2:16b")


def sample(cls: str, model: str, propensity: float, reward: float, *, cost: float = 0.002,
           outcome: str | None = "success", length: int = 120,
           offered: tuple[str, ...] = MODELS) -> Sample:
    return Sample(query_class=cls, has_code=cls == "code", has_math=cls == "math",
                  has_reasoning=False, query_length=length, urgency=0.5, offered=offered,
                  default_model=None, fallback_model=None, model=model, propensity=propensity,
                  outcome=outcome, reward=reward, latency_seconds=1.0, cost_usd=cost,
                  tokens=300.0)


def planted(n: int, seed: int = 5) -> list[Sample]:
    """A log routed uniformly at random over two models: equal cost, and the coder wins code
    queries on reward (0.85 against 0.55) while the small model wins general ones."""
    rng = random.Random(seed)
    means = {("code", MODELS[0]): 0.55, ("code", MODELS[1]): 0.85,
             ("general", MODELS[0]): 0.75, ("general", MODELS[1]): 0.70}
    out = []
    for _ in range(n):
        cls = rng.choice(("code", "general"))
        model = rng.choice(MODELS)
        reward = min(1.0, max(0.0, rng.gauss(means[(cls, model)], 0.1)))
        out.append(sample(cls, model, 0.5, reward))
    return out


def _brute(samples: Sequence[Sample], routing_params: dict[str, object], metric: str
           ) -> tuple[float, float]:
    """The estimate term by term (the module docstring's formula), and its standard error."""
    log = EvaluationLog.build(samples)
    routing = routing_for(routing_params, None, "learned", 5)
    terms = []
    for s in samples:
        value = s.metric(metric)
        if value is None:
            continue
        group = Group.of(s)
        _, sizes = resolve(list(group.offered))
        pi = distribution(routing, group.context(), group.offered, sizes, None, None,
                          log.state)
        direct = sum(p * (log.q(metric, s.query_class, m) or 0.0) for m, p in pi.items())
        q_a = log.q(metric, s.query_class, s.model) or 0.0
        terms.append(direct + pi.get(s.model, 0.0) / s.propensity * (value - q_a))
    mean = sum(terms) / len(terms)
    var = sum((t - mean) ** 2 for t in terms) / (len(terms) - 1)
    return mean, math.sqrt(var / len(terms))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(40, 200),
       pin=st.sampled_from([None, MODELS[0], MODELS[1]]),
       policy=st.sampled_from(["heuristic", "learned", "bandit", "grpo", "sft"]))
def test_summed_statistics_equal_the_per_decision_formula(seed: int, n: int, pin: str | None,
                                                          policy: str) -> None:
    rng = random.Random(seed)
    samples = []
    for _ in range(n):
        cls = rng.choice(("code", "general", "short"))
        model = rng.choice(MODELS)
        p = rng.choice((0.2, 0.5, 0.8, 1.0))
        samples.append(sample(cls, model, p, rng.random(), length=rng.choice((10, 120, 900)),
                              cost=rng.choice((0.001, 0.004)),
                              outcome=rng.choice(("success", "failure", None))))
    params: dict[str, object] = {"routing.policy": policy}
    if pin is not None:
        params["routing.model_for.code"] = pin
    log = EvaluationLog.build(samples)
    found = estimate(log, routing_for(params, None, "learned", 5),
                     ["reward", "accuracy", "cost_usd"], min_support=1)
    if found.refused is not None:
        # a model routing would use for a class that the log holds no trace reporting the
        # metric of: no outcome (accuracy), or, with few samples, no trace of it at all (then
        # the first metric asked, reward, is the one named). The refusal must be true.
        named = re.search(r"no recorded (\S+) trace of (\S+) reports (\S+):", found.refused)
        assert named is not None, found.refused
        cls, model, metric = named.groups()
        assert not [s for s in samples if s.query_class == cls and s.model == model
                    and s.metric(metric) is not None], found.refused
        assume(False)
    for metric in ("reward", "accuracy", "cost_usd"):
        mean, se = _brute(samples, params, metric)
        assert found.metrics[metric] == pytest.approx(mean, rel=1e-9, abs=1e-12)
        low, high = found.intervals[metric]
        assert (high - low) / 2 == pytest.approx(1.959963984540054 * se, rel=1e-6, abs=1e-12)


def test_the_planted_better_model_is_found_with_an_interval_that_excludes_today() -> None:
    log = EvaluationLog.build(planted(3000))
    today = estimate(log, routing_for({"routing.model_for.code": MODELS[0],
                                       "routing.model_for.general": MODELS[0]},
                                      None, "learned", 5), ["reward", "cost_usd"])
    better = estimate(log, routing_for({"routing.model_for.code": MODELS[1],
                                        "routing.model_for.general": MODELS[0]},
                                       None, "learned", 5), ["reward", "cost_usd"])
    worse = estimate(log, routing_for({"routing.model_for.code": MODELS[0],
                                       "routing.model_for.general": MODELS[1]},
                                      None, "learned", 5), ["reward", "cost_usd"])
    assert today.metrics["reward"] == pytest.approx(0.65, abs=0.02)
    assert better.metrics["reward"] == pytest.approx(0.80, abs=0.02)
    assert better.intervals["reward"][0] > today.intervals["reward"][1]
    assert worse.metrics["reward"] < today.metrics["reward"]  # type: ignore[operator]
    assert better.metrics["cost_usd"] == pytest.approx(0.002)
    # about half the decisions agree with a deterministic configuration over two models
    assert 1300 < better.support < 1700


def test_it_refuses_what_the_log_cannot_support() -> None:
    only_small = [sample("code", MODELS[0], 1.0, 0.6) for _ in range(50)]
    log = EvaluationLog.build(only_small)
    pinned = estimate(log, routing_for({"routing.model_for.code": MODELS[1]}, None,
                                       "learned", 5), ["reward"])
    assert pinned.metrics == {"reward": None} and pinned.support == 0
    assert pinned.refused == "only 0 recorded decisions agree with this configuration, 20 needed"
    # a model routing would use but that was never seen on the class: nothing to stand on
    mixed = only_small + [sample("code", MODELS[1], 0.5, 0.9) for _ in range(3)]
    unseen = estimate(EvaluationLog.build(mixed), routing_for(
        {"routing.policy": "grpo"}, None, "learned", 5), ["reward", "energy_joules"],
        min_support=10)
    assert unseen.refused is None and unseen.metrics["energy_joules"] is None
    assert estimate(EvaluationLog.build([]), routing_for({}, None, "learned", 5),
                    ["reward"]).refused.startswith("no recorded decision")  # type: ignore[union-attr]


def test_missing_metrics_are_left_out_not_counted_as_zero() -> None:
    samples = [sample("code", MODELS[0], 1.0, 0.5, cost=0.002) for _ in range(30)]
    samples += [sample("code", MODELS[0], 1.0, 0.5, outcome=None) for _ in range(30)]
    found = estimate(EvaluationLog.build(samples), routing_for(
        {"routing.model_for.code": MODELS[0]}, None, "learned", 5), ["accuracy", "cost_usd"])
    assert found.metrics == {"accuracy": 1.0, "cost_usd": pytest.approx(0.002)}


# ------------------------------------------------------------------ propensities

def test_every_policy_reports_the_chance_of_its_choice() -> None:
    models, sizes = resolve(["gpt-4o", "gpt-4o-mini", "llama3.2:3b"])
    ctx = build_context("def parse(x): return x  # fix the bug")
    state = RouterState(aggregates={("code", "gpt-4o"): Aggregate(12, 11, 12, 0, 0, 10.0, 12),
                                    ("code", "gpt-4o-mini"): Aggregate(12, 3, 12, 0, 0, 4, 12)},
                        grpo={("code", "gpt-4o"): 1.0})
    for name in ("heuristic", "learned", "sft", "bandit", "grpo"):
        policy = policy_for(name)
        dist = policy.distribution(ctx, models, sizes, None, None, state)
        assert sum(dist.values()) == pytest.approx(1.0)
        for decision in ("a", "b", "c"):
            choice = policy.choose(ctx, models, sizes, None, None, state, decision)
            assert choice.propensity == pytest.approx(dist[choice.model]), name
        if name in ("heuristic", "learned", "sft"):
            assert list(dist.values()) == [1.0]
    grpo = policy_for("grpo").distribution(ctx, models, sizes, None, None, state)
    assert grpo["gpt-4o"] == pytest.approx(math.e / (math.e + 2))


def test_the_bandit_chance_follows_how_often_its_lottery_is_won() -> None:
    models, sizes = resolve(["a-model", "b-model"])
    ctx = build_context("def f(): pass")
    state = RouterState(aggregates={("code", "a-model"): Aggregate(40, 0, 0, 0, 0, 32, 40),
                                    ("code", "b-model"): Aggregate(40, 0, 0, 0, 0, 20, 40)})
    bandit = policy_for("bandit")
    wins = sum(bandit.choose(ctx, models, sizes, None, None, state, f"d{i}").model == "a-model"
               for i in range(2000)) / 2000
    assert bandit.distribution(ctx, models, sizes, None, None, state)["a-model"] == \
        pytest.approx(wins, abs=0.05)


def test_a_configured_pin_decides_when_offered_and_says_so_when_not() -> None:
    models, sizes = resolve(["gpt-4o", "gpt-4o-mini"])
    code = build_context("import os; def main(): pass")
    routing = routing_for({"routing.model_for.code": "gpt-4o-mini",
                           "routing.policy": "heuristic"}, None, "learned", 5)
    choice = decide(routing, code, models, sizes, None, None, RouterState(), "d")
    assert choice.model == "gpt-4o-mini" and choice.propensity == 1.0
    assert choice.reason == "configured: code queries go to gpt-4o-mini"
    general = build_context("Tell me about the history of the Roman empire, briefly please.")
    assert decide(routing, general, models, sizes, None, None, RouterState(), "d").reason \
        .startswith("no signal")
    elsewhere, _ = resolve(["gpt-4o", "llama3.2:3b"])
    unpinned = decide(routing, code, elsewhere, sizes, None, None, RouterState(), "d")
    assert unpinned.model == "gpt-4o"
    assert unpinned.reason.endswith("; the configured gpt-4o-mini for code queries is not "
                                    "offered")
    narrowed = routing_for({"routing.models": ["gpt-4o-mini"]}, "heuristic", "learned", 5)
    assert decide(narrowed, code, models, sizes, None, None, RouterState(), "d").model == \
        "gpt-4o-mini"
    # an explicit policy in the request wins over the configured one
    assert routing_for({"routing.policy": "bandit"}, "sft", "learned", 5).name == "sft"
    assert routing_for({"routing.policy": "bandit"}, None, "learned", 5).name == "bandit"
    assert routing_for({}, None, "grpo", 5).name == "grpo"


# ------------------------------------------------------------------ the replay's queries

@pytest.fixture
def ring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Keyring:
    """The process's column sealer with a keyring of its own (restored after the test)."""
    keyring = Keyring(load_kek_ring(None, tmp_path / "kek.json"),
                      DirectoryKeyStore(tmp_path / "k"))
    monkeypatch.setattr(COLUMNS, "keyring", keyring)
    return keyring


def outcome(user: str, query: str) -> OutcomeRow:
    return OutcomeRow(tenant_id="acme", user_id=user, trace_id="t1", decision_id=None, seq=1,
                      query=query, query_class="general", has_code=False, has_math=False,
                      has_reasoning=False, query_length=len(query), model="m", outcome=None,
                      feedback=None, latency_seconds=1.0, cost_usd=None, tokens=1,
                      prompt_tokens=None, completion_tokens=None, energy_joules=None,
                      started_at=1.0)


def test_a_trace_query_is_stored_sealed_for_its_user(ring: Keyring) -> None:
    query = "Draft a note to Sarah about her diagnosis."
    stored = _outcome_params(outcome("dana", query))[5]
    assert stored.startswith("hc1:") and "Sarah" not in stored
    assert COLUMNS.open("acme", "dana", stored) == query
    assert _outcome_params(outcome("lee", query))[5] != stored  # each user's own key


def test_recent_queries_are_distinct_once_opened_and_pass_an_erased_user_over(
        ring: Keyring) -> None:
    def row(user: str, query: str, klass: str = "general") -> tuple[str, str, str, None]:
        return (user, COLUMNS.seal("acme", user, query), klass, None)

    rows = [row("ana", "plan the offsite"), row("zoe", "her secret question"),
            row("bob", "plan the offsite", "long"),  # two users asking the same: one query
            row("zoe", "another of hers"), row("bob", "fix the build", "code"),
            row("ana", "summarise the report")]
    assert distinct_queries("acme", rows, 10) == [
        ("plan the offsite", "general", None), ("her secret question", "general", None),
        ("another of hers", "general", None), ("fix the build", "code", None),
        ("summarise the report", "general", None)]
    assert [q for q, _, _ in distinct_queries("acme", rows, 2)] == [
        "plan the offsite", "her secret question"]
    ring.destroy("acme", "zoe")  # erased while a run reads the log: her rows are passed over
    assert [q for q, _, _ in distinct_queries("acme", rows, 10)] == [
        "plan the offsite", "fix the build", "summarise the report"]
