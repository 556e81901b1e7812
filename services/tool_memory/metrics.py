"""Tool memory's metrics: the rules it keeps, by where they came from."""

from __future__ import annotations

from prometheus_client import Counter

from habitus.telemetry.metrics import registry

RULES = Counter(
    "habitus_tool_rules_captured_total",
    "ToolRuleUpserted events applied to the rules view, by source (user_explicit and "
    "post_turn: captured from turns; others: published by their producer).",
    ["source"], registry=registry,
)
