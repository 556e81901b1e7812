"""The reference implementation's side of the trace-router benchmark, run by
`test_bench_router.py` in the venv `make bench` installs `openjarvis` into (never the project's).

    python openjarvis_side.py COUNT

Stores the generated traces (`trace_corpus.py`, the same ones the Habitus side ingests) with
`TraceStore.save`, one after the other into a fresh SQLite file as the reference does, then
times `TraceAnalyzer.per_route_stats()` (median of 3 calls). Prints one JSON object; when
the package or the API it is measured through is missing, prints {"error": "..."} instead.
Imports nothing from habitus."""

from __future__ import annotations

import inspect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trace_corpus

CALLS = 3  # one call reads every trace and its steps: ~20 s at 10,000


def fail(reason: str) -> None:
    print(json.dumps({"error": reason}))
    sys.exit(0)


def main() -> None:
    count = int(sys.argv[1])
    try:
        from importlib.metadata import version

        from openjarvis.core.types import StepType, Trace, TraceStep
        from openjarvis.traces.analyzer import TraceAnalyzer
        from openjarvis.traces.store import TraceStore
    except Exception as exc:  # the reference is not installed, or moved its modules
        fail(f"cannot import the reference's traces package: {exc!r}")
    if not callable(getattr(TraceStore, "save", None)) or not callable(
            getattr(TraceAnalyzer, "per_route_stats", None)):
        fail("TraceStore.save or TraceAnalyzer.per_route_stats is missing")
    fields = set(inspect.signature(Trace).parameters)
    wanted = {"trace_id", "query", "agent", "model", "engine", "steps", "result", "outcome",
              "feedback", "started_at", "ended_at", "total_tokens", "total_latency_seconds"}
    if not wanted <= fields:
        fail(f"Trace lacks the fields {sorted(wanted - fields)}")

    def convert(d: dict[str, Any]) -> Any:
        steps = [TraceStep(step_type=StepType(s["step_type"]), timestamp=s["timestamp"],
                           duration_seconds=s["duration_seconds"], input=s["input"],
                           output=s["output"], metadata=s["metadata"]) for s in d["steps"]]
        return Trace(trace_id=d["trace_id"], query=d["query"], agent=d["agent"],
                     model=d["model"], engine=d["engine"], steps=steps, result=d["result"],
                     outcome=d["outcome"], feedback=d["feedback"], started_at=d["started_at"],
                     ended_at=d["ended_at"], total_tokens=d["total_tokens"],
                     total_latency_seconds=d["total_latency_seconds"])

    traces = [convert(d) for d in trace_corpus.traces(count)]  # built before the clock starts
    with tempfile.TemporaryDirectory(prefix="openjarvis-bench-") as tmp:
        store = TraceStore(Path(tmp) / "traces.db")
        started = time.perf_counter()
        for t in traces:
            store.save(t)
        save_seconds = time.perf_counter() - started
        analyzer = TraceAnalyzer(store)
        times, stats = [], []
        for _ in range(CALLS):
            started = time.perf_counter()
            stats = analyzer.per_route_stats()
            times.append(time.perf_counter() - started)
        counted = sum(s.count for s in stats)
    print(json.dumps({
        "version": version("openjarvis"), "traces": count, "steps_per_trace": trace_corpus.STEPS,
        "save_seconds": round(save_seconds, 3), "save_per_s": round(count / save_seconds, 1),
        "per_route_stats_s": statistics.median(times), "routes": len(stats),
        "counted": counted,
    }))


if __name__ == "__main__":
    main()
