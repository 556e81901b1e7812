"""One error shape for everything the gateway answers: `{"error": {"code", "message"}}`.

Clients branch on the code and on whether retrying can help, so a plain-text traceback or
FastAPI's `{"detail": ...}` is a contract break: every failure, including a bug, is turned into
the same shape here. Only a real outage says 503 with Retry-After; a permanent error never does.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from nats.errors import Error as NatsError
from nats.errors import MaxPayloadError
from psycopg import InterfaceError, OperationalError
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from habitus.bus.rpc import RpcError

log = logging.getLogger(__name__)

DB_UNAVAILABLE = (OperationalError, InterfaceError, PoolTimeout)
# Errors that say "try again later": they carry Retry-After.
RETRYABLE = frozenset({"unavailable", "deadline_exceeded", "rate_limited"})
_HTTP_CODES = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied",
               404: "not_found", 405: "method_not_allowed", 409: "conflict",
               408: "request_timeout", 413: "payload_too_large", 415: "unsupported_media_type",
               429: "rate_limited"}


class GatewayError(Exception):
    """An HTTP answer the RPC code table has no row for (415, 405) or one that must carry its
    own Retry-After (a rate limit's window) or extra body fields."""

    def __init__(self, code: str, message: str, status: int, *, retry_after: int | None = None,
                 headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after
        #: response headers of its own (`Connection: close` after a body that never came)
        self.headers = headers or {}
        self.extra = extra


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}, **extra}


#: RFC 6750: a 401 says which scheme to authenticate with
BEARER_CHALLENGE = 'Bearer realm="habitus"'


def install_error_handlers(app: FastAPI, retry_after_seconds: int) -> None:
    def retry_headers(code: str, seconds: int | None = None) -> dict[str, str] | None:
        if code == "unauthenticated":
            return {"WWW-Authenticate": BEARER_CHALLENGE}
        if code not in RETRYABLE:
            return None
        return {"Retry-After": str(seconds if seconds is not None else retry_after_seconds)}

    @app.exception_handler(RpcError)
    async def rpc_error(_: Request, exc: RpcError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.http_status,
                            headers=retry_headers(exc.code))

    @app.exception_handler(GatewayError)
    async def gateway_error(_: Request, exc: GatewayError) -> JSONResponse:
        headers = {**(retry_headers(exc.code, exc.retry_after) or {}), **exc.headers}
        return JSONResponse(error_body(exc.code, exc.message, **exc.extra),
                            status_code=exc.status, headers=headers or None)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
        return JSONResponse(error_body("invalid_argument", "; ".join(parts) or "bad request"),
                            status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code,
                               "internal" if exc.status_code >= 500 else "invalid_argument")
        headers = {**(retry_headers(code) or {}), **dict(exc.headers or {})}
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code,
                            headers=headers or None)

    @app.exception_handler(NatsError)
    async def bus_error(_: Request, exc: NatsError) -> JSONResponse:
        if isinstance(exc, MaxPayloadError):
            return JSONResponse(error_body("payload_too_large", "larger than the bus's maximum "
                                           "message size"), status_code=413)
        log.warning("bus unavailable", extra={"error": repr(exc)})
        return JSONResponse(error_body("unavailable", f"the bus is unavailable "
                                       f"({type(exc).__name__}); retry later"),
                            status_code=503, headers=retry_headers("unavailable"))

    for db_error in DB_UNAVAILABLE:
        @app.exception_handler(db_error)
        async def database_error(_: Request, exc: Exception) -> JSONResponse:
            log.warning("database unavailable", extra={"error": repr(exc)})
            return JSONResponse(error_body("unavailable", "the database is unavailable; "
                                           "retry later"),
                                status_code=503, headers=retry_headers("unavailable"))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("gateway request failed", exc_info=exc,
                  extra={"path": request.url.path, "method": request.method})
        return JSONResponse(
            error_body("internal", f"internal error ({type(exc).__name__}); it was logged, "
                                   "and retrying will not help until it is fixed"),
            status_code=500)
