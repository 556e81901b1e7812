"""`make load`'s runner, end to end, for a few seconds at a low rate: against the learning
services in-process, the way a user runs it against `make run`, but cheap enough for the suite.

The runner runs as a subprocess (and starts locust as another), so gevent's monkeypatching
never enters the test worker; it is awaited with asyncio so the stack, which serves on this
worker's loop, keeps answering meanwhile. The in-process stack has no runtime.json, so the
report must say the CPU was not measured, and why, rather than show zeros.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from habitus.service.migrations import migrate
from tests.conftest import ServerUrls
from tests.support.services import learning_stack, skip_history

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
#: the projections of the services `learning_stack` runs (the others are not started here)
PROJECTIONS = {"producers.candidates": ("producers", "HABITUS_INGEST"),
               "learning.cache": ("learning", "HABITUS_EVENTS"),
               "profile.accounts": ("profile", "HABITUS_INGEST"),
               "profile.render": ("profile", "HABITUS_EVENTS")}


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls, nc: Any) -> AsyncIterator[str]:
    # `nc` made the streams; earlier modules' events on them are not this run's to drain
    migrate(servers.database)
    for name, (schema, stream) in PROJECTIONS.items():
        await skip_history(servers.database, servers.nats, schema, name, stream)
    async with learning_stack(servers.database, servers.settings()) as url:
        yield url


async def test_a_short_load_run_is_accepted_drains_and_reports_its_cost(
        stack: str, servers: ServerUrls, tmp_path: Path) -> None:
    out = tmp_path / "report"
    env = {**os.environ, **servers.env(), "HABITUS_DATA_DIR": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.load.run", "--duration", "5", "--rate", "60",
        "--users", "1", "--readers", "1", "--read-rate", "4", "--batch", "10",
        "--tenants", "2", "--users-per-tenant", "5", "--idle-samples", "5",
        "--drain-timeout", "40", "--projections", ",".join(PROJECTIONS),
        "--reads", "prompt.context,learning.list_facets",
        "--url", stack, "--out", str(out),
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text + _locust_log(out)

    doc: dict[str, Any] = json.loads((out / "report.json").read_text())
    fig = doc["figures"]
    assert fig["accepted"] > 0 and fig["turns"] > 0, text
    assert fig["errors"] == 0 and fig["rejected"] == 0, doc["raw"]["locust"]["errors"]
    assert fig["all_caught_up"], doc["raw"]["samples"][-1]
    assert {p["projection"] for p in fig["projections"]} == set(PROJECTIONS)
    cost = fig["cost"]
    assert cost["messages"], "no messages counted for the run's tenants"
    assert any(r["kind"] == "turn" and r["per_turn"] == 1.0 for r in cost["messages"])
    assert cost["cpu_note"] and "no pids" in cost["cpu_note"]
    assert fig["raw_acked_publish_per_s"] and fig["ratio_turns_to_raw"]
    assert fig["latency"]["idle_prompt_context"]["n"] == 5
    md = (out / "report.md").read_text()
    assert "not measured: no pids" in md and "## Lag over time" in md


def _locust_log(out: Path) -> str:
    log = out / "locust.log"
    return "\n--- locust.log ---\n" + log.read_text()[-3000:] if log.exists() else ""
