"""The `habitus_*` metrics. Base units, `_total` counters, no user ids in labels.

Defined once at import so every module that records a metric shares the same collector in the
process registry that `/metrics` serves.
"""

from __future__ import annotations

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

# `_created` series double every counter's cardinality and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

registry: CollectorRegistry = REGISTRY

APPLIED = Counter(
    "habitus_projection_applied_events_total",
    "Events applied to a projection (committed with the checkpoint).",
    ["projection"],
)
REDELIVERED = Counter(
    "habitus_projection_redelivered_events_total",
    "Deliveries at or below the checkpoint, acknowledged without applying.",
    ["projection"],
)
REPUBLISHED = Counter(
    "habitus_projection_republished_events_total",
    "Events whose id the projection had already applied (re-published past the stream's "
    "duplicate window), acknowledged without applying.",
    ["projection"],
)
BATCH_SECONDS = Histogram(
    "habitus_projection_batch_duration_seconds",
    "Time to apply one batch and commit its checkpoint.",
    ["projection"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CHECKPOINT = Gauge(
    "habitus_projection_checkpoint_seq",
    "Stream sequence of the last event a projection committed.",
    ["projection", "partition"],
)
PENDING = Gauge(
    "habitus_projection_pending_events",
    "Events in the stream not yet delivered to the projection's consumer (lag).",
    ["projection", "partition"],
)
ACK_PENDING = Gauge(
    "habitus_projection_ack_pending_events",
    "Deliveries to the projection's durable consumer not yet acknowledged.",
    ["projection", "partition"],
)
LAG = Gauge(
    "habitus_projection_lag_events",
    "Stream sequences between the projection's checkpoint and the stream's last message on "
    "the projection's subjects (0: caught up).",
    ["projection", "partition"],
)
RETRIES = Counter(
    "habitus_projection_transient_retries_total",
    "Batches retried after a transient fault (database or bus unavailable).",
    ["projection"],
)
KEYS_UNAVAILABLE = Counter(
    "habitus_projection_keys_unavailable_total",
    "Rewinds because an event's data key could not be found or unwrapped here (the key store "
    "not mounted, a KEK missing): the projection waits for it instead of dead-lettering.",
    ["projection"],
)
DLQ = Counter(
    "habitus_dlq_events_total",
    "Events sent to HABITUS_DLQ, by consumer and reason.",
    ["consumer", "reason"],
)
INGEST_ITEMS = Counter(
    "habitus_gateway_ingest_items_total",
    "Items received by POST /v1/events, by type and result.",
    ["type", "result"],
)
INGEST_REJECTED = Counter(
    "habitus_gateway_ingest_rejected_total",
    "Items POST /v1/events refused, by reason (a bounded category: not_object, "
    "unstorable_text, too_large, unknown_field, type, tenant_id, user_id, event_id, "
    "clock_skew, invalid_payload, conflict).",
    ["reason"],
)
LOOP_LAG = Histogram(
    "habitus_event_loop_lag_seconds",
    "How late a process's event loop woke a timer that was due (habitus.telemetry.loop_lag): "
    "what every request and delivery it handles waits first, for the loop or for a core.",
    ["process"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
HTTP_SECONDS = Histogram(
    "habitus_gateway_http_request_duration_seconds",
    "Gateway HTTP request duration.",
    ["method", "route", "status"],
)
RPC_REQUESTS = Counter(
    "habitus_gateway_rpc_requests_total",
    "RPC calls forwarded by the gateway, by method and outcome.",
    ["method", "outcome"],
)
