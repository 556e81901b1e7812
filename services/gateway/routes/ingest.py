"""`POST /v1/events`: batch ingest.

Ingest is all-or-nothing by default: if any item is rejected, nothing of the batch is published
and the answer (4xx) says, per item, what was wrong. `?partial=true` publishes the valid items and
reports the rejected ones, for agents that prefer to drop bad records. What happens at publish
time (a conflict, an outage) is reported per item too; see services.gateway.publishing.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse

from habitus.bus.rpc import RpcError
from habitus.service.context import ServiceContext
from habitus.telemetry import metrics
from habitus.telemetry.gc_tuning import collection_paused
from services.gateway.access import Access
from services.gateway.auth import authenticate
from services.gateway.body import (
    DuplicateKey,
    TooDeep,
    check_media_type,
    format_path,
    parse_json,
)
from services.gateway.body_limit import BodyTooLarge
from services.gateway.ingest import build_event, may_hold_unstorable
from services.gateway.ingest_results import _TYPES, _count, _publish_error, _result, _summary
from services.gateway.publishing import publish_events
from services.gateway.responses import error_response


def add_ingest_route(app: FastAPI, ctx: ServiceContext, access: Access) -> None:
    settings = ctx.settings
    keys, charge = access.keys, access.charge

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
            raw = await access.bodies.read(request)
        except BodyTooLarge as exc:
            raise RpcError("payload_too_large",
                           f"body: {exc.args[0]} bytes; the limit is {settings.max_body_bytes}"
                           ) from None
        try:
            with collection_paused():
                items = parse_json(raw, settings.max_json_depth)
        except TooDeep as exc:
            in_list = raw.lstrip()[:1] == b"["
            where = (f"item {exc.path[0]}: {format_path(exc.path[1:])}" if exc.path and in_list
                     else format_path(exc.path))
            raise RpcError("invalid_event", f"{where}: nested deeper than {exc.limit} levels; "
                                            "nothing was published") from None
        except DuplicateKey as exc:
            in_list = raw.lstrip()[:1] == b"["
            where = (f"item {exc.path[0]}: {format_path(exc.path[1:])}"
                     if len(exc.path) > 1 and in_list else format_path(exc.path))
            raise RpcError("invalid_argument", f"{where}: the key appears twice in its object; "
                                               "give each key once; nothing was published"
                           ) from None
        except ValueError as exc:
            raise RpcError("invalid_argument", f"body: not JSON ({exc})") from None
        if not isinstance(items, list):
            raise RpcError("invalid_argument", "body: must be a JSON list of events")
        if not items:
            raise RpcError("invalid_argument", "body: the list is empty")
        if len(items) > settings.max_batch_items:
            raise RpcError("payload_too_large",
                           f"body: {len(items)} items; the limit is {settings.max_batch_items}")
        # Backpressure before the rate limit: a batch refused for the lag spends no budget.
        access.push_back(caller, len(items))
        await charge(caller, len(items))
        now = time.time()
        # No item can exceed the item limit if the whole body does not: skip measuring them.
        item_limit = settings.max_item_bytes if len(raw) > settings.max_item_bytes else None
        # Nor hold unstorable text if the bytes cannot: skip walking every item for it.
        text_checked = not may_hold_unstorable(raw)
        with collection_paused():
            outcomes = [
                build_event(item, index=i, tenant_id=caller.tenant_id, now=now,
                            max_item_bytes=item_limit,
                            max_clock_skew=settings.max_clock_skew_seconds,
                            text_checked=text_checked)
                for i, item in enumerate(items)
            ]
        rejected = [o for o in outcomes if not o.ok]
        for o in rejected:
            metrics.INGEST_REJECTED.labels(o.reason).inc()
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
            if pub.status in ("too_large", "conflict"):
                metrics.INGEST_REJECTED.labels(pub.status).inc()
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
        access.accepted(caller, statuses["accepted"])
        failure = _publish_error(valid, published)
        if failure is not None:
            return error_response(failure, retry_after=settings.retry_after_seconds, **body)
        return JSONResponse(body, status_code=207 if rejected else 200)
