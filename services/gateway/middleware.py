"""Request metrics: every answer's latency, labelled by method, route template and status."""

from __future__ import annotations

import time

from fastapi import Request
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response
from starlette.routing import Match

from habitus.telemetry import metrics


class MetricsMiddleware(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        started = time.perf_counter()
        route = "unmatched"
        for r in request.app.router.routes:
            match, _ = r.matches(request.scope)
            if match == Match.FULL:
                route = getattr(r, "path", "unmatched")
                break
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            metrics.HTTP_SECONDS.labels(request.method, route, str(status)).observe(
                time.perf_counter() - started
            )
