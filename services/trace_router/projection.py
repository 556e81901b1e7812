"""The trace store as a projection: `TraceCompleted` and `FeedbackGiven` into the `traces` schema.

A run of traces is written with one COPY for the traces and one for their steps, then one
statement per aggregate table. A trace id already stored for the user is a duplicate (the
trace's own field says a re-sent trace is one) and changes nothing; the first copy stands.

Feedback is joined to its trace by (tenant, user, trace id), whichever arrives first. The latest
feedback in stream order is the trace's feedback, and an outcome given with feedback replaces
the trace's outcome (feedback without one keeps it). Feedback for a trace not stored yet waits in
`traces.pending_feedback` (the latest score, the latest outcome given) and is applied when the
trace arrives, so the stored trace is the same whichever came first. Feedback for a stored trace
takes back the trace's earlier share of the aggregates and adds the new one, so the aggregates
always equal a recomputation from the traces. Feedback naming only a turn is not the trace
store's and is skipped.

A trace's `query_class` is `habitus.routing.context.classify(query)` and its reward
`habitus.routing.reward.reward(...)` over its latency, cost, prompt and completion tokens,
feedback and outcome (recomputed when feedback changes them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from psycopg import AsyncCursor
from pydantic_core import to_json

from habitus.events.ingest import FeedbackGiven, TraceCompleted, TraceStep
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.routing.context import classify
from habitus.routing.reward import reward
from services.trace_router import metrics, store


def tool_name(step: TraceStep) -> str | None:
    """The tool a step called: `input.tool`, else `metadata.tool_name` (None: no tool)."""
    for value in ((step.input.get("tool") if isinstance(step.input, dict) else None),
                  step.metadata.get("tool_name")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _count(value: Any) -> int:
    """A token count a step reports (anything else counts as none)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return float(value)


def _json(value: Any) -> str | None:
    """JSON for a jsonb column; pydantic-core's serializer, the hot path of a batch (three
    values per step), with NaN and infinities as null (jsonb has neither)."""
    if value is None:
        return None
    if type(value) is dict and not value:
        return "{}"  # the commonest value, without a serializer call
    return to_json(value, inf_nan_mode="null").decode()


def trace_rows(delivered: Delivered) -> tuple[store.TraceRow, list[store.StepRow]]:
    """The trace and step rows of one `TraceCompleted` (before any feedback is joined)."""
    event = delivered.event
    p: TraceCompleted = event.payload
    steps: list[store.StepRow] = []
    prompt = completion = 0
    reported = False
    for ordinal, step in enumerate(p.steps):
        output = step.output if isinstance(step.output, dict) else {}
        reported = reported or "prompt_tokens" in output or "completion_tokens" in output
        step_prompt, step_completion = (_count(output.get("prompt_tokens")),
                                        _count(output.get("completion_tokens")))
        prompt += step_prompt
        completion += step_completion
        steps.append(store.StepRow(
            event.tenant_id, event.user_id, p.trace_id, ordinal, step.step_type,
            step.timestamp, step.duration_seconds, _json(step.input), _json(step.output),
            _json(step.metadata) or "{}", tool_name(step), step_prompt, step_completion,
            _number(step.metadata.get("energy_joules")), bool(output.get("success"))))
    prompt_tokens = prompt if reported else None
    completion_tokens = completion if reported else None
    row = store.TraceRow(
        tenant_id=event.tenant_id, user_id=event.user_id, trace_id=p.trace_id,
        seq=delivered.seq, query=p.query, agent=p.agent, model=p.model, engine=p.engine,
        result=p.result, outcome=p.outcome, feedback=p.feedback, started_at=p.started_at,
        ended_at=p.ended_at, total_tokens=p.total_tokens, prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens, total_latency_seconds=p.total_latency_seconds,
        cost_usd=p.cost_usd, query_class=classify(p.query),
        tool_calls=sum(s.tool_name is not None for s in steps), step_count=len(steps),
        # what `rewarded` computes, without building the row twice
        reward=reward(latency_seconds=p.total_latency_seconds, cost_usd=p.cost_usd,
                      prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                      feedback=p.feedback, outcome=p.outcome))
    return row, steps


def rewarded(row: store.TraceRow) -> store.TraceRow:
    """The row with its reward computed from what it now holds."""
    return replace(row, reward=reward(
        latency_seconds=row.total_latency_seconds, cost_usd=row.cost_usd,
        prompt_tokens=row.prompt_tokens, completion_tokens=row.completion_tokens,
        feedback=row.feedback, outcome=row.outcome))


def with_feedback(row: store.TraceRow, score: float, outcome: str | None) -> store.TraceRow:
    return rewarded(replace(row, feedback=score,
                            outcome=outcome if outcome is not None else row.outcome))


class TracesProjection(Projection):
    name = "traces.store"
    schema = store.SCHEMA
    tables = store.TABLES

    def __init__(self) -> None:
        #: (model, reward) of the rows the batch in progress wrote: observed once it commits
        self._rewards: list[tuple[str, float]] = []

    def _rewarded(self, rows: Sequence[store.TraceRow]) -> None:
        self._rewards.extend((r.model or "unknown", r.reward) for r in rows
                             if r.reward is not None)

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        self._rewards = []  # a retried batch observes again from nothing
        await super().apply_batch(cur, batch, ctx)

    async def after_commit(self, batch: Sequence[Delivered]) -> None:
        rewards, self._rewards = self._rewards, []
        for model, value in rewards:
            metrics.REWARD.labels(model).observe(value)

    async def on_traces(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        parsed: dict[store.TraceKey, tuple[store.TraceRow, list[store.StepRow]]] = {}
        for delivered in run:
            parsed_row, parsed_steps = trace_rows(delivered)
            # a second copy of a trace in the run: the first stands
            parsed.setdefault(parsed_row.key, (parsed_row, parsed_steps))
        stored = await store.existing_traces(cur, parsed)
        new = {k: v for k, v in parsed.items() if k not in stored}
        if not new:
            return
        waiting = await store.take_pending(cur, new)
        if waiting:
            new = {k: ((with_feedback(row, *waiting[k]), steps) if k in waiting
                       else (row, steps)) for k, (row, steps) in new.items()}
        added = store.new_traces(new.values())
        self._rewarded([row for row, _ in new.values()])
        await store.insert_traces(cur, [row for row, _ in new.values()],
                                  [s for _, steps in new.values() for s in steps])
        await store.bump(cur, store.ROUTE_STATS, store.ROUTE_KEY, store.ROUTE_VALUES,
                         added.route)
        await store.bump(cur, store.CLASS_STATS, store.CLASS_KEY, store.CLASS_VALUES,
                         added.klass)
        await store.bump(cur, store.TOOL_STATS, store.TOOL_KEY, store.TOOL_VALUES, added.tools)
        await store.bump_steps(cur, added.steps, added.extremes)

    async def on_feedback(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        given = [(d, d.event.payload) for d in run if d.event.payload.trace_id is not None]
        if not given:
            return
        keys = {(d.event.tenant_id, d.event.user_id, p.trace_id) for d, p in given}
        before = await store.existing_traces(cur, keys)
        after = dict(before)
        pending: dict[store.TraceKey, tuple[float, str | None, int]] = {}
        for delivered, p in given:
            key = (delivered.event.tenant_id, delivered.event.user_id, p.trace_id)
            if key in after:
                after[key] = with_feedback(after[key], p.score, p.outcome)
            else:
                earlier = pending.get(key)
                outcome = p.outcome if p.outcome is not None else (
                    earlier[1] if earlier is not None else None)
                pending[key] = (p.score, outcome, delivered.seq)
        changed = [row for key, row in sorted(after.items()) if row != before[key]]
        route: store.Deltas = {}
        klass: store.Deltas = {}
        for row in changed:
            store.contribute(route, klass, before[row.key], -1)
            store.contribute(route, klass, row)
        await store.update_feedback(cur, changed)
        self._rewarded(changed)
        await store.keep_pending(cur, pending)
        await store.bump(cur, store.ROUTE_STATS, store.ROUTE_KEY, store.ROUTE_VALUES,
                         _nonzero(route))
        await store.bump(cur, store.CLASS_STATS, store.CLASS_KEY, store.CLASS_VALUES,
                         _nonzero(klass))

    handlers = {TraceCompleted: on_traces, FeedbackGiven: on_feedback}
    emits = ()


def _nonzero(deltas: store.Deltas) -> store.Deltas:
    """Only the keys something changed for."""
    return {k: v for k, v in deltas.items() if any(x != 0 for x in v)}
