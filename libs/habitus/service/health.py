"""Liveness and readiness checks shared by every service's HTTP app."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from habitus.service.context import ServiceContext
from habitus.telemetry import metrics


async def _check(name: str, coro: Any, timeout: float = 2.0) -> tuple[str, str | None]:
    try:
        await asyncio.wait_for(coro, timeout)
        return name, None
    except Exception as exc:
        return name, f"{type(exc).__name__}: {exc}"[:300]


async def _postgres(ctx: ServiceContext) -> None:
    async with ctx.pool.connection() as conn:
        await conn.execute("SELECT 1")


async def _nats(ctx: ServiceContext) -> None:
    for nc in {id(c): c for c in (ctx.nc, ctx.rpc_nc) if c is not None}.values():
        if not nc.is_connected:
            raise ConnectionError("not connected")
        await nc.flush(timeout=2)


async def _redis(ctx: ServiceContext) -> None:
    await ctx.redis.ping()


async def dependency_checks(ctx: ServiceContext, extra: dict[str, Any] | None = None
                            ) -> dict[str, str | None]:
    checks = [
        _check("nats", _nats(ctx)),
        _check("postgres", _postgres(ctx)),
        _check("redis", _redis(ctx)),
    ]
    for name, coro in (extra or {}).items():
        checks.append(_check(name, coro))
    return dict(await asyncio.gather(*checks))


def add_standard_routes(app: FastAPI, ctx: ServiceContext, *, disabled: str | None = None
                        ) -> None:
    """`/healthz`, `/metrics` and (unless the app has its own) `/readyz`. A `disabled` service
    is ready (it answers and erases); its details say why it does nothing else."""
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": ctx.name}

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    if not any(getattr(r, "path", None) == "/readyz" for r in app.routes):

        @app.get("/readyz", include_in_schema=False)
        async def readyz() -> JSONResponse:
            results = await dependency_checks(ctx)
            ok = all(v is None for v in results.values())
            body: dict[str, Any] = {"status": "ready" if ok else "unavailable",
                                    "checks": results}
            if disabled is not None:
                body["details"] = {ctx.name: f"disabled: {disabled}"}
            return JSONResponse(body, status_code=200 if ok else 503)
