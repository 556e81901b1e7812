"""An RPC error as a JSON answer that carries extra body fields (an ingest batch's results)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from habitus.bus.rpc import RpcError
from services.gateway.errors import RETRYABLE


def error_response(exc: RpcError, *, retry_after: int | None = None, **extra: Any
                   ) -> JSONResponse:
    headers = ({"Retry-After": str(retry_after)}
               if retry_after is not None and exc.code in RETRYABLE else None)
    return JSONResponse({**exc.as_reply(), **extra}, status_code=exc.http_status,
                        headers=headers)
