"""The gateway's HTTP API: batch ingest, RPC forwarding, health, metrics, OpenAPI.

Ingest is all-or-nothing by default: if any item is rejected, nothing of the batch is published
and the answer (4xx) says, per item, what was wrong. `?partial=true` publishes the valid items and
reports the rejected ones, for agents that prefer to drop bad records. What happens at publish
time (a conflict, an outage) is reported per item too; see services.gateway.publishing.
Rate limits count ingested items, not requests: one batch of 1,000 costs what 1,000 single
posts do.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response
from starlette.routing import Match

from habitus.bus.publisher import PublishResult
from habitus.bus.rpc import RpcError
from habitus.contract import METHODS, method_names
from habitus.events import CATALOG
from habitus.service.context import ServiceContext
from habitus.service.health import dependency_checks
from habitus.telemetry import metrics
from services.gateway.auth import Caller, KeyCache, authenticate
from services.gateway.body import TooDeep, check_media_type, format_path, parse_json, unstorable
from services.gateway.errors import RETRYABLE, GatewayError, install_error_handlers
from services.gateway.ingest import ItemOutcome, build_event
from services.gateway.openapi import install as install_openapi
from services.gateway.publishing import Published, publish_events
from services.gateway.ratelimit import RateLimiter

log = logging.getLogger(__name__)


def error_response(exc: RpcError, *, retry_after: int | None = None, **extra: Any
                   ) -> JSONResponse:
    headers = ({"Retry-After": str(retry_after)}
               if retry_after is not None and exc.code in RETRYABLE else None)
    return JSONResponse({**exc.as_reply(), **extra}, status_code=exc.http_status,
                        headers=headers)


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(int(declared))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(size)
        chunks.append(chunk)
    return b"".join(chunks)


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


def _result(outcome: ItemOutcome, status: str, published: PublishResult | None = None,
            error: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"index": outcome.index, "status": status}
    if outcome.type:
        doc["type"] = outcome.type
    if outcome.event is not None and status != "rejected":
        doc["event_id"] = outcome.event.event_id
    if published is not None:
        doc["seq"] = published.seq
    if outcome.errors:
        doc["errors"] = [e.as_dict() for e in outcome.errors]
    if error:
        doc["error"] = error
    return doc


def _summary(outcomes: list[ItemOutcome]) -> str:
    first = next(o for o in outcomes if not o.ok)
    detail = "; ".join(f"{e.field}: {e.reason}" for e in first.errors)
    count = sum(1 for o in outcomes if not o.ok)
    more = f" (and {count - 1} more rejected item(s))" if count > 1 else ""
    return f"item {first.index}: {detail}{more}"


def _publish_error(valid: list[ItemOutcome], published: list[Published]) -> RpcError | None:
    """One status for a batch whose items fared differently at publish time: a permanent
    failure wins (retrying cannot fix it), then "not stored", then "not confirmed"."""
    def items(status: str, permanent: bool | None = None) -> list[str]:
        return [f"item {o.index}" for o, p in zip(valid, published, strict=True)
                if p.status == status and (permanent is None or p.permanent == permanent)]

    if found := items("conflict"):
        return RpcError("conflict", f"{', '.join(found)}: the event_id is already stored with "
                                    "a different payload; the other items were processed")
    if found := items("too_large"):
        return RpcError("payload_too_large", f"{', '.join(found)}: larger than the bus's "
                                             "maximum message size; nothing of it was stored")
    if found := items("not_stored", permanent=True):
        return RpcError("internal", f"{', '.join(found)}: the stream refused to store it; "
                                    "retrying will not help")
    if found := items("not_stored"):
        return RpcError("unavailable", f"{len(found)} item(s) could not be stored; retrying "
                                       "them is safe (event ids deduplicate)")
    if found := items("not_confirmed"):
        return RpcError("deadline_exceeded", f"{len(found)} item(s) were sent but not "
                                             "confirmed; retrying with the same event_id is "
                                             "safe")
    return None


def create_app(ctx: ServiceContext) -> FastAPI:
    settings = ctx.settings
    keys = KeyCache(ctx.pool, ttl=settings.key_cache_seconds,
                    last_known=settings.key_last_known_max)
    limiter = RateLimiter(ctx.redis, settings.rate_limit_per_minute)
    app = FastAPI(
        title="Habitus gateway",
        version="1",
        description="Agents report what happened; Habitus learns, per user, what the next "
        "prompt should carry. Authenticate with `Authorization: Bearer <key>`.",
    )
    app.add_middleware(MetricsMiddleware)
    install_openapi(app, settings)
    install_error_handlers(app, settings.retry_after_seconds)

    async def caller_for(request: Request, cost: int = 1) -> Caller:
        caller = await authenticate(request, keys)
        await charge(caller, cost)
        return caller

    async def charge(caller: Caller, cost: int) -> None:
        per_minute = settings.rate_limit_per_minute
        if 0 < per_minute < cost:  # waiting cannot help: permanent, not 429
            raise RpcError("payload_too_large", f"body: {cost} items; the rate limit allows "
                                                f"{per_minute} per minute, send smaller batches")
        allowed, retry_after = await limiter.allow(caller.principal.key_hash, cost)
        if not allowed:
            raise GatewayError("rate_limited", f"rate limit of {per_minute} items per minute "
                               f"exceeded; retry in {retry_after}s", 429, retry_after=retry_after)

    @app.post(
        "/v1/events",
        summary="Report events (a JSON list of ingest items)",
        responses={413: {"description": "body, batch or item too large"},
                   422: {"description": "an item was rejected; nothing was published"}},
    )
    async def ingest(
        request: Request,
        partial: bool = Query(False, description="publish valid items even if some are bad"),
    ) -> JSONResponse:
        caller = await authenticate(request, keys)
        check_media_type(request)
        try:
            raw = await read_body(request, settings.max_body_bytes)
        except BodyTooLarge as exc:
            raise RpcError("payload_too_large",
                           f"body: {exc.args[0]} bytes; the limit is {settings.max_body_bytes}"
                           ) from None
        try:
            items = parse_json(raw, settings.max_json_depth)
        except TooDeep as exc:
            in_list = raw.lstrip()[:1] == b"["
            where = (f"item {exc.path[0]}: {format_path(exc.path[1:])}" if exc.path and in_list
                     else format_path(exc.path))
            raise RpcError("invalid_event", f"{where}: nested deeper than {exc.limit} levels; "
                                            "nothing was published") from None
        except ValueError as exc:
            raise RpcError("invalid_argument", f"body: not JSON ({exc})") from None
        if not isinstance(items, list):
            raise RpcError("invalid_argument", "body: must be a JSON list of events")
        if not items:
            raise RpcError("invalid_argument", "body: the list is empty")
        if len(items) > settings.max_batch_items:
            raise RpcError("payload_too_large",
                           f"body: {len(items)} items; the limit is {settings.max_batch_items}")
        await charge(caller, len(items))
        now = time.time()
        # No item can exceed the item limit if the whole body does not: skip measuring them.
        item_limit = settings.max_item_bytes if len(raw) > settings.max_item_bytes else None
        outcomes = [
            build_event(item, index=i, tenant_id=caller.tenant_id, now=now,
                        max_item_bytes=item_limit,
                        max_clock_skew=settings.max_clock_skew_seconds)
            for i, item in enumerate(items)
        ]
        rejected = [o for o in outcomes if not o.ok]
        counted: Counter[tuple[str, str]] = Counter(
            (o.type if o.type in _TYPES else "unknown", "rejected") for o in rejected
        )
        if rejected and not partial:
            too_large = any(o.too_large for o in rejected)
            _count(counted)
            err = RpcError("payload_too_large" if too_large else "invalid_event",
                           _summary(outcomes) + "; nothing was published")
            results = [_result(o, "rejected" if not o.ok else "not_published") for o in outcomes]
            return error_response(err, results=results, accepted=0, duplicates=0,
                                  rejected=len(rejected))
        valid = [o for o in outcomes if o.ok]
        published = await publish_events(ctx.publisher, ctx.js,
                                          [o.event for o in valid if o.event])
        by_index: dict[int, dict[str, Any]] = {}
        for o, pub in zip(valid, published, strict=True):
            status = "rejected" if pub.status == "too_large" else pub.status
            by_index[o.index] = _result(o, status, published=pub.result, error=pub.error)
            counted[(o.type or "unknown", pub.status)] += 1
        _count(counted)
        for o in rejected:
            by_index[o.index] = _result(o, "rejected")
        results = [by_index[i] for i in range(len(outcomes))]
        statuses = Counter(r["status"] for r in results)
        body = {
            "accepted": statuses["accepted"],
            "duplicates": statuses["duplicate"],
            "rejected": statuses["rejected"],
            "conflicts": statuses["conflict"],
            "failed": statuses["not_stored"] + statuses["not_confirmed"],
            "results": results,
        }
        failure = _publish_error(valid, published)
        if failure is not None:
            return error_response(failure, retry_after=settings.retry_after_seconds, **body)
        return JSONResponse(body, status_code=207 if rejected else 200)

    @app.post("/v1/rpc/{method}", summary="Call a Habitus method with the caller's tenant")
    async def rpc(method: str, request: Request) -> JSONResponse:
        caller = await caller_for(request)
        try:
            raw = await read_body(request, settings.max_body_bytes)
        except BodyTooLarge:
            raise RpcError("payload_too_large", "body too large") from None
        if raw.strip():
            check_media_type(request)
        try:
            params = parse_json(raw, settings.max_json_depth) if raw.strip() else {}
        except TooDeep as exc:
            raise RpcError("invalid_argument", f"{format_path(exc.path)}: nested deeper than "
                                               f"{exc.limit} levels") from None
        except ValueError as exc:
            raise RpcError("invalid_argument", f"body: not JSON ({exc})") from None
        if not isinstance(params, dict):
            raise RpcError("invalid_argument", "body: must be a JSON object of parameters")
        for where, reason in unstorable(params):
            raise RpcError("invalid_argument", f"{where}: {reason}")
        try:
            reply = await ctx.rpc.call_raw(
                method,
                {"tenant_id": caller.tenant_id, "params": params,
                 "correlation_id": request.headers.get("x-correlation-id")},
            )
        except ValueError as exc:  # an unspellable method name
            metrics.RPC_REQUESTS.labels("invalid", "invalid_argument").inc()
            raise RpcError("invalid_argument", str(exc)) from None
        except RpcError as exc:
            # No service answered: the name is the caller's, so it must not become a label.
            label = "unknown" if exc.code == "unavailable" else method
            if exc.code == "unavailable" and method not in METHODS:
                # Nobody answers a name the RPC table lacks: the caller's mistake, not an outage.
                exc = RpcError("not_found", f"unknown method {method!r}; the methods are "
                                            + ", ".join(method_names()))
            metrics.RPC_REQUESTS.labels(label, exc.code).inc()
            raise exc from None
        if "error" in reply:
            err = RpcError(str(reply["error"].get("code")), str(reply["error"].get("message")))
            metrics.RPC_REQUESTS.labels(method, err.code).inc()
            raise err  # the handlers add Retry-After to "unavailable"
        metrics.RPC_REQUESTS.labels(method, "ok").inc()
        return JSONResponse({"result": reply["result"]})

    @app.get("/v1/users/{user_id}/profile.md", summary="A user's PROFILE.md (text/markdown)",
             response_class=Response,
             responses={200: {"content": {"text/markdown": {}}}})
    async def profile_markdown(user_id: str, request: Request) -> Response:
        caller = await caller_for(request)
        try:
            result = await ctx.rpc.call("profile.get", caller.tenant_id, {"user_id": user_id})
        except RpcError as exc:
            metrics.RPC_REQUESTS.labels("profile.get", exc.code).inc()
            raise
        metrics.RPC_REQUESTS.labels("profile.get", "ok").inc()
        return Response(result["markdown"], media_type="text/markdown; charset=utf-8",
                        headers={"X-Habitus-Profile-Version": str(result["version"]),
                                 "ETag": f'"{result["sha256"]}"'})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        pings = {f"service:{s}": ctx.rpc.call(f"{s}.ping", "system", timeout=2.0)
                 for s in settings.expected_service_list()}
        checks = await dependency_checks(ctx, pings)
        ok = all(v is None for v in checks.values())
        return JSONResponse({"status": "ready" if ok else "unavailable", "checks": checks},
                            status_code=200 if ok else 503)

    return app


def _count(counted: Counter[tuple[str, str]]) -> None:
    for (type_name, result), n in counted.items():
        metrics.INGEST_ITEMS.labels(type_name, result).inc(n)


# Metric labels stay bounded: a rejected item's made-up type counts as "unknown".
_TYPES = frozenset(CATALOG.ingest_types())
__all__ = ("create_app",)
