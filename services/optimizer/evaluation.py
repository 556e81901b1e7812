"""Building a run's evaluator from the database: the log read once, or the queries to replay.

The configuration a trial is applied over is the tenant's at the run's start (`baseline`, kept
in `OptimizationRunStarted`), so every trial of a run is measured against the same routing,
whatever is applied meanwhile. The learned state the table policies would read comes from the
same traces (the window's), as the router would hold it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from habitus.contract.optimize import Objective, ReplaySettings, RunParams
from habitus.llm import LlmClient
from habitus.routing.policies import RouterState, learn, online_switch, sft_table
from habitus.service.context import ServiceContext
from services.optimizer import metrics, store
from services.optimizer.counterfactual import EvaluationLog
from services.optimizer.evaluators import Counterfactual, Query, Replay
from services.optimizer.settings import OptimizerSettings


async def default_policy(ctx: ServiceContext, settings: OptimizerSettings, tenant_id: str
                         ) -> str:
    async with ctx.pool.connection() as conn, conn.cursor() as cur:
        chosen = await store.default_policy(cur, tenant_id)
    return chosen or settings.router_default_policy


async def load(ctx: ServiceContext, settings: OptimizerSettings, tenant_id: str,
               since: float | None, until: float | None) -> EvaluationLog:
    started = time.monotonic()
    async with ctx.pool.connection() as conn, conn.cursor() as cur:
        loaded = await store.load_log(cur, tenant_id, since, until)
    log = EvaluationLog.build(loaded.samples, loaded.aggregates, loaded.records,
                              settings.router_min_samples, loaded.observations)
    metrics.LOG_SECONDS.observe(time.monotonic() - started)
    return log


async def counterfactual(ctx: ServiceContext, settings: OptimizerSettings, tenant_id: str,
                         objectives: Sequence[Objective], baseline: Mapping[str, Any],
                         since: float | None, until: float | None) -> Counterfactual:
    log = await load(ctx, settings, tenant_id, since, until)
    return Counterfactual(log, dict(baseline), await default_policy(ctx, settings, tenant_id),
                          settings.router_min_samples, [o.metric for o in objectives],
                          settings.min_support)


async def replay(ctx: ServiceContext, settings: OptimizerSettings, llm: LlmClient,
                 tenant_id: str, objectives: Sequence[Objective], replay: ReplaySettings,
                 baseline: Mapping[str, Any], since: float | None, until: float | None
                 ) -> Replay:
    async with ctx.pool.connection() as conn, conn.cursor() as cur:
        if replay.benchmark:
            queries = [Query(b.query, b.reference) for b in replay.benchmark]
        else:
            queries = [Query(q) for q, _, _ in await store.recent_queries(
                cur, tenant_id, replay.sample, since, until)]
        models = list(replay.models) or await store.offered_models(cur, tenant_id)
        loaded = await store.load_log(cur, tenant_id, since, until)
    state = RouterState(aggregates=loaded.aggregates,
                        learned=learn(loaded.aggregates, settings.router_min_samples),
                        sft=sft_table(loaded.aggregates, settings.router_min_samples),
                        online=online_switch(loaded.observations, settings.router_min_samples))
    return Replay(llm, tenant_id, queries, models, baseline,
                  await default_policy(ctx, settings, tenant_id), settings.router_min_samples,
                  [o.metric for o in objectives], replay.judge_model, state)


async def evaluator_for(ctx: ServiceContext, settings: OptimizerSettings,
                        llm: LlmClient | None, tenant_id: str, definition: RunParams,
                        baseline: Mapping[str, Any]) -> Counterfactual | Replay:
    if definition.evaluator == "replay":
        if llm is None:
            raise ValueError("the replay evaluator needs an LLM endpoint (HABITUS_LLM_BASE_URL, "
                             "HABITUS_LLM_MODEL)")
        return await replay(ctx, settings, llm, tenant_id, definition.objectives,
                            definition.replay or ReplaySettings(), baseline, definition.since,
                            definition.until)
    return await counterfactual(ctx, settings, tenant_id, definition.objectives, baseline,
                                definition.since, definition.until)
