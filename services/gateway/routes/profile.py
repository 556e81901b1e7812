"""`GET /v1/users/{user_id}/profile.md`: a user's PROFILE.md as markdown, with its version and
ETag in the headers."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from habitus.bus.rpc import RpcError
from habitus.service.context import ServiceContext
from habitus.telemetry import metrics
from services.gateway.access import Access


def add_profile_route(app: FastAPI, ctx: ServiceContext, access: Access) -> None:
    caller_for = access.caller_for

    @app.get("/v1/users/{user_id}/profile.md", summary="A user's PROFILE.md (text/markdown)",
             response_class=Response,
             responses={200: {"content": {"text/markdown": {}}}})
    async def profile_markdown(user_id: str, request: Request) -> Response:
        caller = await caller_for(request, budget="read")
        try:
            result = await ctx.rpc.call("profile.get", caller.tenant_id, {"user_id": user_id})
        except RpcError as exc:
            metrics.RPC_REQUESTS.labels("profile.get", exc.code).inc()
            raise
        metrics.RPC_REQUESTS.labels("profile.get", "ok").inc()
        return Response(result["markdown"], media_type="text/markdown; charset=utf-8",
                        headers={"X-Habitus-Profile-Version": str(result["version"]),
                                 "ETag": f'"{result["sha256"]}"'})
