"""The optimizer service: searches each tenant's configuration over what already happened.

Process `optimizer`, Deployment `optimizer`, schema `optimize`, RPC `optimize.*`.

It folds the evaluation log (traces, feedback, routing decisions with their propensities) and the
runs' events into `optimize`, works on running runs in the background, and answers the
`optimize.*` methods. Without an LLM endpoint it runs all the same: the random and grid
proposers and the counterfactual evaluator need no model; the llm proposer and the replay
evaluator are refused with the reason.
"""

from __future__ import annotations

import logging

from habitus.llm import Budget, LlmClient, PostgresUsage
from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from services.optimizer import store
from services.optimizer.projection import OutcomesProjection, StateProjection
from services.optimizer.rpc import OptimizeRpc
from services.optimizer.settings import OptimizerSettings
from services.optimizer.worker import Worker

log = logging.getLogger(__name__)


async def wire(ctx: ServiceContext, settings: OptimizerSettings) -> Wiring:
    llm_settings = settings.llm
    client: LlmClient | None = None
    if llm_settings.enabled:
        budget = Budget(PostgresUsage(ctx.pool, store.SCHEMA),
                        daily_calls=llm_settings.daily_calls_per_tenant,
                        daily_tokens=llm_settings.daily_tokens_per_tenant, service="optimizer")
        client = LlmClient(llm_settings, service="optimizer", budget=budget)
    worker = Worker(ctx, settings, client)
    return Wiring(rpc=OptimizeRpc(ctx, settings, client, worker.wake).registry,
                  projections=[OutcomesProjection(), StateProjection()],
                  background=[worker])


service = ServiceDescriptor(
    name="optimizer",
    deploy_name="optimizer",
    schema=store.SCHEMA,
    rpc_prefixes=("optimize",),
    projections=(OutcomesProjection, StateProjection),
    settings=OptimizerSettings,
    wire=wire,
    migrations="services.optimizer.migrations",
    runner_config=RunnerConfig(batch_size=2000),
)


def build(settings: OptimizerSettings | None = None) -> ServiceDescriptor:
    """The service with these settings instead of the environment's (tests, benchmarks)."""
    return service.configured(settings)
