"""RpcRegistry.dispatch: a handler that met an outage answers `unavailable`, a bug `internal`.

The difference reaches the client as 503 (retry later) versus 500 (retrying will not help), so an
outage reported as `internal` makes agents drop work they should have retried.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from nats.errors import ConnectionClosedError, NoRespondersError, OutboundBufferLimitError
from nats.errors import TimeoutError as NatsTimeoutError
from psycopg_pool import PoolTimeout
from pydantic import BaseModel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from habitus.bus.publisher import NotConfirmed
from habitus.bus.rpc import RpcContext, RpcRegistry

METHOD = "echo.whoami"


class Params(BaseModel):
    pass


def registry_raising(exc: Exception) -> RpcRegistry:
    registry = RpcRegistry()

    @registry.method(METHOD, Params)
    async def handler(params: Params, ctx: RpcContext) -> Any:
        raise exc

    return registry


async def code_for(exc: Exception) -> str:
    raw = await registry_raising(exc).dispatch(
        METHOD, json.dumps({"tenant_id": "acme", "params": {}}).encode())
    return str(json.loads(raw)["error"]["code"])


@pytest.mark.parametrize(
    "exc",
    [psycopg.OperationalError("connection refused"), psycopg.InterfaceError("closed"),
     PoolTimeout("no connection in 10s"), NatsTimeoutError(), NoRespondersError(),
     ConnectionClosedError(), OutboundBufferLimitError(), NotConfirmed("no ack"),
     RedisConnectionError("down"), RedisTimeoutError("slow")],
    ids=lambda e: type(e).__name__,
)
async def test_an_outage_in_a_handler_is_unavailable(exc: Exception) -> None:
    assert await code_for(exc) == "unavailable"


@pytest.mark.parametrize(
    "exc",
    [ZeroDivisionError(), KeyError("x"), psycopg.errors.UndefinedTable("no such table"),
     psycopg.DataError("bad value")],
    ids=lambda e: type(e).__name__,
)
async def test_a_bug_in_a_handler_stays_internal(exc: Exception) -> None:
    assert await code_for(exc) == "internal"
