"""The trace router's pure routing core: context, sizes, reward and the five policies."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from habitus.routing.context import build_context, classify, detect_language, query_class
from habitus.routing.policies import (
    GRPO,
    POLICIES,
    Aggregate,
    Bandit,
    Choice,
    Learned,
    NoModelAvailable,
    RouterState,
    UnknownPolicy,
    diff,
    group_rewards,
    grpo_update,
    learn,
    observe,
    policy_for,
    rng_for,
    sft_table,
)
from habitus.routing.reward import HeuristicReward, blend, quality, reward
from habitus.routing.sizes import (
    Sizes,
    largest,
    parse_size,
    resolve,
    size_of,
    smallest,
)

EMPTY = RouterState()
SIZES = {"small": 3.0, "large": 70.0, "coder": 16.0}
ALL = ["small", "large", "coder"]
REAL = ["qwen3:8b", "llama3.2:3b", "deepseek-coder-v2:16b"]


def route(query: str, models: Sequence[str], sizes: Sizes, *, urgency: float | None = None,
          default: str | None = None, fallback: str | None = None, policy: str = "heuristic",
          state: RouterState = EMPTY, decision_id: str = "d", **params: object) -> Choice:
    return policy_for(policy, **params).choose(build_context(query, urgency), models, sizes,
                                               default, fallback, state, decision_id)


# --------------------------------------------------------------------------- heuristic vectors


@pytest.mark.parametrize(("query", "models", "urgency", "expected"), [
    ("Hi", ALL, None, "small"),
    ("def foo(): pass", ALL, None, "coder"),
    ("def foo(): pass", ["small", "large"], None, "large"),
    ("solve the integral of x^2", ALL, None, "large"),
    ("x" * 501, ALL, None, "large"),
    ("x" * 501, ALL, 0.9, "small"),
    ("Please explain step by step how the process of photosynthesis works in plants", ALL,
     None, "large"),
])
def test_heuristic_vectors(query: str, models: list[str], urgency: float | None,
                           expected: str) -> None:
    assert route(query, models, SIZES, urgency=urgency).model == expected


def test_heuristic_default_chain() -> None:
    query = "a sixty character query that carries no signal of any kind.."
    assert len(query) == 60
    assert route(query, ["small", "large"], SIZES, default="large", fallback="small").model \
        == "large"
    # the default is only taken when offered; then the fallback; then the first by name
    assert route(query, ["small", "large"], SIZES, default="gone", fallback="small").model \
        == "small"
    assert route(query, ["large", "small"], SIZES, default="gone").model == "large"
    assert route(query, ["small", "large"], SIZES, default="gone").model == "large"


def test_no_models() -> None:
    assert route("anything", [], {}, default="fallback-model").model == "fallback-model"
    assert route("anything", [], {}, fallback="fb").model == "fb"
    for name in POLICIES:
        assert route("def x(): pass", [], {}, default="fallback-model", policy=name).model \
            == "fallback-model"
        with pytest.raises(NoModelAvailable):
            route("anything", [], {}, policy=name)


@pytest.mark.parametrize(("query", "expected"), [
    ("Hi", "llama3.2:3b"),
    ("def foo(): pass", "deepseek-coder-v2:16b"),
    ("Tell me about the history of the Roman empire and the causes of its fall", "qwen3:8b"),
])
def test_heuristic_with_sizes_from_names(query: str, expected: str) -> None:
    names, sizes = resolve(REAL)
    assert route(query, names, sizes, default="qwen3:8b").model == expected


# --------------------------------------------------------------------------- context


@pytest.mark.parametrize(("query", "cls"), [
    ("def hello(): pass", "code"),
    ("x = a -> b", "code"),  # the router's patterns classify too, so code is code for both
    ("compute the integral", "math"),
    ("what time is it?", "short"),
    ("a" * 501, "long"),
    ("Please explain step by step how the process of photosynthesis works in plants", "long"),
    ("why?", "short"),
    ("Tell me about the history of artificial intelligence research", "general"),
])
def test_query_class(query: str, cls: str) -> None:
    assert classify(query) == cls


def test_context_fields() -> None:
    ctx = build_context("Explain: `ls` and the sum", urgency=2)
    assert (ctx.query_length, ctx.has_code, ctx.has_math, ctx.has_reasoning) == (25, True, True,
                                                                                 True)
    assert ctx.urgency == 1.0
    assert build_context("q").urgency == 0.5
    assert build_context("q", float("nan")).urgency == 0.5
    assert build_context("q", -1).urgency == 0.0
    assert query_class(ctx) == "code"


@pytest.mark.parametrize(("text", "language"), [
    ("Hi", "en"), ("def foo(): pass", "en"), ("12345", "en"), ("", "en"),
    ("What is the capital of France?", "en"),
    ("Quel est le temps pour les vacances à Paris", "fr"),
    ("Wie ist das Wetter in Berlin und was soll ich anziehen", "de"),
    ("¿Cómo está el tiempo en Madrid para el fin de semana?", "es"),
    ("Привет, как дела?", "ru"), ("你好世界", "zh"), ("こんにちは世界", "ja"), ("안녕하세요", "ko"),
])
def test_language(text: str, language: str) -> None:
    assert detect_language(text) == language
    assert build_context(text).language == language


# --------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(("name", "size"), [
    ("qwen3:8b", 8.0), ("llama3.2:3b", 3.0), ("mixtral:8x7b", 56.0),
    ("deepseek-coder-v2:16b", 16.0), ("llama3.3-70b", 70.0), ("llama3.3:70b", 70.0),
    ("qwen2.5:1.5b", 1.5), ("smollm:135m", 0.135), ("Meta-Llama-3.1-70B-Instruct", 70.0),
    ("mistral-7b-instruct-v0.2", 7.0), ("gpt-4o", None), ("claude-3-5-sonnet", None),
    ("deepseek-coder-v2", None), ("llama3.2", None),
])
def test_parse_size(name: str, size: float | None) -> None:
    assert parse_size(name) == size


def test_size_sources() -> None:
    assert size_of("codestral") == 22.0  # catalog
    assert size_of("qwen3:latest") == 8.0
    assert size_of("qwen3:8b", 9.5) == 9.5  # the request wins
    for unknown in (0, -1, float("nan"), True, "8"):
        assert size_of("qwen3:8b", unknown) == 8.0
    assert size_of("gpt-4o") is None
    names, sizes = resolve(["a:1b", {"name": "b", "parameter_count_b": 3}, {"name": "b"}, "",
                            " ", {"parameter_count_b": 1}, 5])  # type: ignore[list-item]
    assert names == ("a:1b", "b")
    assert sizes == {"a:1b": 1.0, "b": 3.0}
    assert resolve(None) == ((), {})


def test_largest_and_smallest() -> None:
    sizes: dict[str, float | None] = {"cloud": None, "big": 70.0, "tiny": 1.0, "tiny2": 1.0,
                                      "other-cloud": None}
    assert largest(["big", "cloud", "tiny"], sizes) == "cloud"
    assert largest(["big", "tiny"], sizes) == "big"
    assert smallest(["cloud", "big", "tiny", "tiny2"], sizes) == "tiny"
    # equal sizes, no price: the name decides, never the position in the list
    assert smallest(["tiny2", "tiny"], sizes) == smallest(["tiny", "tiny2"], sizes) == "tiny"
    assert smallest(["other-cloud", "cloud"], sizes) == "cloud"
    assert largest(["other-cloud", "cloud"], sizes) == "cloud"
    assert largest([], sizes) is None and smallest([], sizes) is None
    # a cloud model is largest, so a math query goes there, and a short one never does
    assert route("solve x", ["tiny", "cloud"], sizes).model == "cloud"
    assert route("Hi", ["cloud", "tiny"], sizes).model == "tiny"


# --------------------------------------------------------------------------- reward


def test_reward_vectors() -> None:
    fn = HeuristicReward()
    assert fn.compute(0, 0, 10, 10) == pytest.approx(0.85)
    assert fn.compute(60, 0.1, 100, 0) == pytest.approx(0.0)
    assert HeuristicReward(max_latency=10, max_cost=1).compute(5, 0.5, 50, 50) \
        == pytest.approx(0.5)
    assert HeuristicReward(1, 0, 0).compute(15, 0, 0, 0) == pytest.approx(0.5)
    assert HeuristicReward(0, 1, 0).compute(0, 0.005, 0, 0) == pytest.approx(0.5)
    assert HeuristicReward(0, 0, 1).compute(0, 0, 25, 75) == pytest.approx(0.75)
    assert fn.compute(0, 0, 0, 0) == pytest.approx(0.85)
    # missing inputs are neutral, negative ones count as zero
    assert fn.compute(None, None, None, None) == pytest.approx(0.5)
    assert fn.compute(-5, -1, 10, 10) == pytest.approx(0.85)
    with pytest.raises(ValueError):
        HeuristicReward(max_latency=0)


def test_reward_blend() -> None:
    assert reward(0, 0, 10, 10) == pytest.approx(0.85)  # no signal: the heuristic alone
    assert reward(0, 0, 10, 10, feedback=0.25) == pytest.approx(0.55)
    assert reward(0, 0, 10, 10, feedback=1.0, outcome="failure") == pytest.approx(0.925)
    assert reward(0, 0, 10, 10, outcome="success") == pytest.approx(0.925)
    assert reward(0, 0, 10, 10, outcome="failure") == pytest.approx(0.425)
    assert reward(0, 0, 10, 10, outcome="error") == pytest.approx(0.425)
    assert quality(7.0, None) == 1.0 and quality(None, None) is None
    assert blend(0.3, 1.0) > blend(0.9, 0.0)


# --------------------------------------------------------------------------- learned and sft


def _traces(*rows: tuple[str, str, str | None, float | None, int]
            ) -> dict[tuple[str, str], Aggregate]:
    aggregates: dict[tuple[str, str], Aggregate] = {}
    for query, model, outcome, feedback, times in rows:
        for _ in range(times):
            aggregates = observe(aggregates, classify(query), model, outcome, feedback)
    return aggregates


CODE = "import os; def main(): pass"


def test_learned_vector() -> None:
    aggregates = _traces(("def f(): pass", "codestral", "success", 0.9, 6),
                         ("def f(): pass", "qwen3:8b", "failure", 0.3, 6))
    table = learn(aggregates, min_samples=3)
    assert table == {"code": "codestral"}
    state = RouterState(aggregates=aggregates, learned=table)
    choice = route(CODE, ["codestral", "qwen3:8b"], {}, default="qwen3:8b", policy="learned",
                   state=state, min_samples=3)
    assert choice.model == "codestral"
    assert choice.scores["codestral"] == pytest.approx(0.6 + 0.4 * 0.9)
    assert choice.scores["qwen3:8b"] == pytest.approx(0.4 * 0.3)


def test_learned_beats_the_heuristic_and_waits_for_min_samples() -> None:
    models = ["codestral", "qwen3:8b"]
    aggregates = _traces(("def f(): pass", "codestral", "failure", 0.3, 6),
                         ("def f(): pass", "qwen3:8b", "success", 0.9, 6))
    state = RouterState(aggregates=aggregates, learned=learn(aggregates, 3))
    assert route(CODE, models, {}, policy="learned", state=state, min_samples=3).model \
        == "qwen3:8b"
    # below min_samples: the heuristic's model (codestral, by its name)
    few = _traces(("def f(): pass", "codestral", "failure", 0.3, 1),
                  ("def f(): pass", "qwen3:8b", "success", 0.9, 1))
    assert learn(few, 3) == {}
    state = RouterState(aggregates=few, learned=learn(few, 3))
    choice = route(CODE, models, {}, policy="learned", state=state, min_samples=3)
    assert choice.model == route(CODE, models, {}).model == "codestral"
    assert "heuristic" in choice.reason


def test_learned_details() -> None:
    aggregates = _traces(("def f(): pass", "a", "success", None, 3),  # 0.6 + 0.4·0.5 = 0.8
                         ("def f(): pass", "b", "success", 1.0, 2),
                         ("def f(): pass", "b", "failure", 0.0, 1),  # 0.4 + 0.4·0.667
                         ("def f(): pass", "c", "success", 1.0, 1))  # 1.0
    assert learn(aggregates, 5) == {"code": "c"}  # the class has 7 traces
    # the table's model is not offered: the best offered model by the same scores
    state = RouterState(aggregates=aggregates, learned=learn(aggregates, 5))
    assert route(CODE, ["b", "a"], {}, policy="learned", state=state).model == "a"
    # unknown outcomes do not count against the success rate; ties go to more traces, then name
    tie = {("code", "y"): Aggregate(count=2, successes=1, outcomes_known=1),
           ("code", "x"): Aggregate(count=2, successes=1, outcomes_known=1),
           ("code", "z"): Aggregate(count=1, successes=1, outcomes_known=1)}
    assert learn(tie, 5) == {"code": "x"}
    assert diff({"code": "a", "math": "m"}, {"code": "b", "short": "s", "math": "m"}) == {
        "code": {"old": "a", "new": "b"}, "short": {"old": None, "new": "s"}}
    assert diff({"code": "a"}, {}) == {"code": {"old": "a", "new": None}}


def test_sft_table() -> None:
    aggregates = _traces(("def f(): pass", "A", "success", None, 3),
                         ("def f(): pass", "B", "success", 1.0, 2),
                         ("def f(): pass", "B", "failure", 0.0, 1),
                         ("hello", "S", "success", 0.9, 1), ("hi", "S", None, None, 1),
                         ("hey", "T", "failure", None, 1), ("solve x", "unknown", "success",
                                                            1.0, 1))
    assert sft_table(aggregates, 1) == {"code": "A", "short": "S", "math": "unknown"}
    assert sft_table(aggregates, 3) == {"code": "A"}
    state = RouterState(aggregates=aggregates, sft=sft_table(aggregates, 3))
    assert route(CODE, ["B", "A"], {}, policy="sft", state=state, min_samples=3).model == "A"
    assert route("Hi", ["B", "S"], {"B": 1.0, "S": 9.0}, policy="sft", state=state).model == "B"


def test_aggregate_late_feedback() -> None:
    before = Aggregate.of("success")
    total = Aggregate().plus(before).plus(Aggregate.of("failure", 0.2, 0.1))
    corrected = total.minus(before).plus(Aggregate.of("success", 0.8, 0.9))
    assert corrected.reward_sum == pytest.approx(1.0)
    assert corrected == Aggregate(count=2, successes=1, outcomes_known=2, feedback_sum=1.0,
                                  feedback_n=2, reward_sum=corrected.reward_sum, reward_n=2)
    assert corrected.mean_feedback == pytest.approx(0.5) and corrected.success_rate == 0.5
    assert Aggregate().success_rate == 0.0 and Aggregate().mean_feedback is None


# --------------------------------------------------------------------------- bandit and grpo

QUERY = "def foo(): pass"
PAIR = ["B", "A"]  # the worse model first, so order cannot be what makes A win


def _synthetic(model: str, rng: random.Random) -> float:
    return min(max(rng.gauss(0.8 if model == "A" else 0.3, 0.1), 0.0), 1.0)


def _share_of_a(policy_name: str, state: RouterState) -> float:
    picks = [route(QUERY, PAIR, {}, policy=policy_name, state=state,
                   decision_id=f"eval-{i}").model for i in range(500)]
    return picks.count("A") / len(picks)


def test_bandit_converges() -> None:
    rng = random.Random(1)
    state = RouterState()
    assert 0.3 < _share_of_a("bandit", state) < 0.7  # a cold start is a fair lottery
    for i in range(80):
        model = route(QUERY, PAIR, {}, policy="bandit", state=state, decision_id=f"t{i}").model
        state = RouterState(aggregates=observe(state.aggregates, "code", model, None, None,
                                               _synthetic(model, rng)))
    assert _share_of_a("bandit", state) >= 0.9
    assert Bandit().table(state) == {"code": "A"}
    # B was explored, not just ignored
    assert state.aggregates[("code", "B")].reward_n >= 1


def test_grpo_converges() -> None:
    rng = random.Random(2)
    state = RouterState()
    assert 0.3 < _share_of_a("grpo", state) < 0.7
    for n in range(40):
        group = []
        for j in range(8):
            model = route(QUERY, PAIR, {}, policy="grpo", state=state,
                          decision_id=f"g{n}-{j}").model
            group.append((model, _synthetic(model, rng)))
        state = RouterState(grpo=grpo_update(state.grpo, "code", group))
    assert _share_of_a("grpo", state) >= 0.9
    assert GRPO().table(state) == {"code": "A"}
    assert state.grpo[("code", "A")] > 0 > state.grpo[("code", "B")]


def test_grpo_update_rules() -> None:
    assert grpo_update({}, "code", [("A", 0.9)]) == {}  # a group of one says nothing
    assert grpo_update({}, "code", [("A", 0.5), ("B", 0.5)]) == {}  # nor equal rewards
    # advantages ±1, each scaled by lr / G = 0.5 / 2
    assert grpo_update({}, "code", [("A", 0.9), ("B", 0.1)]) == {
        ("code", "A"): pytest.approx(0.25), ("code", "B"): pytest.approx(-0.25)}
    # other classes and absent models keep their weights; the clip holds
    weights = {("math", "A"): 1.0, ("code", "C"): 0.3, ("code", "A"): 4.9}
    updated = grpo_update(weights, "code", [("A", 1.0), ("B", 0.0)], learning_rate=10)
    assert updated[("math", "A")] == 1.0 and updated[("code", "C")] == 0.3
    assert updated[("code", "A")] == 5.0 and updated[("code", "B")] == -5.0
    groups, left = group_rewards([("code", "A", 0.1), ("math", "A", 0.2), ("code", "B", 0.3)],
                                 group_size=2)
    assert groups == [("code", [("A", 0.1), ("B", 0.3)])]
    assert left == {"math": [("A", 0.2)]}


def test_sampling_is_seeded_by_decision_id() -> None:
    assert rng_for("x").random() == rng_for("x").random() != rng_for("y").random()
    for name in ("bandit", "grpo"):
        picks = {route(QUERY, PAIR, {}, policy=name, decision_id=f"d{i}").model
                 for i in range(40)}
        assert picks == {"A", "B"}  # different ids, different draws


# --------------------------------------------------------------------------- registry


def test_registry() -> None:
    assert set(POLICIES) == {"heuristic", "learned", "sft", "bandit", "grpo"}
    assert isinstance(policy_for("learned", min_samples=3), Learned)
    assert policy_for("learned", min_samples=3).name == "learned"
    with pytest.raises(UnknownPolicy) as error:
        policy_for("nope")
    for name in POLICIES:
        assert name in str(error.value)


# --------------------------------------------------------------------------- properties

_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
_models = st.lists(_names, min_size=1, max_size=5)
_size = st.one_of(st.none(), st.floats(min_value=0.01, max_value=1000))


@st.composite
def _state(draw: st.DrawFn, models: list[str]) -> RouterState:
    aggregates: dict[tuple[str, str], Aggregate] = {}
    grpo: dict[tuple[str, str], float] = {}
    for model in models:
        for cls in draw(st.lists(st.sampled_from(["code", "math", "short", "long", "general"]),
                                 max_size=3)):
            n = draw(st.integers(1, 20))
            wins = draw(st.integers(0, n))
            aggregates[(cls, model)] = Aggregate(
                count=n, successes=wins, outcomes_known=n, feedback_sum=wins * 0.9,
                feedback_n=wins, reward_sum=draw(st.floats(0, n)), reward_n=n)
            grpo[(cls, model)] = draw(st.floats(-5, 5))
    learned = learn(aggregates, draw(st.integers(0, 10)))
    return RouterState(aggregates=aggregates, learned=learned, sft=sft_table(aggregates, 2),
                       grpo=grpo)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), query=st.text(max_size=700), models=_models,
       urgency=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
       policy=st.sampled_from(sorted(POLICIES)), decision_id=st.text(max_size=20))
def test_choose_is_total_and_deterministic(data: st.DataObject, query: str, models: list[str],
                                           urgency: float | None, policy: str,
                                           decision_id: str) -> None:
    sizes = {m: data.draw(_size) for m in models}
    state = data.draw(_state(models))
    default = data.draw(st.one_of(st.none(), st.sampled_from(models), _names))
    fallback = data.draw(st.one_of(st.none(), st.sampled_from(models), _names))
    ctx = build_context(query, urgency)
    chosen = policy_for(policy).choose(ctx, models, sizes, default, fallback, state, decision_id)
    assert chosen.model in models
    assert chosen.reason
    again = policy_for(policy).choose(build_context(query, urgency), list(models), dict(sizes),
                                      default, fallback, state, decision_id)
    assert again == chosen


@settings(max_examples=100, deadline=None)
@given(query=st.text(max_size=2000), urgency=st.one_of(st.none(), st.floats()))
def test_context_never_raises(query: str, urgency: float | None) -> None:
    ctx = build_context(query, urgency)
    assert 0.0 <= ctx.urgency <= 1.0
    assert query_class(ctx) in {"code", "math", "short", "long", "general"}
    assert isinstance(ctx.language, str) and ctx.language


@settings(max_examples=100, deadline=None)
@given(latency=st.one_of(st.none(), st.floats()), cost=st.one_of(st.none(), st.floats()),
       prompt=st.one_of(st.none(), st.integers(-10, 10**6)),
       completion=st.one_of(st.none(), st.integers(-10, 10**6)),
       feedback=st.one_of(st.none(), st.floats()),
       outcome=st.sampled_from([None, "success", "failure", "error", "other"]))
def test_reward_in_unit_interval(latency: float | None, cost: float | None, prompt: int | None,
                                 completion: int | None, feedback: float | None,
                                 outcome: str | None) -> None:
    assert 0.0 <= reward(latency, cost, prompt, completion, feedback, outcome) <= 1.0
