"""The resources a running service shares between its handlers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from habitus.bus.publisher import EventPublisher
from habitus.bus.rpc import RpcClient
from habitus.config import Settings
from habitus.projection.runner import ProjectionRunner
from habitus.service.command import Commands


@dataclass
class ServiceContext:
    name: str
    settings: Settings
    nc: Client
    js: JetStreamContext
    pool: AsyncConnectionPool
    redis: Redis
    publisher: EventPublisher
    rpc: RpcClient
    commands: Commands
    runners: list[ProjectionRunner] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
