"""The gateway's request metrics middleware: every answer timed under its method, its route's
template (never the raw path: ids would make the label unbounded) and the status the client
got, including a failure's 500 and a path no route matches."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse

from habitus.telemetry import metrics
from services.gateway.middleware import MetricsMiddleware

pytestmark = pytest.mark.asyncio


def count(method: str, route: str, status: str) -> float:
    value = metrics.registry.get_sample_value(
        "habitus_gateway_http_request_duration_seconds_count",
        {"method": method, "route": route, "status": status})
    return value or 0.0


def app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(MetricsMiddleware)

    @app.get("/v1/users/{user_id}/profile.md")
    async def profile(user_id: str) -> PlainTextResponse:
        return PlainTextResponse(f"# {user_id}\n", status_code=200)

    @app.post("/v1/rpc/{method}")
    async def rpc(method: str) -> JSONResponse:
        return JSONResponse({"error": {"code": "not_found"}}, status_code=404)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    return app


async def test_answers_are_counted_by_route_template_and_status() -> None:
    before = {
        "profile": count("GET", "/v1/users/{user_id}/profile.md", "200"),
        "rpc": count("POST", "/v1/rpc/{method}", "404"),
        "boom": count("GET", "/boom", "500"),
        "nowhere": count("GET", "unmatched", "404"),
    }
    transport = httpx.ASGITransport(app=app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        for user in ("ana", "bo", "cy"):
            answer = await client.get(f"/v1/users/{user}/profile.md")
            assert answer.text == f"# {user}\n"  # the body passes through untouched
        assert (await client.post("/v1/rpc/nope.nothing")).status_code == 404
        assert (await client.get("/boom")).status_code == 500
        assert (await client.get("/no/such/path")).status_code == 404

    assert count("GET", "/v1/users/{user_id}/profile.md", "200") == before["profile"] + 3
    assert count("POST", "/v1/rpc/{method}", "404") == before["rpc"] + 1
    assert count("GET", "/boom", "500") == before["boom"] + 1
    assert count("GET", "unmatched", "404") == before["nowhere"] + 1
    assert count("GET", "/v1/users/ana/profile.md", "200") == 0  # no raw path ever
