"""Request metrics: every answer's latency, labelled by method, route template and status.

A plain ASGI middleware, not Starlette's `BaseHTTPMiddleware`: that one runs every request's
app in a task group of its own and streams the response back through a second queue, which
py-spy put at about a tenth of the gateway's CPU per `prompt.context` hit, a read that is
otherwise two Redis commands. Here the app runs in the caller's task and `send` is only watched
for the status. The time is taken when the app returns, so it includes sending the body.
"""

from __future__ import annotations

import time

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from habitus.telemetry import metrics


def _route(scope: Scope) -> str:
    """The template of the route the request matches (a bounded label: never the raw path)."""
    app = scope.get("app")
    for r in getattr(getattr(app, "router", None), "routes", ()):
        match, _ = r.matches(scope)
        if match == Match.FULL:
            return str(getattr(r, "path", "unmatched"))
    return "unmatched"


class MetricsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        route = _route(scope)
        status = 500  # what the client gets when the app fails before answering

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            metrics.HTTP_SECONDS.labels(scope["method"], route, str(status)).observe(
                time.perf_counter() - started)
