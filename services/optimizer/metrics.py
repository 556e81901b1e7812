"""The optimizer's metrics: trials by proposer and outcome, runs ended by status, and how long
an evaluation takes (what `make bench` measures against paging the traces)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from habitus.telemetry.metrics import registry

TRIALS = Counter(
    "habitus_optimizer_trials_total",
    "Trials evaluated, by proposer (random, grid, merge, llm) and result (estimated, refused, "
    "parse_failure).",
    ["proposer", "result"], registry=registry,
)
RUNS = Counter(
    "habitus_optimizer_runs_total",
    "Runs ended, by status (completed, stopped, failed).",
    ["status"], registry=registry,
)
EVALUATION_SECONDS = Histogram(
    "habitus_optimizer_evaluation_seconds",
    "Seconds one trial's evaluation took, by evaluator.",
    ["evaluator"],
    buckets=(0.001, 0.005, 0.02, 0.1, 0.5, 2, 10, 60, 300),
    registry=registry,
)
LOG_SECONDS = Histogram(
    "habitus_optimizer_log_load_seconds",
    "Seconds reading a tenant's evaluation log took (once per run).",
    buckets=(0.01, 0.05, 0.2, 1, 5, 20, 60),
    registry=registry,
)
