"""The trace router's metrics: routing decisions by policy and chosen model, and the reward of
the traces it stores (what the bandit and GRPO policies learn from)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from habitus.telemetry.metrics import registry

DECISIONS = Counter(
    "habitus_router_decisions_total",
    "router.select_model answers, by policy and the model chosen.",
    ["policy", "model"], registry=registry,
)
REWARD = Histogram(
    "habitus_router_reward",
    "Reward in [0, 1] of each trace stored, and again when feedback changes it, by the "
    "trace's model.",
    ["model"],
    buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    registry=registry,
)
