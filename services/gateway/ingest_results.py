"""The answer to an ingest batch: each item's result, the summary of what was rejected, one
status for what failed at publish time, and the items counted in the metrics."""

from __future__ import annotations

from collections import Counter
from typing import Any

from habitus.bus.publisher import PublishResult
from habitus.bus.rpc import RpcError
from habitus.events import CATALOG
from habitus.telemetry import metrics
from services.gateway.ingest import ItemOutcome
from services.gateway.publishing import Published


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


def _count(counted: Counter[tuple[str, str]]) -> None:
    for (type_name, result), n in counted.items():
        metrics.INGEST_ITEMS.labels(type_name, result).inc(n)


# Metric labels stay bounded: a rejected item's made-up type counts as "unknown".
_TYPES = frozenset(CATALOG.ingest_types())
