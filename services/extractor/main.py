"""The extractor service: the LLM summariser of a user's material, and reflections on turns.

Process `extractor`, Deployment `extractor`, schema `extractor`, RPC `extraction.*`. Without an
LLM endpoint (`HABITUS_LLM_BASE_URL`, `HABITUS_LLM_MODEL`) it says so once at start, folds no
material, calls nothing, answers its reads and erases users; `/readyz` reports it disabled.
"""

from __future__ import annotations

import logging

from habitus.llm import Budget, LlmClient, PostgresUsage
from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from services.extractor import store
from services.extractor.projection import RequestsProjection, WindowsProjection
from services.extractor.rpc import ExtractorRpc
from services.extractor.settings import ExtractorSettings
from services.extractor.worker import Extractor

log = logging.getLogger(__name__)


async def wire(ctx: ServiceContext, settings: ExtractorSettings) -> Wiring:
    projections = [WindowsProjection(settings), RequestsProjection()]
    disabled = settings.llm.disabled_reason()
    if disabled is not None:
        log.warning("the LLM extractor is disabled: set HABITUS_LLM_BASE_URL and "
                    "HABITUS_LLM_MODEL to enable it", extra={"reason": disabled})
        return Wiring(rpc=ExtractorRpc(ctx, disabled=disabled).registry,
                      projections=projections, disabled=disabled)
    llm = settings.llm
    budget = Budget(PostgresUsage(ctx.pool, store.SCHEMA), daily_calls=llm.daily_calls_per_tenant,
                    daily_tokens=llm.daily_tokens_per_tenant, service="extractor")
    worker = Extractor(ctx, settings, LlmClient(llm, service="extractor", budget=budget))
    return Wiring(rpc=ExtractorRpc(ctx, disabled=None, wake=worker.wake).registry,
                  projections=projections, background=[worker])


service = ServiceDescriptor(
    name="extractor",
    deploy_name="extractor",
    schema=store.SCHEMA,
    rpc_prefixes=("extraction",),
    projections=(WindowsProjection, RequestsProjection),
    settings=ExtractorSettings,
    wire=wire,
    migrations="services.extractor.migrations",
    # Most material only joins an open window: large batches.
    runner_config=RunnerConfig(batch_size=1000),
)


def build(settings: ExtractorSettings | None = None) -> ServiceDescriptor:
    """The service with these settings instead of the environment's (tests, benchmarks)."""
    return service.configured(settings)
