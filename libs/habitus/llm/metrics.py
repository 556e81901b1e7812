"""The `habitus_llm_*` metrics, shared by every service that calls a model.

Labelled by service and outcome only: tenants and users never appear in labels (cardinality, and
a metrics scrape is not a place for personal data). Calls count logical calls, attempts count
HTTP requests, so retries show up as the gap between the two.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from habitus.telemetry.metrics import registry

CALLS = Counter(
    "habitus_llm_calls_total",
    "Logical LLM calls, by outcome (ok or the reason the call failed).",
    ["service", "outcome"],
    registry=registry,
)
ATTEMPTS = Counter(
    "habitus_llm_attempts_total",
    "HTTP requests to the LLM endpoint, by outcome (retries and fallbacks included).",
    ["service", "outcome"],
    registry=registry,
)
TOKENS = Counter(
    "habitus_llm_tokens_total",
    "Tokens of completed LLM calls, by direction (in: prompt, out: answer).",
    ["service", "direction"],
    registry=registry,
)
CALL_SECONDS = Histogram(
    "habitus_llm_call_duration_seconds",
    "Duration of a logical LLM call, retries and their waits included.",
    ["service"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120),
    registry=registry,
)
BUDGET_EXHAUSTED = Counter(
    "habitus_llm_budget_exhausted_total",
    "LLM calls refused before any request because a tenant's daily budget was spent.",
    ["service", "budget"],
    registry=registry,
)
STRUCTURED_FALLBACKS = Counter(
    "habitus_llm_structured_fallbacks_total",
    "Clients that switched from json_schema to fenced output because the server refused it.",
    ["service"],
    registry=registry,
)
BUDGET_REMAINING = Gauge(
    "habitus_llm_budget_remaining_ratio",
    "Share of today's budget (calls or tokens) left to the tenant with the least left among "
    "those this process checked today (1: no limit or nothing spent). No tenant label: the "
    "per-tenant figures are in the usage table.",
    ["service", "budget"],
    registry=registry,
)
