"""The tool-memory service: tool-scoped rules, captured from turns and pinned into prompts.

Process `tool_memory`, Deployment `tool-memory`, schema `tools`, RPC `memory.*`.
"""

from __future__ import annotations

import asyncio

from habitus.projection import RunnerConfig
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from services.tool_memory import store
from services.tool_memory.projection import CaptureProjection, RulesProjection
from services.tool_memory.recall import Recaller
from services.tool_memory.rpc import MemoryRpc
from services.tool_memory.settings import ToolMemorySettings


class _Warm:
    """Loads the recall model in the background once the service is up."""

    def __init__(self, recaller: Recaller):
        self._recaller = recaller
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._recaller.warm(), name="tool_memory.warm")

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


async def wire(ctx: ServiceContext, settings: ToolMemorySettings) -> Wiring:
    recaller = Recaller(semantic=settings.semantic_recall)
    return Wiring(rpc=MemoryRpc(ctx, recaller).registry,
                  projections=[CaptureProjection(settings), RulesProjection(recaller)],
                  background=[_Warm(recaller)])


service = ServiceDescriptor(
    name="tool_memory",
    deploy_name="tool-memory",
    schema=store.SCHEMA,
    rpc_prefixes=("memory",),
    projections=(CaptureProjection, RulesProjection),
    settings=ToolMemorySettings,
    wire=wire,
    migrations="services.tool_memory.migrations",
    # Every turn passes through capture, most of them yielding nothing: large batches.
    runner_config=RunnerConfig(batch_size=2000),
    # `memory.tool_rule_list` is what an agent reads before it may use a tool: its RPC in a
    # process of its own, while capture (every turn passes through it) yields the cores.
    rpc_apart=True,
)


def build(settings: ToolMemorySettings | None = None) -> ServiceDescriptor:
    """The service with these settings instead of the environment's (tests, benchmarks)."""
    return service.configured(settings)
