"""The gateway's metrics: backpressure, and how it served `prompt.context`. No tenant in any
label (tenants are unbounded): the reason and the outcome are bounded categories and the
projection one of the installed ones."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from habitus.telemetry.metrics import registry

PIPELINE_LAG = Gauge(
    "habitus_gateway_pipeline_lag_seconds",
    "How far behind the pipeline is end to end: each projection's age of the oldest event "
    "it has not applied, summed along the slowest chain, as the gateway last measured it "
    "for backpressure (0: caught up).",
    registry=registry,
)
SHED_REQUESTS = Counter(
    "habitus_gateway_backpressure_shed_requests_total",
    "Ingest requests answered 429 by backpressure, by reason (sole_tenant: the only tenant "
    "sending; over_fair_share: at or over its fair share of the backlog) and the projection "
    "behind.",
    ["reason", "projection"], registry=registry,
)
SHED_ITEMS = Counter(
    "habitus_gateway_backpressure_shed_items_total",
    "Items of the ingest requests backpressure refused, by reason and projection (as "
    "habitus_gateway_backpressure_shed_requests_total).",
    ["reason", "projection"], registry=registry,
)
LAG_FAILURES = Counter(
    "habitus_gateway_lag_measurement_failures_total",
    "Backpressure lag measurements that failed (the bus did not answer); ingest is let "
    "through while the lag is unknown.",
    registry=registry,
)
CONTEXT_READS = Counter(
    "habitus_gateway_prompt_context_total",
    "prompt.context calls by how the gateway served them (hit: from the context cache, without "
    "the profile renderer; miss: not cached or no longer current, forwarded to the renderer; "
    "forwarded: with a request (the habits section is never cached) or parameters the renderer "
    "must judge).",
    ["outcome"], registry=registry,
)
LOCAL_CONTEXT_HITS = Counter(
    "habitus_gateway_prompt_context_local_total",
    "prompt.context hits answered from the gateway's memory, without Redis (a part of "
    "habitus_gateway_prompt_context_total{outcome=\"hit\"}).",
    registry=registry,
)
CONTEXT_TRACKING_UP = Gauge(
    "habitus_gateway_context_tracking_up",
    "1 while Redis tells this gateway process about every change of a cached context (its "
    "answers kept in memory are served); 0: every read goes to Redis.",
    registry=registry,
)
