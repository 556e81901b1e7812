"""Trace router, advisor and ICL views (services/trace_router/insights.py).

The issue's ICL vector, realistic mixes for each view, and the seed's defects we must not repeat
(section 2 of the openjarvis reference): unscored traces counted as 0.5, steps without a tool
name mined as the skill " -> ", and answers that depend on the order the store returned.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from services.trace_router.insights import (
    AGENT_STRUCTURE,
    MAX_EVIDENCE,
    ROUTING,
    Advice,
    Example,
    Skill,
    TraceFacts,
    examples,
    is_problem,
    qualifies,
    recommendations,
    skills,
    windows,
)

T0 = 1_700_000_000.0


def _t(
    trace_id: str,
    tools: tuple[str, ...] = (),
    *,
    outcome: str | None = "success",
    feedback: float | None = None,
    latency: float = 1.0,
    model: str = "qwen3:8b",
    agent: str = "orchestrator",
    query_class: str = "general",
    query: str | None = None,
    at: float | None = None,
) -> TraceFacts:
    return TraceFacts(
        trace_id=trace_id,
        query=query if query is not None else f"query {trace_id}",
        model=model,
        agent=agent,
        outcome=outcome,
        feedback=feedback,
        latency_seconds=latency,
        tool_sequence=tools,
        query_class=query_class,
        ended_at=at if at is not None else T0,
    )


def _icl_vector() -> list[TraceFacts]:
    """The issue's ICL acceptance vector (q0..q4, all successful, q1 unscored)."""
    s, c = "search", "calc"
    return [
        _t("q0", (s, c, s, c), feedback=0.9, at=T0),
        _t("q1", (s, c), feedback=None, at=T0 + 1),
        _t("q2", (s, c), feedback=0.8, at=T0 + 2),
        _t("q3", (c,), feedback=0.95, at=T0 + 3),
        _t("q4", (s, c), feedback=0.7, at=T0 + 4),
    ]


# --------------------------------------------------------------------------- ICL acceptance


def test_acceptance_skill_search_calc_seen_four_times() -> None:
    found = skills(_icl_vector())
    assert [(k.name, k.count) for k in found] == [("search -> calc", 4)]
    (skill,) = found
    assert skill.sequence == ("search", "calc")
    assert skill.traces == 3  # q0 (twice), q2, q4
    assert skill.mean_feedback == pytest.approx((0.9 + 0.8 + 0.7) / 3)


def test_acceptance_examples_order_matches_the_seed() -> None:
    got = examples(_icl_vector())
    assert [e.trace_id for e in got] == ["q3", "q0", "q2", "q4"]
    assert got[0] == Example("q3", "query q3", ("calc",), 0.95)


def test_acceptance_vector_in_any_order_gives_the_same_answers() -> None:
    vector = _icl_vector()
    assert skills(list(reversed(vector))) == skills(vector)
    assert examples(list(reversed(vector))) == examples(vector)


# --------------------------------------------------------------------------- examples


def test_examples_keep_only_scored_successes_with_a_tool_call() -> None:
    traces = [
        _t("ok", ("search",), feedback=0.8),
        _t("no-tools", (), feedback=1.0),
        _t("failed", ("search",), outcome="failure", feedback=0.9),
        _t("partial", ("search",), outcome="partial", feedback=0.9),
        _t("no-outcome", ("search",), outcome=None, feedback=0.9),
        _t("low", ("search",), feedback=0.69),
        _t("edge", ("calc",), feedback=0.7),
        _t("unscored", ("search",)),
        _t("nan", ("search",), feedback=math.nan),
        _t("out-of-range", ("search",), feedback=7.0),
    ]
    assert [e.trace_id for e in examples(traces)] == ["ok", "edge"]


def test_unscored_traces_are_not_half_good() -> None:
    # the seed scores missing feedback 0.5, so a 0.5 threshold let every unscored trace in
    traces = [_t("unscored", ("search",)), _t("scored", ("search",), feedback=0.5)]
    assert [e.trace_id for e in examples(traces, min_feedback=0.5)] == ["scored"]


def test_examples_ties_go_to_the_newest_then_the_id() -> None:
    traces = [
        _t("old", ("a",), feedback=0.9, at=T0),
        _t("new", ("a",), feedback=0.9, at=T0 + 60),
        _t("b-same", ("a",), feedback=0.9, at=T0 + 60),
        _t("best", ("a",), feedback=1.0, at=T0 - 600),
    ]
    assert [e.trace_id for e in examples(traces)] == ["best", "b-same", "new", "old"]


def test_examples_are_capped_at_twenty_by_default_and_at_the_limit() -> None:
    traces = [_t(f"t{i:02}", ("search",), feedback=0.7 + i / 100, at=T0 + i) for i in range(30)]
    assert len(examples(traces)) == 20
    assert examples(traces)[0].trace_id == "t29"
    assert [e.trace_id for e in examples(traces, limit=2)] == ["t29", "t28"]
    assert examples(traces, limit=0) == []
    assert examples(traces, limit=-1) == []  # not "all but the last"


# --------------------------------------------------------------------------- skills


def test_windows_are_contiguous_two_to_four_overlapping() -> None:
    assert windows(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("a", "b", "c")]
    assert windows(["a", "a", "a"]) == [("a", "a"), ("a", "a"), ("a", "a", "a")]
    assert windows(["a"]) == []
    assert len(windows(list("abcdef"))) == 5 + 4 + 3  # nothing longer than 4


def test_steps_without_a_tool_name_make_no_skill() -> None:
    # the seed read a key the collector never wrote and mined the skill " -> "
    traces = [_t(f"t{i}", ("", "", "search", "calc"), feedback=0.9) for i in range(3)]
    assert [k.name for k in skills(traces)] == ["search -> calc"]


def test_skills_order_by_count_then_length_then_name() -> None:
    plan = ("search", "fetch", "summarise")
    traces = [_t(f"p{i}", plan, feedback=0.9) for i in range(3)]
    traces += [_t(f"c{i}", ("calc", "plot"), feedback=0.8) for i in range(3)]
    traces += [_t(f"x{i}", ("search", "fetch"), feedback=0.75) for i in range(2)]
    got = [(k.name, k.count) for k in skills(traces)]
    assert got == [
        ("search -> fetch", 5),
        ("search -> fetch -> summarise", 3),
        ("calc -> plot", 3),
        ("fetch -> summarise", 3),
    ]


def test_skill_mean_feedback_is_per_trace_and_min_count_is_honoured() -> None:
    traces = [
        _t("loop", ("search", "search", "search"), feedback=1.0),  # "search -> search" twice
        _t("once", ("search", "search"), feedback=0.7),
    ]
    (skill,) = skills(traces)
    assert (skill.name, skill.count, skill.traces) == ("search -> search", 3, 2)
    assert skill.mean_feedback == pytest.approx(0.85)  # one opinion per trace, not 1.0 twice
    assert [k.name for k in skills(traces, min_count=1)] == [
        "search -> search",
        "search -> search -> search",
    ]
    assert skills(traces, min_count=4) == []
    assert skills(traces, min_count=0) == skills(traces, min_count=1)


def test_unscored_skills_when_feedback_is_not_required() -> None:
    traces = [_t(f"t{i}", ("search", "calc")) for i in range(3)]
    assert skills(traces) == []
    assert skills(traces, min_feedback=None) == [Skill(("search", "calc"), 3, 3, None)]
    # the vector, every success mined: q1 joins, so the skill is seen 5 times
    (skill,) = skills(_icl_vector(), min_feedback=None)
    assert (skill.count, skill.traces) == (5, 4)
    assert skill.mean_feedback == pytest.approx(0.8)  # q1 has no feedback to average


def test_failed_traces_teach_no_skill() -> None:
    traces = [_t(f"f{i}", ("search", "calc"), outcome="failure", feedback=0.9) for i in range(5)]
    assert skills(traces) == []
    assert skills(traces, min_feedback=None) == []


# --------------------------------------------------------------------------- advisor


def test_advice_over_nothing_is_empty_and_confident() -> None:
    assert recommendations([]) == Advice(0, 0, 1.0, [])


def test_problem_traces_are_unsuccessful_or_slow() -> None:
    assert not is_problem(_t("fast", latency=5.0))
    assert is_problem(_t("slow", latency=5.01))
    assert is_problem(_t("failed", outcome="failure"))
    assert is_problem(_t("unknown", outcome="unknown"))
    assert is_problem(_t("none", outcome=None))


def test_seed_probe_store_gives_seventy_percent_and_no_advice() -> None:
    # the reference's 10-trace store: 3 problems (a failure, no outcome, a failure), 3 classes
    traces = [_t(f"a{i}", model="A", query_class="code") for i in range(3)]
    traces += [_t(f"b{i}", model="B", query_class="code", feedback=1.0) for i in range(2)]
    traces += [_t("b2", model="B", query_class="code", outcome="failure", feedback=0.0)]
    traces += [
        _t("hello", model="S", query_class="short", feedback=0.9),
        _t("hi", model="S", query_class="short", outcome=None),
        _t("hey", model="T", query_class="short", outcome="failure"),
        _t("solve", model="", query_class="math", feedback=1.0),
    ]
    advice = recommendations(traces)
    assert (advice.analyzed, advice.problems, advice.recommendations) == (10, 3, [])
    assert advice.confidence == pytest.approx(0.7)


def test_routing_names_the_class_the_failed_models_and_a_model_that_succeeded() -> None:
    traces = [
        _t("c1", model="qwen3:8b", query_class="code", outcome="failure", at=T0 + 1),
        _t("c2", model="qwen3:8b", query_class="code", outcome="failure", at=T0 + 2),
        _t("c3", model="llama3.2:3b", query_class="code", outcome="partial", at=T0 + 3),
        _t("c4", model="codestral", query_class="code", at=T0 + 4),
        _t("c5", model="codestral", query_class="code", at=T0 + 5),
        _t("c6", model="codestral", query_class="code", outcome="failure", at=T0 + 6),
        _t("c7", model="llama3.2:3b", query_class="code", at=T0 + 7),
        _t("c8", model="qwen3:8b", query_class="code", outcome="unknown", at=T0 + 8),
        # two failures in math and a slow success in general: neither is routing advice
        _t("m1", model="qwen3:8b", query_class="math", outcome="failure"),
        _t("m2", model="qwen3:8b", query_class="math", outcome="failure"),
        _t("g1", model="qwen3:8b", latency=12.0),
    ]
    advice = recommendations(traces)
    assert (advice.analyzed, advice.problems) == (11, 8)
    assert advice.confidence == pytest.approx(1 - 8 / 11)
    (rec,) = advice.recommendations
    assert rec.kind == ROUTING
    assert rec.summary == (
        "Query class 'code' has 4 failures (models: codestral, llama3.2:3b, qwen3:8b)"
    )
    assert "qwen3:8b (2), codestral (1), llama3.2:3b (1)" in rec.detail
    # codestral 2/3 beats llama3.2:3b 1/2; qwen3:8b's "unknown" is no evidence either way
    assert "codestral succeeded on 2 of its 3 traces" in rec.detail
    assert rec.evidence_trace_ids == ("c6", "c3", "c2", "c1")


def test_routing_without_any_success_names_no_model() -> None:
    traces = [_t(f"f{i}", model="m", query_class="long", outcome="failure") for i in range(3)]
    (rec,) = recommendations(traces).recommendations
    assert "No trace in this class succeeded" in rec.detail


def test_routing_classes_come_most_failures_first_then_by_name() -> None:
    traces = [_t(f"m{i}", query_class="math", outcome="failure") for i in range(3)]
    traces += [_t(f"c{i}", query_class="code", outcome="failure") for i in range(3)]
    traces += [_t(f"l{i}", query_class="long", outcome="failure") for i in range(4)]
    kinds = [r.summary.split("'")[1] for r in recommendations(traces).recommendations]
    assert kinds == ["long", "code", "math"]


def test_agent_structure_above_thirty_percent_of_problem_traces() -> None:
    many = ("search",) * 6
    problems = [
        _t("p1", many, outcome="failure", agent="researcher", at=T0 + 1),
        _t("p2", many, latency=9.0, agent="researcher", at=T0 + 2),
        _t("p3", ("search",) * 5, outcome="failure", at=T0 + 3),  # 5 calls is not "more than 5"
        _t("p4", (), outcome=None),
        _t("p5", ("calc",), outcome="failure", query_class="math"),
    ]
    healthy = [_t(f"ok{i}", many) for i in range(10)]  # many calls but fine: not counted
    advice = recommendations(problems + healthy)
    assert advice.problems == 5
    (rec,) = advice.recommendations  # 2 of 5 = 40 % > 30 %
    assert rec.kind == AGENT_STRUCTURE
    assert rec.summary == "2 of 5 problem traces (40 %) made more than 5 tool calls"
    assert "researcher (2)" in rec.detail
    assert rec.evidence_trace_ids == ("p2", "p1")


def test_agent_structure_at_exactly_thirty_percent_is_not_advised() -> None:
    many = ("search",) * 6
    problems = [_t(f"h{i}", many, outcome="failure", query_class=f"c{i}") for i in range(3)]
    problems += [_t(f"l{i}", (), outcome="failure", query_class=f"d{i}") for i in range(7)]
    assert recommendations(problems).recommendations == []


def test_structure_advice_comes_before_routing_and_evidence_is_capped() -> None:
    traces = [
        _t(f"f{i:02}", ("search",) * 7, outcome="failure", query_class="code", at=T0 + i)
        for i in range(30)
    ]
    recs = recommendations(traces).recommendations
    assert [r.kind for r in recs] == [AGENT_STRUCTURE, ROUTING]
    assert recs[1].summary.startswith("Query class 'code' has 30 failures")
    assert all(len(r.evidence_trace_ids) == MAX_EVIDENCE for r in recs)
    assert recs[1].evidence_trace_ids[0] == "f29"


# --------------------------------------------------------------------------- properties

_TOOLS = st.sampled_from(["search", "calc", "fetch", "", " "])
_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
_TRACES = st.lists(
    st.builds(
        TraceFacts,
        trace_id=st.text(max_size=4),
        query=st.text(max_size=10),
        model=st.sampled_from(["a", "b", "c"]),
        agent=st.sampled_from(["x", "y"]),
        outcome=st.sampled_from(["success", "failure", "partial", "unknown", None]),
        feedback=st.none() | st.floats(0, 1) | _FLOATS,
        latency_seconds=st.floats(0, 20) | _FLOATS,
        tool_sequence=st.lists(_TOOLS, max_size=8).map(tuple),
        query_class=st.sampled_from(["code", "math", "short", "long", "general"]),
        ended_at=st.floats(0, 2e9) | _FLOATS,
    ),
    max_size=25,
)


@hsettings(max_examples=300, deadline=None)
@given(_TRACES)
def test_advice_never_raises_and_counts_agree(traces: list[TraceFacts]) -> None:
    advice = recommendations(traces)
    assert advice.analyzed == len(traces)
    assert advice.problems == sum(is_problem(t) for t in traces)
    assert 0.0 <= advice.confidence <= 1.0
    ids = Counter(t.trace_id for t in traces)
    for rec in advice.recommendations:
        assert rec.kind in (AGENT_STRUCTURE, ROUTING)
        assert 0 < len(rec.evidence_trace_ids) <= MAX_EVIDENCE
        assert all(i in ids for i in rec.evidence_trace_ids)
    assert sum(r.kind == AGENT_STRUCTURE for r in advice.recommendations) <= 1


@hsettings(max_examples=300, deadline=None)
@given(_TRACES, st.integers(-3, 30))
def test_examples_are_at_most_limit_and_all_qualify(traces: list[TraceFacts], limit: int) -> None:
    got = examples(traces, limit)
    qualifying = [t for t in traces if qualifies(t)]
    assert len(got) == min(max(limit, 0), len(qualifying))
    by_id = {id(t): t for t in qualifying}
    assert len(by_id) == len(qualifying)
    for e in got:
        assert 0.7 <= e.feedback <= 1.0
        assert e.tool_sequence
    assert [e.feedback for e in got] == sorted((e.feedback for e in got), reverse=True)
    # nothing better was left out
    if got and len(got) < len(qualifying):
        left_best = sorted((t.feedback or 0.0 for t in qualifying), reverse=True)[len(got)]
        assert left_best <= got[-1].feedback


@hsettings(max_examples=300, deadline=None)
@given(_TRACES, st.integers(-1, 5), st.sampled_from([0.7, 0.0, None]))
def test_skill_counts_match_a_direct_count(
    traces: list[TraceFacts], min_count: int, min_feedback: float | None
) -> None:
    got = skills(traces, min_count, min_feedback=min_feedback)
    mined = [t for t in traces if qualifies(t, min_feedback)]
    for skill in got:
        n = len(skill.sequence)
        assert 2 <= n <= 4 and all(name.strip() for name in skill.sequence)
        occurrences = [
            sum(t.tool_sequence[i : i + n] == skill.sequence for i in range(len(t.tool_sequence)))
            for t in mined
        ]
        assert skill.count == sum(occurrences) >= max(min_count, 1)
        assert skill.traces == sum(o > 0 for o in occurrences) <= skill.count
        if skill.mean_feedback is not None:
            assert 0.0 <= skill.mean_feedback <= 1.0
        else:
            assert min_feedback is None
    keys = [(-k.count, -len(k.sequence), k.name) for k in got]
    assert keys == sorted(keys)
    assert len({k.sequence for k in got}) == len(got)
    assert skills(list(reversed(traces)), min_count, min_feedback=min_feedback) == got


def test_relearning_waits_for_the_traces_to_pause_but_not_forever() -> None:
    from services.trace_router.main import MAX_QUIET_WAIT_TICKS, relearn_due

    assert not relearn_due(at=10, relearned=10, previous=10, waited=0)  # nothing new
    assert not relearn_due(at=20, relearned=10, previous=15, waited=1)  # still arriving
    assert relearn_due(at=20, relearned=10, previous=20, waited=1)  # paused for a tick
    assert relearn_due(at=90, relearned=10, previous=80, waited=MAX_QUIET_WAIT_TICKS)
