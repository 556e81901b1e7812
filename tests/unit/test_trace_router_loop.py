"""The behaviour loop's pure parts in the trace router: the conservative online switch, the
in-context section within its budget, and advice as an event with a stable digest."""

from __future__ import annotations

from habitus.routing.context import build_context
from habitus.routing.policies import Aggregate, RouterState, online_switch, policy_for
from habitus.routing.sizes import resolve
from services.trace_router.in_context import section
from services.trace_router.insights import Advice, Example, Recommendation, Skill
from services.trace_router.rpc import advice_event


def test_the_online_switch_maps_on_good_successes_only_and_freezes_at_the_threshold() -> None:
    seen = [("short", "m0", "failure", 0.2),   # a bad first trace maps nothing
            ("short", "m1", "success", 0.9),   # -> m1
            ("short", "m2", "success", 0.8),   # -> m2
            ("short", "m3", "failure", None),  # stays m2; the class now has 4 traces
            ("short", "m4", "success", 0.95),  # below 5: -> m4
            ("short", "m5", "success", 0.99),  # the 6th: frozen
            ("code", "c1", "success", 0.7),    # not above 0.7
            ("code", "c2", "success", None)]   # unrated
    assert online_switch(seen, min_samples=5) == {"short": "m4"}
    assert online_switch(seen, min_samples=3) == {"short": "m2"}
    assert online_switch([]) == {}


def test_the_learned_policy_uses_the_switch_only_when_asked_and_offered() -> None:
    models, sizes = resolve(["gpt-4o", "llama3.2:3b"])
    ctx = build_context("hi there")
    state = RouterState(aggregates={("short", "gpt-4o"): Aggregate(2, 2, 2, 1.8, 2, 1.5, 2)},
                        online={"short": "gpt-4o"})
    off = policy_for("learned").choose(ctx, models, sizes, None, None, state, "d")
    assert off.model == "llama3.2:3b" and off.reason.startswith("heuristic (only 2 short")
    on = policy_for("learned", online=True).choose(ctx, models, sizes, None, None, state, "d")
    assert on.model == "gpt-4o" and on.propensity == 1.0
    assert on.reason == ("learned online (only 2 short traces, 5 needed): gpt-4o had the "
                         "latest short success rated above 0.7")
    elsewhere, _ = resolve(["llama3.2:3b", "qwen3:8b"])
    assert policy_for("learned", online=True).choose(
        ctx, elsewhere, sizes, None, None, state, "d").reason.startswith("heuristic")


def _example(n: int, query: str) -> Example:
    return Example(f"t{n}", query, ("search", "python"), 0.9)


def test_the_in_context_section_keeps_whole_blocks_within_the_budget() -> None:
    examples = [(_example(1, "def parse(line): split on commas"), "Use csv.reader. " * 50),
                (_example(2, "import os; list the files"), "")]
    skills = [Skill(("search", "python"), 4, 3, 0.9), Skill(("python", "shell"), 3, 2, None)]
    whole = section("code", examples, skills, 10_000)
    assert whole.text.startswith("Worked examples of similar code requests that went well:")
    assert whole.examples == ("t1", "t2") and whole.skills == ("search -> python",
                                                                "python -> shell")
    assert "Answer began: Use csv.reader." in whole.text and whole.text.count("…") == 1
    assert "- search -> python (worked 4 times)" in whole.text
    for budget in (0, 40, 120, 300, 600, len(whole.text)):
        cut = section("code", examples, skills, budget)
        assert len(cut.text) <= budget
        assert not cut.text.endswith(":")  # never a heading without what it heads
    # the long first example does not fit 300 characters, the short second does
    assert section("code", examples, [], 300).examples == ("t2",)
    assert section("code", [], [], 10_000).text == ""


def test_advice_is_an_event_whose_digest_moves_with_the_advice_only() -> None:
    routing = Recommendation("routing", "Query class 'code' has 3 failures (models: a)",
                             "Failures by model: a (3).", ("t3", "t2", "t1"))
    first = advice_event(Advice(10, 3, 0.7, [routing]))
    more = Recommendation("routing", "Query class 'code' has 4 failures (models: a)",
                          "Failures by model: a (4).", ("t4", "t3", "t2", "t1"))
    again = advice_event(Advice(12, 4, 0.66, [more]))
    assert first.digest == again.digest and first.recommendations[0].kind == "routing"
    moved = Recommendation("routing", "Query class 'code' has 4 failures (models: a, b)",
                           "Failures by model: a (3), b (1).", ("t4",))
    assert advice_event(Advice(12, 4, 0.66, [moved])).digest != first.digest
    other = advice_event(Advice(12, 4, 0.66, []))
    assert other.digest != first.digest and other.recommendations == []
