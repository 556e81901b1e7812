"""The resources a running service shares between its handlers, built by the host before the
service's `wire` (which receives them) and injected into what it builds."""

from __future__ import annotations

from dataclasses import dataclass

from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from habitus.bus.publisher import EventPublisher
from habitus.bus.rpc import RpcClient
from habitus.config import Settings
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
