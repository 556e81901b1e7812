"""Benchmarks: each figure is a ratio against a baseline measured in the same run, on the same
servers, so a noisy shared machine moves both sides together. Results are printed and appended
to var/bench/results.jsonl; docs/benchmarks.md records the figures."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "var" / "bench" / "results.jsonl"


@pytest.fixture(scope="session")
def event_loop_policy() -> Any:
    """The in-process side of every ratio runs on asyncio's default loop unless
    HABITUS_BENCH_LOOP=uvloop (what `habitus serve` uses); both sides always share the loop."""
    if os.environ.get("HABITUS_BENCH_LOOP") == "uvloop":
        import uvloop

        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


@pytest.fixture
def record() -> Any:
    def _record(name: str, **figures: Any) -> None:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        row = {"bench": name, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}
        with RESULTS.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"\n[bench] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))

    return _record
