"""What recorded traces teach without an LLM: the advisor's problems, ICL examples and skills.

Three read-only views over the traces the service hands in (one `TraceFacts` per trace, built
from its store; which window of traces to look at is the caller's choice, not ours):

- `recommendations` (`advisor.recommendations`): which traces went wrong and what the pattern
  says to change. A *problem* trace is one whose outcome is not "success" (no outcome counts, a
  run nobody vouched for is not a good run) or that took more than 5 s. Two patterns are
  reported:

  - "agent_structure" when more than 30 % of the problem traces made more than 5 tool calls: the
    agent wanders, so its plan, not its model, is what to fix.
  - "routing" for each query class with at least 3 *failures*, naming the models that failed
    and, when some trace shows one, the model that did best on that class. A failure is an
    outcome known not to be a success ("failure", "partial"): a slow success is slow, not a
    wrong route, and "unknown" or no outcome is no evidence against the model.

  `confidence` is 1 - problems / analyzed, the share of healthy traces. With nothing analyzed
  it is 1.0, as in the seed (nothing contradicts the current setup); `analyzed == 0` is the
  signal that there was no evidence, and the advice is empty then.
- `examples` (`icl.examples`): the traces worth showing an agent as in-context examples, the
  successful ones with feedback of at least 0.7 and at least one tool call, best first.
  Feedback that was never given is no feedback: it does not count as 0.5 (the seed's default),
  so a threshold below 0.5 never lets unscored traces in.
- `skills` (`icl.skills`): contiguous tool sequences of length 2 to 4 that recur across those
  same qualifying traces, the plans worth naming. Every window position counts, overlapping
  ones included ("a, a, a" holds "a -> a" twice), as in the seed; with the issue's vector
  ([search, calc, search, calc] 0.9, [search, calc] unscored, [search, calc] 0.8, [calc] 0.95,
  [search, calc] 0.7) that is "search -> calc" 4 times: twice in the first trace, once in each of
  the two other scored ones, and not in the unscored one, which no ICL view trusts. A window
  that holds a blank tool name is skipped, so steps without a name never make the seed's " -> "
  skill. `mean_feedback` is over the distinct traces the skill occurs in (a trace that repeats
  a sequence is one opinion, not two), among those with feedback.

Feedback that is not a number from 0 to 1 is treated as not given, and ties are broken by recency
(`ended_at`) then `trace_id`, so every answer is the same for the same traces in any order.

Everything here is pure (no clock, no I/O): the service queries its store and calls these.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: a trace that took longer than this (seconds) is a problem even when it succeeded
SLOW_SECONDS = 5.0
#: a trace with more tool calls than this is "many tool calls" for the structure advice
MANY_TOOL_CALLS = 5
#: share of problem traces with many tool calls above which the agent's structure is advised on
AGENT_STRUCTURE_SHARE = 0.3
#: failures in one query class that make a routing recommendation
ROUTING_MIN_FAILURES = 3
#: a recommendation cites at most this many traces (newest first); its summary counts them all
MAX_EVIDENCE = 20
#: feedback a successful trace needs to become an ICL example or feed a skill
MIN_FEEDBACK = 0.7
#: at most this many ICL examples
MAX_EXAMPLES = 20
#: occurrences a tool sequence needs to be a skill
MIN_SKILL_COUNT = 3
#: skill lengths, inclusive: one call is no sequence, longer plans rarely recur verbatim
MIN_SKILL_LENGTH = 2
MAX_SKILL_LENGTH = 4

SUCCESS = "success"
#: outcomes that are evidence against the model that ran the trace
FAILED_OUTCOMES = frozenset({"failure", "partial"})
AGENT_STRUCTURE = "agent_structure"
ROUTING = "routing"
SKILL_SEPARATOR = " -> "


@dataclass(frozen=True, slots=True)
class TraceFacts:
    """The few facts of one recorded trace that the advisor and ICL views read."""

    trace_id: str
    query: str
    model: str
    agent: str
    outcome: str | None  # "success" | "failure" | "partial" | "unknown" | None
    feedback: float | None  # 0..1 when given (with the trace or joined later)
    latency_seconds: float
    tool_sequence: tuple[str, ...]  # tool names in call order
    query_class: str  # code | math | short | long | general
    ended_at: float  # epoch seconds; only orders ties, never compared with a clock


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One piece of advice and the traces it rests on (newest first, at most `MAX_EVIDENCE`)."""

    kind: str  # "agent_structure" | "routing"
    summary: str
    detail: str
    evidence_trace_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Advice:
    """The advisor's answer: how many traces it read, how many were problems, what to change."""

    analyzed: int
    problems: int
    confidence: float  # 1 - problems / analyzed; 1.0 when nothing was analyzed
    recommendations: list[Recommendation]


@dataclass(frozen=True, slots=True)
class Example:
    """A trace worth showing an agent: the question, the tools that answered it, its score.

    `trace_id` is how the service fetches the result text, which is not copied here."""

    trace_id: str
    query: str
    tool_sequence: tuple[str, ...]
    feedback: float


@dataclass(frozen=True, slots=True)
class Skill:
    """A tool sequence that recurs: `count` occurrences over `traces` distinct traces."""

    sequence: tuple[str, ...]
    count: int
    traces: int
    mean_feedback: float | None  # over the distinct traces with feedback; None when none

    @property
    def name(self) -> str:
        """The sequence as the seed spells it: "search -> calc"."""
        return SKILL_SEPARATOR.join(self.sequence)


# --------------------------------------------------------------------------- shared


def _feedback(trace: TraceFacts) -> float | None:
    """The trace's feedback if it is a score, a number from 0 to 1. Anything else (NaN, an
    infinity, 7.0) would poison every mean and sort it reached, so it counts as never given;
    the event schema already refuses it, this keeps the views total."""
    fb = trace.feedback
    return fb if fb is not None and 0.0 <= fb <= 1.0 else None


def _newest_first(traces: Iterable[TraceFacts]) -> list[TraceFacts]:
    # sorted twice (stable): the id makes the order total, recency comes first
    by_id = sorted(traces, key=lambda t: t.trace_id)
    return sorted(by_id, key=lambda t: _recency(t.ended_at), reverse=True)


def _recency(ended_at: float) -> float:
    """`ended_at` as a sort key that a NaN cannot scramble (it sorts as the oldest)."""
    return ended_at if not math.isnan(ended_at) else -math.inf


def _evidence(traces: Iterable[TraceFacts]) -> tuple[str, ...]:
    return tuple(t.trace_id for t in _newest_first(traces)[:MAX_EVIDENCE])


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %"


def _counted(counts: Counter[str]) -> str:
    """Counts as text, "a (3), b (1)": most first, then by name, so the text is stable."""
    return ", ".join(f"{name} ({n})" for name, n in sorted(counts.items(), key=_most_then_name))


def _most_then_name(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


# --------------------------------------------------------------------------- advisor


def is_problem(trace: TraceFacts) -> bool:
    """Whether the advisor looks at this trace: it did not succeed, or it was slow."""
    return trace.outcome != SUCCESS or trace.latency_seconds > SLOW_SECONDS


def is_failure(trace: TraceFacts) -> bool:
    """Whether the trace is evidence against its route: an outcome known not to be success."""
    return trace.outcome in FAILED_OUTCOMES


def recommendations(traces: Sequence[TraceFacts]) -> Advice:
    """The advisor over `traces` (one entry per trace): the structure advice first, then one
    routing recommendation per class with enough failures, most failures first."""
    problems = [t for t in traces if is_problem(t)]
    analyzed = len(traces)
    confidence = 1.0 - len(problems) / analyzed if analyzed else 1.0
    advice: list[Recommendation] = []
    structure = _agent_structure(problems)
    if structure is not None:
        advice.append(structure)
    advice.extend(_routing(traces))
    return Advice(analyzed, len(problems), confidence, advice)


def _agent_structure(problems: Sequence[TraceFacts]) -> Recommendation | None:
    heavy = [t for t in problems if len(t.tool_sequence) > MANY_TOOL_CALLS]
    if not problems or len(heavy) / len(problems) <= AGENT_STRUCTURE_SHARE:
        return None
    agents = Counter(t.agent for t in heavy)
    most_calls = max(len(t.tool_sequence) for t in heavy)
    return Recommendation(
        kind=AGENT_STRUCTURE,
        summary=(
            f"{len(heavy)} of {len(problems)} problem traces "
            f"({_percent(len(heavy), len(problems))}) made more than {MANY_TOOL_CALLS} tool "
            "calls"
        ),
        detail=(
            f"Agents with many tool calls in problem traces: {_counted(agents)}; the most was "
            f"{most_calls} calls. Runs that keep calling tools and still fail or run slow point "
            "at the agent's plan (tool choice, stopping rule, a task split into steps) more "
            "than at its model."
        ),
        evidence_trace_ids=_evidence(heavy),
    )


def _routing(traces: Sequence[TraceFacts]) -> list[Recommendation]:
    by_class: defaultdict[str, list[TraceFacts]] = defaultdict(list)
    for t in traces:
        by_class[t.query_class].append(t)
    found: list[tuple[int, str, Recommendation]] = []
    for query_class, members in by_class.items():
        failed = [t for t in members if is_failure(t)]
        if len(failed) < ROUTING_MIN_FAILURES:
            continue
        failed_models = Counter(t.model for t in failed)
        best = _best_model(members)
        if best is None:
            advice = "No trace in this class succeeded, so the traces name no better model."
        else:
            model, successes, judged = best
            advice = (
                f"{model} succeeded on {successes} of its {judged} traces in this class with a "
                "known outcome; consider routing the class to it."
            )
        found.append((
            len(failed),
            query_class,
            Recommendation(
                kind=ROUTING,
                summary=(
                    f"Query class '{query_class}' has {len(failed)} failures "
                    f"(models: {', '.join(sorted(failed_models))})"
                ),
                detail=f"Failures by model: {_counted(failed_models)}. {advice}",
                evidence_trace_ids=_evidence(failed),
            ),
        ))
    found.sort(key=lambda item: (-item[0], item[1]))
    return [rec for _, _, rec in found]


def _best_model(members: Sequence[TraceFacts]) -> tuple[str, int, int] | None:
    """(model, successes, traces with a known outcome) of the model with the best success rate
    in one class among those that succeeded at least once; more successes, then the name, break
    ties. "unknown" and no outcome are left out of the rate: they say nothing either way."""
    successes: Counter[str] = Counter()
    judged: Counter[str] = Counter()
    for t in members:
        if t.outcome == SUCCESS or is_failure(t):
            judged[t.model] += 1
        if t.outcome == SUCCESS:
            successes[t.model] += 1
    if not successes:
        return None
    model = min(successes, key=lambda m: (-successes[m] / judged[m], -successes[m], m))
    return model, successes[model], judged[model]


# --------------------------------------------------------------------------- ICL


def qualifies(trace: TraceFacts, min_feedback: float | None = MIN_FEEDBACK) -> bool:
    """Whether a trace may teach: it succeeded, called a tool, and (unless `min_feedback` is
    None) was scored at least `min_feedback`."""
    if trace.outcome != SUCCESS or not trace.tool_sequence:
        return False
    if min_feedback is None:
        return True
    fb = _feedback(trace)
    return fb is not None and fb >= min_feedback


def examples(
    traces: Iterable[TraceFacts], limit: int = MAX_EXAMPLES, *, min_feedback: float = MIN_FEEDBACK
) -> list[Example]:
    """The ICL examples: qualifying traces, best feedback first, then newest, at most `limit`
    (none when `limit` is 0 or less: a negative limit is no request to drop the last few)."""
    if limit <= 0:
        return []
    chosen = [t for t in traces if qualifies(t, min_feedback)]
    ranked = sorted(_newest_first(chosen), key=lambda t: -(_feedback(t) or 0.0))
    return [
        Example(t.trace_id, t.query, t.tool_sequence, _feedback(t) or 0.0) for t in ranked[:limit]
    ]


def windows(sequence: Sequence[str]) -> list[tuple[str, ...]]:
    """Every contiguous window of length 2 to 4 of `sequence`, overlapping ones included, that
    holds no blank tool name: [a, b, c] -> (a, b), (b, c), (a, b, c)."""
    out: list[tuple[str, ...]] = []
    for length in range(MIN_SKILL_LENGTH, min(len(sequence), MAX_SKILL_LENGTH) + 1):
        for start in range(len(sequence) - length + 1):
            window = tuple(sequence[start : start + length])
            if all(name.strip() for name in window):
                out.append(window)
    return out


def skills(
    traces: Iterable[TraceFacts],
    min_count: int = MIN_SKILL_COUNT,
    *,
    min_feedback: float | None = MIN_FEEDBACK,
) -> list[Skill]:
    """Tool sequences seen at least `min_count` times (at least once, whatever is asked) in the
    qualifying traces, most seen first, then longest (the fuller plan before its parts when
    they tie), then by name. `min_feedback=None` mines every successful trace with a tool
    call, scored or not; that is when `mean_feedback` can be None."""
    floor = max(min_count, 1)
    counts: Counter[tuple[str, ...]] = Counter()
    seen_in: defaultdict[tuple[str, ...], list[float | None]] = defaultdict(list)
    for t in traces:
        if not qualifies(t, min_feedback):
            continue
        found = windows(t.tool_sequence)
        counts.update(found)
        fb = _feedback(t)
        for window in set(found):
            seen_in[window].append(fb)
    out: list[Skill] = []
    for sequence, count in counts.items():
        if count < floor:
            continue
        given = [fb for fb in seen_in[sequence] if fb is not None]
        mean = math.fsum(given) / len(given) if given else None
        out.append(Skill(sequence, count, len(seen_in[sequence]), mean))
    out.sort(key=lambda s: (-s.count, -len(s.sequence), s.name, s.sequence))
    return out
