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
    #: the bulk connection: JetStream publishes, the projections' pulls and acks
    nc: Client
    js: JetStreamContext
    pool: AsyncConnectionPool
    redis: Redis
    publisher: EventPublisher
    #: calls to other services, on the connection that serves this one's RPC (`rpc_nc`)
    rpc: RpcClient
    commands: Commands
    #: the connection RPC is served and called on, apart from the bulk one, so a request or a
    #: reply never waits in a socket or a parser behind a batch of pulled events or a
    #: pipeline of publish acks (None: the same connection as `nc`)
    rpc_nc: Client | None = None
