"""RPC over core NATS request/reply on `habitus.rpc.<method>`.

The wire shape is fixed so the gateway can forward any method without knowing it:
request `{"tenant_id", "params", "correlation_id"?}`, reply `{"result": ...}` or
`{"error": {"code", "message"}}`. Codes map to HTTP statuses in one table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
from nats.aio.client import Client
from nats.errors import (
    ConnectionClosedError,
    ConnectionReconnectingError,
    NoRespondersError,
    OutboundBufferLimitError,
    StaleConnectionError,
)
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from habitus.events.catalog import EventValidationError
from habitus.ids import check_id
from habitus.subjects import rpc_subject

if TYPE_CHECKING:
    from habitus.contract.rpc import MethodSpec

log = logging.getLogger(__name__)

# A handler failing on one of these met an outage, not a bug: the caller may retry later.
INFRASTRUCTURE_ERRORS = (
    psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout,
    NatsTimeoutError, NoRespondersError, NoStreamResponseError, ServiceUnavailableError,
    ConnectionClosedError, ConnectionReconnectingError, OutboundBufferLimitError,
    StaleConnectionError, RedisConnectionError, RedisTimeoutError,
)

HTTP_STATUS = {
    "invalid_argument": 400,
    "invalid_event": 422,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "conflict": 409,
    "payload_too_large": 413,
    "rate_limited": 429,
    "internal": 500,
    "unavailable": 503,
    "deadline_exceeded": 504,
}


class RpcError(Exception):
    def __init__(self, code: str, message: str):
        if code not in HTTP_STATUS:
            code = "internal"
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]

    def as_reply(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


class RpcRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant_id: str
    params: dict[str, Any] = {}
    correlation_id: str | None = Field(default=None, max_length=64)


@dataclass(frozen=True, slots=True)
class RpcContext:
    tenant_id: str
    method: str
    correlation_id: str | None = None


P = TypeVar("P", bound=BaseModel)
Handler = Callable[[Any, RpcContext], Awaitable[Any]]


@dataclass
class RpcMethod(Generic[P]):
    name: str
    params: type[P]
    handler: Handler


@dataclass
class RpcRegistry:
    """An explicit table of the methods a service answers."""

    methods: dict[str, RpcMethod[Any]] = field(default_factory=dict)

    def method(self, name: str, params: type[P]) -> Callable[[Handler], Handler]:
        rpc_subject(name)  # validates the spelling early

        def register(fn: Handler) -> Handler:
            if name in self.methods:
                raise ValueError(f"rpc method {name} registered twice")
            self.methods[name] = RpcMethod(name, params, fn)
            return fn

        return register

    def implement(self, spec: MethodSpec) -> Callable[[Handler], Handler]:
        """Register a handler for a method of the RPC table, with the table's parameters, so
        what a service validates is what the gateway documents."""
        return self.method(spec.name, spec.params)

    async def dispatch(self, name: str, data: bytes) -> bytes:
        """Validate, run, and encode; never raises, so a bad request cannot kill a service."""
        try:
            result = await self._dispatch(name, data)
            return _encode({"result": result})
        except RpcError as exc:
            return _encode(exc.as_reply())
        except EventValidationError as exc:  # an event built from the caller's input
            return _encode(RpcError("invalid_argument", str(exc)).as_reply())
        except INFRASTRUCTURE_ERRORS as exc:
            log.warning("rpc handler met an outage", extra={"method": name, "error": repr(exc)})
            return _encode(RpcError("unavailable", f"{name} is temporarily unavailable "
                                                   f"({type(exc).__name__}); retry later"
                                    ).as_reply())
        except Exception:
            log.exception("rpc handler failed", extra={"method": name})
            return _encode(RpcError("internal", f"{name} failed").as_reply())

    async def _dispatch(self, name: str, data: bytes) -> Any:
        method = self.methods.get(name)
        if method is None:
            raise RpcError("not_found", f"unknown method {name}")
        try:
            request = RpcRequest.model_validate_json(data)
        except ValidationError as exc:
            raise RpcError("invalid_argument", _describe(exc)) from exc
        try:
            check_id(request.tenant_id, "tenant_id")
        except ValueError as exc:
            raise RpcError("invalid_argument", str(exc)) from exc
        try:
            params = method.params.model_validate(request.params)
        except ValidationError as exc:
            raise RpcError("invalid_argument", _describe(exc)) from exc
        ctx = RpcContext(request.tenant_id, name, request.correlation_id)
        result = await method.handler(params, ctx)
        if isinstance(result, BaseModel):
            return result.model_dump(mode="json", by_alias=True)
        return result


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "params"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _encode(obj: Any) -> bytes:
    return json.dumps(obj, default=str).encode()


class RpcClient:
    def __init__(self, nc: Client, timeout: float = 10.0):
        self._nc = nc
        self._timeout = timeout

    async def call_raw(self, method: str, request: dict[str, Any], timeout: float | None = None
                       ) -> dict[str, Any]:
        subject = rpc_subject(method)
        try:
            reply = await self._nc.request(
                subject, _encode(request), timeout=timeout or self._timeout
            )
        except NoRespondersError:
            raise RpcError("unavailable", f"no service answers {method}") from None
        except NatsTimeoutError:
            raise RpcError("deadline_exceeded", f"{method} did not answer in time") from None
        try:
            body = json.loads(reply.data)
        except ValueError:
            raise RpcError("internal", f"{method} answered with invalid JSON") from None
        if not isinstance(body, dict) or ("result" not in body and "error" not in body):
            raise RpcError("internal", f"{method} answered with an unknown shape")
        return body

    async def call(
        self,
        method: str,
        tenant_id: str,
        params: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        body = await self.call_raw(
            method,
            {"tenant_id": tenant_id, "params": params or {}, "correlation_id": correlation_id},
            timeout,
        )
        if "error" in body:
            err = body["error"]
            raise RpcError(str(err.get("code", "internal")), str(err.get("message", "")))
        return body["result"]
