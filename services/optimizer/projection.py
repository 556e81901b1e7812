"""The optimizer's two projections: the evaluation log from the ingest stream, and the
decisions, runs, trials and configurations from the event log.

`optimize.outcomes` keeps of each trace what an estimate needs (class and routing signals of the
query, the model, outcome, latency, cost, tokens, energy, the decision it followed) and of
feedback the latest score per trace. `optimize.state` keeps every recorded `RouteDecided`, the
runs and trials as their events say, the tenant's configuration versions and its default
routing policy. Both are plain folds: whatever order the two streams deliver in, a run joins
them when it reads the log.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.events.domain import (
    ConfigurationApplied,
    OptimizationRunCompleted,
    OptimizationRunFailed,
    OptimizationRunStarted,
    OptimizationRunStopped,
    RouteDecided,
    RoutingPolicyUpdated,
    TrialEvaluated,
)
from habitus.events.ingest import FeedbackGiven, TraceCompleted
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.routing.context import query_class, routing_signals
from services.optimizer import store

#: the parameter that makes a `RoutingPolicyUpdated` a tenant's choice of default policy
TENANT_DEFAULT = "tenant_default"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def outcome_row(delivered: Delivered) -> store.OutcomeRow:
    event = delivered.event
    p: TraceCompleted = event.payload
    prompt = completion = 0
    reported = False
    energy: float | None = None
    for step in p.steps:
        output = step.output if isinstance(step.output, dict) else {}
        if "prompt_tokens" in output or "completion_tokens" in output:
            reported = True
            prompt += int(_number(output.get("prompt_tokens")) or 0)
            completion += int(_number(output.get("completion_tokens")) or 0)
        joules = _number(step.metadata.get("energy_joules"))
        if joules is not None:
            energy = (energy or 0.0) + joules
    ctx = routing_signals(p.query)
    return store.OutcomeRow(
        tenant_id=event.tenant_id, user_id=event.user_id, trace_id=p.trace_id,
        decision_id=p.decision_id, seq=delivered.seq, query=p.query,
        query_class=query_class(ctx), has_code=ctx.has_code, has_math=ctx.has_math,
        has_reasoning=ctx.has_reasoning, query_length=ctx.query_length, model=p.model,
        outcome=p.outcome, feedback=p.feedback, latency_seconds=p.total_latency_seconds,
        cost_usd=p.cost_usd, tokens=p.total_tokens,
        prompt_tokens=prompt if reported else None,
        completion_tokens=completion if reported else None, energy_joules=energy,
        started_at=p.started_at)


class OutcomesProjection(Projection):
    name = "optimize.outcomes"
    schema = store.SCHEMA
    tables = (store.OUTCOMES, store.FEEDBACK)

    async def on_traces(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        await store.insert_outcomes(cur, [outcome_row(d) for d in run])

    async def on_feedback(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        latest: dict[tuple[str, str, str], tuple[str, str, str, float, str | None, int]] = {}
        for d in run:
            p: FeedbackGiven = d.event.payload
            if p.trace_id is None:
                continue  # a turn's feedback is not a trace's
            key = (d.event.tenant_id, d.event.user_id, p.trace_id)
            earlier = latest.get(key)
            outcome = p.outcome if p.outcome is not None else (
                earlier[4] if earlier is not None else None)
            latest[key] = (*key, p.score, outcome, d.seq)
        await store.save_feedback(cur, list(latest.values()))

    handlers = {TraceCompleted: on_traces, FeedbackGiven: on_feedback}


class StateProjection(Projection):
    name = "optimize.state"
    schema = store.SCHEMA
    tables = store.STATE_TABLES

    async def on_decided(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
        rows = []
        for d in run:
            p: RouteDecided = d.event.payload
            rows.append((d.event.tenant_id, p.query_id, d.event.user_id, p.model, p.policy,
                         p.query_class, p.propensity, p.offered, p.urgency, p.default_model,
                         p.fallback_model, p.configuration, d.event.occurred_at))
        await store.save_decisions(cur, rows)

    async def on_started(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
        for d in run:
            p: OptimizationRunStarted = d.event.payload
            await store.start_run(cur, d.event.tenant_id, d.event.user_id, p.run_id,
                                  p.model_dump(mode="json"), d.event.occurred_at)

    async def on_trial(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        for d in run:
            await store.add_trial(cur, d.event.tenant_id, d.event.user_id, d.event.payload,
                                  d.event.occurred_at)

    async def on_completed(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                           ctx: ApplyContext) -> None:
        for d in run:
            p: OptimizationRunCompleted = d.event.payload
            await store.end_run(cur, d.event.tenant_id, d.event.user_id, p.run_id, "completed",
                                d.event.occurred_at, stopped_early=p.stopped_early,
                                best_trial_id=p.best_trial_id, frontier=p.frontier,
                                reason=("its patience ran out" if p.stopped_early else None))

    async def on_stopped(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
        for d in run:
            p: OptimizationRunStopped = d.event.payload
            await store.end_run(cur, d.event.tenant_id, d.event.user_id, p.run_id, "stopped",
                                d.event.occurred_at, reason=p.reason)

    async def on_failed(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        for d in run:
            p: OptimizationRunFailed = d.event.payload
            await store.end_run(cur, d.event.tenant_id, d.event.user_id, p.run_id, "failed",
                                d.event.occurred_at, reason=p.error)

    async def on_configured(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                            ctx: ApplyContext) -> None:
        for d in run:
            await store.save_configuration(cur, d.event.tenant_id, d.event.user_id,
                                           d.event.payload, d.event.occurred_at)

    async def on_policy(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        for d in run:
            p: RoutingPolicyUpdated = d.event.payload
            if p.parameters.get(TENANT_DEFAULT):
                await store.save_default(cur, d.event.tenant_id, d.event.user_id, p.policy,
                                         p.version)

    handlers = {
        RouteDecided: on_decided,
        OptimizationRunStarted: on_started,
        TrialEvaluated: on_trial,
        OptimizationRunCompleted: on_completed,
        OptimizationRunStopped: on_stopped,
        OptimizationRunFailed: on_failed,
        ConfigurationApplied: on_configured,
        RoutingPolicyUpdated: on_policy,
    }
