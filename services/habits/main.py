"""The habits service: reviewed "When / Do" habits, from evidence to approved guidance.

Process `habits`, Deployment `habits`, schema `habits`, RPC `habits.*`. Without an LLM endpoint
(`HABITUS_LLM_BASE_URL`, `HABITUS_LLM_MODEL`) it still captures observations, keeps the ledger,
takes declarations and reviews, and answers `habits.select` with no guidance (the judge is
mandatory); Analyze answers why it cannot run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging

from habitus.llm import Budget, LlmClient, PostgresUsage
from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.telemetry.refresh import GaugeRefresher
from services.habits import metrics, store
from services.habits.analyze import Analyzer
from services.habits.embedding import Embedder, EmbedderUnavailable, SentenceEncoder
from services.habits.projection import CaptureProjection, LedgerProjection
from services.habits.reviewer import Reviewer
from services.habits.rpc import HabitsRpc
from services.habits.schedule import Schedule
from services.habits.selection import Selector
from services.habits.settings import HabitsSettings

log = logging.getLogger(__name__)


class _Warm:
    """Loads the sentence encoder in the background once the service is up."""

    def __init__(self, embedder: Embedder, llm: LlmClient | None):
        self._embedder = embedder
        self._llm = llm
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._warm(), name="habits.warm")

    async def _warm(self) -> None:
        try:
            await self._embedder.warm()
        except EmbedderUnavailable as exc:
            log.warning("the sentence encoder did not load: duplicate checks and selection "
                        "fail closed", extra={"error": str(exc)})

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._llm is not None:
            await self._llm.aclose()


async def wire(ctx: ServiceContext, settings: HabitsSettings,
               embedder: Embedder | None = None) -> Wiring:
    if embedder is None and settings.semantic:
        embedder = SentenceEncoder()
    llm: LlmClient | None = None
    if settings.llm.disabled_reason() is None:
        budget = Budget(PostgresUsage(ctx.pool, store.SCHEMA),
                        daily_calls=settings.llm.daily_calls_per_tenant,
                        daily_tokens=settings.llm.daily_tokens_per_tenant, service="habits")
        llm = LlmClient(settings.llm, service="habits", budget=budget)
    else:
        log.info("habits: no LLM endpoint; Analyze and selection give nothing until "
                 "HABITUS_LLM_BASE_URL and HABITUS_LLM_MODEL are set")
    reviewer = Reviewer(ctx.pool, ctx.commands, embedder)
    analyzer = Analyzer(reviewer, llm)
    selector = Selector(ctx.pool, embedder, llm, settings.judge_timeout_seconds)
    background: list[object] = [Schedule(analyzer, settings.schedule_seconds,
                                         analyze=llm is not None)]
    if embedder is not None:
        background.append(_Warm(embedder, llm))
    background.append(GaugeRefresher(ctx.pool, metrics.refresh_habits, name="habits"))
    return Wiring(rpc=HabitsRpc(reviewer, analyzer, selector,
                                proposals_off=settings.llm.disabled_reason()).registry,
                  projections=[CaptureProjection(settings), LedgerProjection(embedder)],
                  background=background)  # type: ignore[arg-type]


service = ServiceDescriptor(
    name="habits",
    deploy_name="habits",
    schema=store.SCHEMA,
    rpc_prefixes=("habits",),
    projections=(CaptureProjection, LedgerProjection),
    settings=HabitsSettings,
    wire=wire,
    migrations="services.habits.migrations",
    # Every turn passes through capture: large batches.
    runner_config=RunnerConfig(batch_size=1000),
    # `habits.list` and `habits.select` answer agents and settings pages: their RPC in a
    # process of its own, while capture (every turn passes through it) yields the cores.
    rpc_apart=True,
)


def build(settings: HabitsSettings | None = None, embedder: Embedder | None = None
          ) -> ServiceDescriptor:
    """The service with these settings instead of the environment's, and this embedder
    instead of the sentence encoder (tests, benchmarks)."""
    configured = service.configured(settings)
    if embedder is None:
        return configured
    return dataclasses.replace(configured, wire=functools.partial(wire, embedder=embedder))
