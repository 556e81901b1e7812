"""Ranking models the router knows little about: the price catalogue, the order-free "largest"
and "smallest", the default policy, and reasons that name the facts they rest on."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from habitus.routing.context import build_context
from habitus.routing.policies import (
    DEFAULT_POLICY,
    Aggregate,
    RouterState,
    heuristic_choice,
    learn,
    observe,
    policy_for,
    sft_table,
)
from habitus.routing.prices import (
    Price,
    build_table,
    catalogue,
    catalogue_path,
    entry_price,
    lookup,
    price_of,
)
from habitus.routing.sizes import (
    Sizes,
    known,
    largest,
    pick_largest,
    pick_smallest,
    resolve,
    smallest,
)
from services.trace_router.settings import RouterSettings

CODE = "import os; def main(): pass"
MATH = "solve the integral of x^2 from 0 to 1"
SHORT = "Hi"
GENERAL = "Tell me about the history of the Roman empire and the causes of its fall"


def no_prices(name: str) -> Price | None:
    return None


# --------------------------------------------------------------------------- the catalogue


def test_the_catalogue_is_read_without_importing_tokencost() -> None:
    # a fresh interpreter: this process may have imported anything
    script = ("import sys; from habitus.routing.prices import price_of; "
              "p = price_of('gpt-4o'); assert p is not None, 'no price'; "
              "print('tokencost' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"
    path = catalogue_path()
    assert path is not None and path.name == "model_prices.json"
    assert catalogue() is catalogue()  # read once


def test_entry_prices_are_text_models_with_a_positive_price() -> None:
    assert entry_price({"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6,
                        "mode": "chat"}) == pytest.approx(3e-6)
    assert entry_price({"input_cost_per_token": 1e-6, "output_cost_per_token": 0}) == \
        pytest.approx(1e-6)  # no mode: counts
    for entry in ({"input_cost_per_token": 0, "output_cost_per_token": 0},  # free: no signal
                  {"input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6,
                   "mode": "image_generation"},
                  {"input_cost_per_token": "1", "output_cost_per_token": 1e-6},
                  {"input_cost_per_token": True, "output_cost_per_token": 1e-6},
                  {"input_cost_per_token": float("nan"), "output_cost_per_token": 1e-6},
                  {"input_cost_per_token": -1e-6, "output_cost_per_token": 2e-6},
                  {"output_cost_per_token": 1e-6}, "not an entry", None):
        assert entry_price(entry) is None, entry


def _entry(per_million: float) -> dict[str, object]:
    return {"input_cost_per_token": per_million / 2e6, "output_cost_per_token": per_million / 2e6,
            "mode": "chat"}


TABLE = build_table({
    "gpt-x": _entry(10), "GPT-X-Mini": _entry(1), "openai/gpt-x": _entry(10),
    "claude-y-20240101": _entry(3), "claude-y-20250101": _entry(15),
    "claude-z-latest": _entry(6), "claude-z-20240101": _entry(4),
    "vertex_ai/claude-w@20240101": _entry(5),
    "host-a/big-r1": _entry(1), "host-b/org/big-r1": _entry(7), "host-c/big-r1": _entry(12),
    "ollama/free": _entry(0), "dall-e": {**_entry(5), "mode": "image_generation"},
    "sample_spec": {"input_cost_per_token": "0.0"}, 42: _entry(1),
})


@pytest.mark.parametrize(("name", "entry"), [
    ("gpt-x", "gpt-x"),
    ("  GPT-x ", "gpt-x"),  # case and blanks do not matter
    ("gpt-x-mini", "GPT-X-Mini"),  # the entry as the catalogue spells it
    ("openai/gpt-x", "openai/gpt-x"),
    ("azure/gpt-x", "gpt-x"),  # an unknown provider prefix: the bare name
    ("gpt-x:latest", "gpt-x"),
    ("claude-y", "claude-y-20250101"),  # undated: the newest release
    ("claude-y-20240101", "claude-y-20240101"),
    ("claude-y-2031-05-06", "claude-y-20250101"),  # a release it lacks: the undated name
    ("claude-z", "claude-z-latest"),  # the -latest entry before the newest dated one
    ("claude-z-20240101", "claude-z-20240101"),
    ("vertex_ai/claude-w", "vertex_ai/claude-w@20240101"),
    ("big-r1", "host-b/org/big-r1"),  # sold by three hosts: the median price
    ("free", None), ("ollama/free", None), ("dall-e", None), ("sample_spec", None),
    ("unknown-model", None), ("", None), ("/", None),
])
def test_lookup(name: str, entry: str | None) -> None:
    found = lookup(name, TABLE)
    assert (found.entry if found is not None else None) == entry


def test_the_shipped_catalogue_prices_hosted_models() -> None:
    gpt4o, mini = price_of("gpt-4o"), price_of("gpt-4o-mini")
    assert gpt4o is not None and mini is not None
    assert gpt4o.per_million == pytest.approx(12.5)
    assert mini.per_million == pytest.approx(0.75)
    prefixed = price_of("openai/gpt-4o")
    assert prefixed is not None and prefixed.per_token == gpt4o.per_token
    dated = price_of("gpt-4o-2024-08-06")
    assert dated is not None and dated.per_token == gpt4o.per_token
    sonnet, haiku = price_of("claude-sonnet-4"), price_of("claude-3-5-haiku")
    assert sonnet is not None and haiku is not None
    assert sonnet.entry.startswith("claude-sonnet-4-")  # undated: found by its release
    assert sonnet.per_token > haiku.per_token
    assert price_of("qwen3:8b") is None


# --------------------------------------------------------------------------- ranking


def test_price_ranks_models_of_unknown_size() -> None:
    for models in (["gpt-4o-mini", "gpt-4o"], ["gpt-4o", "gpt-4o-mini"]):
        names, sizes = resolve(models)
        assert largest(names, sizes) == "gpt-4o"
        assert smallest(names, sizes) == "gpt-4o-mini"
    for sonnet, haiku in (("claude-sonnet-4", "claude-3-5-haiku"),
                          ("anthropic/claude-sonnet-4", "claude-3-haiku")):
        for models in ([sonnet, haiku], [haiku, sonnet]):
            names, sizes = resolve(models)
            assert largest(names, sizes) == sonnet
            assert smallest(names, sizes) == haiku


def test_size_comes_before_price_and_a_known_price_before_none() -> None:
    names, sizes = resolve(["gpt-4o", "qwen3:8b", "llama3.2:3b"])
    assert largest(names, sizes) == "gpt-4o"  # unknown size: a hosted model
    assert smallest(names, sizes) == "llama3.2:3b"  # a sized model before any unknown one
    names, sizes = resolve(["my-private-model", "gpt-4o-mini"])
    assert largest(names, sizes) == smallest(names, sizes) == "gpt-4o-mini"
    # equal sizes: the price breaks the tie, then the name
    prices = {"a": Price("a", 2e-6), "b": Price("b", 1e-6)}
    equal: Sizes = {"a": 8.0, "b": 8.0, "c": 8.0}
    assert largest(["c", "b", "a"], equal, prices.get) == "a"
    assert smallest(["c", "b", "a"], equal, prices.get) == "b"
    assert largest(["c", "d"], {"c": 8.0, "d": 8.0}, no_prices) == "c"


def test_sizes_that_are_no_sizes_are_unknown() -> None:
    for bad in (0.0, -3.0, float("nan"), float("inf")):
        assert known("x", {"x": bad}, no_prices).size is None
    assert largest(["x", "y"], {"x": float("nan"), "y": 3.0}, no_prices) == "x"


def test_a_repeated_model_keeps_the_larger_given_size_whatever_comes_first() -> None:
    entries: list[str | dict[str, object]] = ["m", {"name": "m", "parameter_count_b": 30},
                                              {"name": "m", "parameter_count_b": 7}]
    for order in itertools.permutations(entries):
        assert resolve(list(order)) == (("m",), {"m": 30.0})


# --------------------------------------------------------------------------- reasons


def test_reasons_name_the_facts() -> None:
    names, sizes = resolve(["gpt-4o-mini", "gpt-4o"])
    choice = heuristic_choice(build_context(CODE), names, sizes, None, None)
    assert choice.model == "gpt-4o"
    assert choice.reason.startswith("code, no code model: the priciest model")
    assert "gpt-4o $12.50 per 1M tokens vs gpt-4o-mini $0.75 per 1M tokens" in choice.reason
    assert "largest" not in choice.reason  # it was chosen by price, not by a size

    names, sizes = resolve(["llama3.2:3b", "qwen3:8b"])
    choice = heuristic_choice(build_context(MATH), names, sizes, None, None)
    assert choice.reason == ("math: the largest model: qwen3:8b 8B from its name vs "
                             "llama3.2:3b 3B from its name")

    names, sizes = resolve(["codestral", {"name": "deepseek-coder-v2", "parameter_count_b": 236}])
    choice = heuristic_choice(build_context(CODE), names, sizes, None, None)
    assert choice.model == "deepseek-coder-v2"
    assert choice.reason == ("code: of 2 code models: the largest model: deepseek-coder-v2 "
                             "236B as given vs codestral 22B from the size catalogue")

    names, sizes = resolve(["qwen3:8b", "gpt-4o"])
    choice = heuristic_choice(build_context(SHORT, 0.95), names, sizes, None, None)
    assert choice.model == "qwen3:8b"
    assert choice.reason == ("urgency 0.95 > 0.8: the smallest model (a sized model goes before "
                             "any of unknown size): qwen3:8b 8B from its name vs gpt-4o size "
                             "unknown")

    sonnet = pick_largest(*resolve(["claude-3-5-haiku", "claude-sonnet-4"]))
    assert sonnet is not None and sonnet.model == "claude-sonnet-4"
    assert "(catalogue entry claude-sonnet-4-" in sonnet.why  # where the price came from

    tie = pick_smallest(["b", "a"], {}, no_prices)
    assert tie is not None and tie.why == ("the first by name (both of unknown size, no "
                                           "catalogue price): a before b")
    alone = pick_largest(["qwen3:8b"], {"qwen3:8b": 8.0}, no_prices)
    assert alone is not None and alone.why == "qwen3:8b, the only model offered (8B from its name)"


def test_prices_are_shown_with_enough_digits_to_differ() -> None:
    prices = {"a": Price("a", 1.2345e-9), "b": Price("b", 1.2341e-9)}
    why = pick_largest(["a", "b"], {}, prices.get)
    assert why is not None and why.model == "a"
    shown = why.why.split(": ", 1)[1]
    a_text, b_text = shown.split(" vs ")
    assert a_text.removeprefix("a ") != b_text.removeprefix("b ")
    assert "$0.00 " not in shown


# --------------------------------------------------------------------------- the default policy


def _code_traces(winner: str, loser: str, each: int) -> dict[tuple[str, str], Aggregate]:
    aggregates: dict[tuple[str, str], Aggregate] = {}
    for _ in range(each):
        aggregates = observe(aggregates, "code", winner, "success", 0.9)
        aggregates = observe(aggregates, "code", loser, "failure", 0.3)
    return aggregates


def test_the_default_policy_is_learned_with_the_heuristic_per_class() -> None:
    assert RouterSettings().default_policy == DEFAULT_POLICY == "learned"
    policy = policy_for(DEFAULT_POLICY, min_samples=5)
    names, sizes = resolve(["gpt-4o-mini", "gpt-4o"])
    ctx = build_context(CODE)

    few = RouterState(aggregates=_code_traces("gpt-4o-mini", "gpt-4o", 1))
    early = policy.choose(ctx, names, sizes, None, None, few, "d")
    heuristic = heuristic_choice(ctx, names, sizes, None, None)
    assert (early.model, early.reason) == (
        heuristic.model, f"heuristic (only 2 code traces, 5 needed): {heuristic.reason}")

    # enough traces, and the published table does not have the class yet: learned at once
    many = _code_traces("gpt-4o", "gpt-4o-mini", 12)
    fresh = policy.choose(ctx, names, sizes, None, None, RouterState(aggregates=many), "d")
    assert fresh.model == "gpt-4o"
    assert fresh.reason == ("learned from 24 code traces: gpt-4o 0.96 vs gpt-4o-mini 0.12 "
                            "(not in the published table yet)")
    published = RouterState(aggregates=many, learned=learn(many, 5))
    assert policy.choose(ctx, names, sizes, None, None, published, "d").reason == (
        "learned from 24 code traces: gpt-4o 0.96 vs gpt-4o-mini 0.12")

    # the traces now favour the heuristic's pick, but the table has not been relearned
    stale = RouterState(aggregates=_code_traces("gpt-4o-mini", "gpt-4o", 12),
                        learned={"code": "gpt-4o"})
    behind = policy.choose(ctx, names, sizes, None, None, stale, "d")
    assert behind.model == "gpt-4o"
    assert behind.reason.endswith("the published table's choice, until the next relearn")

    # a table entry whose class fell below the threshold (a user erased) is not used
    erased = RouterState(aggregates=_code_traces("gpt-4o", "gpt-4o-mini", 1),
                         learned={"code": "gpt-4o-mini"})
    assert policy.choose(ctx, names, sizes, None, None, erased, "d").reason.startswith(
        "heuristic (only 2 code traces, 5 needed)")

    # the table's model is not offered: the best offered one, said so
    other = policy.choose(ctx, ["gpt-4o-mini", "qwen3:8b"], {"qwen3:8b": 8.0}, None, None,
                          published, "d")
    assert other.model == "gpt-4o-mini"
    assert other.reason == ("learned from 24 code traces: gpt-4o-mini 0.12 vs qwen3:8b (no code "
                            "traces) (the table's gpt-4o is not offered)")


def test_sft_says_which_models_lack_traces() -> None:
    few = _code_traces("a", "b", 2)
    choice = policy_for("sft", min_samples=3).choose(
        build_context(CODE), ["a", "b"], {}, None, None,
        RouterState(aggregates=few, sft=sft_table(few, 3)), "d")
    assert choice.reason.startswith("heuristic (no model has 3 code traces yet, the most is 2)")


# --------------------------------------------------------------------------- order does not matter

_POOL = ["gpt-4o", "gpt-4o-mini", "openai/gpt-4o", "claude-sonnet-4", "claude-3-5-haiku",
         "qwen3:8b", "qwen3:14b", "llama3.2:3b", "codestral", "deepseek-coder-v2:16b",
         "qwen2.5-coder:7b", "my-private-model", "other-private-model", "mixtral:8x7b"]
_QUERIES = [CODE, MATH, SHORT, GENERAL, "x" * 501,
            "Please explain step by step how the process of photosynthesis works in plants"]
_names = st.one_of(st.sampled_from(_POOL), st.text(min_size=1, max_size=10))
_models = st.lists(_names, min_size=1, max_size=6, unique=True)
_entries = st.one_of(
    _names, st.builds(lambda n, b: {"name": n, "parameter_count_b": b}, _names,
                      st.one_of(st.none(), st.floats(0.1, 500), st.just(0))))


def _permutations(data: st.DataObject, models: Sequence[str]) -> list[list[str]]:
    return [list(models), list(reversed(models)), data.draw(st.permutations(models))]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), models=_models)
def test_largest_and_smallest_ignore_the_order(data: st.DataObject, models: list[str]) -> None:
    sizes = {m: data.draw(st.one_of(st.none(), st.floats(0.1, 100)), label=m) for m in models}
    first_l, first_s = pick_largest(models, sizes), pick_smallest(models, sizes)
    for order in _permutations(data, models):
        assert pick_largest(order, sizes) == first_l
        assert pick_smallest(order, sizes) == first_s


@settings(max_examples=200, deadline=None)
@given(data=st.data(), entries=st.lists(_entries, min_size=1, max_size=6),
       query=st.one_of(st.sampled_from(_QUERIES), st.text(max_size=600)),
       urgency=st.one_of(st.none(), st.floats(0, 1)),
       policy=st.sampled_from(["heuristic", "learned", "sft"]))
def test_the_heuristic_and_the_table_policies_ignore_the_order(
        data: st.DataObject, entries: list[str | dict[str, object]], query: str,
        urgency: float | None, policy: str) -> None:
    names, sizes = resolve(entries)
    if not names:
        return
    default = data.draw(st.one_of(st.none(), _names, st.sampled_from(names)))
    fallback = data.draw(st.one_of(st.none(), _names, st.sampled_from(names)))
    aggregates: dict[tuple[str, str], Aggregate] = {}
    for model in data.draw(st.lists(st.sampled_from(names), max_size=12)):
        aggregates = observe(aggregates, data.draw(st.sampled_from(["code", "short", "math"])),
                             model, data.draw(st.sampled_from(["success", "failure", None])),
                             data.draw(st.one_of(st.none(), st.floats(0, 1))))
    state = RouterState(aggregates=aggregates, learned=learn(aggregates, 2),
                        sft=sft_table(aggregates, 2))
    chooser = policy_for(policy, **({} if policy == "heuristic" else {"min_samples": 3}))
    ctx = build_context(query, urgency)
    first = chooser.choose(ctx, list(names), sizes, default, fallback, state, "d")
    assert first.model in names
    for order in _permutations(data, names):
        again = chooser.choose(ctx, order, sizes, default, fallback, state, "d")
        assert (again.model, again.reason, dict(again.scores)) == (
            first.model, first.reason, dict(first.scores))
    reordered = resolve(list(reversed(entries)))
    assert reordered[1] == sizes


def test_an_urgent_request_gets_the_fastest_model_even_where_traces_favour_another() -> None:
    # the learned default must not take away "answer now": urgency trades quality for speed
    policy = policy_for(DEFAULT_POLICY, min_samples=5)
    names, sizes = resolve(["gpt-4o", "gpt-4o-mini"])
    many = _code_traces("gpt-4o", "gpt-4o-mini", 12)
    state = RouterState(aggregates=many, learned=learn(many, 5))
    calm = policy.choose(build_context(CODE, 0.2), names, sizes, None, None, state, "d")
    assert calm.model == "gpt-4o"
    urgent = policy.choose(build_context(CODE, 0.95), names, sizes, None, None, state, "d")
    assert urgent.model == "gpt-4o-mini"
    assert urgent.reason.startswith("heuristic (urgent: speed before what the traces favour): "
                                    "urgency 0.95 > 0.8")
