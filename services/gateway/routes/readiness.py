"""`GET /readyz`: ready when the bus, the database, Redis and every expected service answer."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from habitus.service.context import ServiceContext
from habitus.service.health import dependency_checks


def add_readiness_route(app: FastAPI, ctx: ServiceContext) -> None:
    settings = ctx.settings

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        pings = {f"service:{s}": ctx.rpc.call(f"{s}.ping", "system", timeout=2.0)
                 for s in settings.expected_service_list()}
        checks = await dependency_checks(ctx, pings)
        ok = all(v is None for v in checks.values())
        return JSONResponse({"status": "ready" if ok else "unavailable", "checks": checks},
                            status_code=200 if ok else 503)
