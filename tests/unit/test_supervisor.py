"""The service supervisor of `habitus up`: a child that exits comes back, with backoff, and says so.

Real child processes (a Python one-liner), so spawning, waiting and the restart loop are the code
`habitus up` runs. Logging is enabled at INFO, as with HABITUS_LOG_LEVEL=INFO: a log call with an
`extra` key that LogRecord reserves raises there, which once killed the watcher silently.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from habitus.runtime.supervisor import ProcessSpec, Supervised, Supervisor, backoff_delay
from habitus.service.watchdog import SUPERVISOR_PID_ENV, orphan_watchdog


async def _until(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def _spec(tmp_path: Path, name: str, argv: list[str]) -> ProcessSpec:
    return ProcessSpec(name, argv, dict(os.environ), tmp_path / f"{name}.log")


def test_backoff_doubles_from_half_a_second_and_is_capped() -> None:
    assert [backoff_delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(10_000) == 30.0


async def test_a_child_that_exits_is_restarted_and_each_restart_prints_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    supervisor = Supervisor()
    child: Supervised = supervisor.add(
        _spec(tmp_path, "flaky", [sys.executable, "-c", "raise SystemExit(3)"]))
    try:
        await _until(lambda: len(child.history) >= 3)
    finally:
        await supervisor.stop()
    assert child.history[:3] == [3, 3, 3]
    assert child.restarts >= 2  # counted, so the delay grows: 0.5 s, then 1 s, ...
    lines = [line for line in capsys.readouterr().out.splitlines() if "restarting flaky" in line]
    assert lines[:2] == [
        f"  restarting flaky in 0.5s: it exited with code 3 (log: {tmp_path / 'flaky.log'})",
        f"  restarting flaky in 1.0s: it exited with code 3 (log: {tmp_path / 'flaky.log'})",
    ]
    records = [r for r in caplog.records if r.name == "habitus.runtime.supervisor"]
    assert any(getattr(r, "child", None) == "flaky" for r in records)


async def test_a_failure_inside_the_watcher_is_reported_and_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    supervisor = Supervisor()
    missing = str(tmp_path / "no-such-program")
    supervisor.add(_spec(tmp_path, "broken", [missing]))
    printed: list[str] = []

    def restarts_printed() -> int:
        printed.extend(capsys.readouterr().out.splitlines())
        return sum("restarting broken" in line for line in printed)

    try:
        await _until(lambda: restarts_printed() >= 2)
    finally:
        await supervisor.stop()
    assert any("supervising it failed" in line and "no-such-program" in line
               for line in printed)


async def test_stop_terminates_running_children(tmp_path: Path) -> None:
    supervisor = Supervisor()
    child = supervisor.add(
        _spec(tmp_path, "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"]))
    await _until(lambda: child.process is not None)
    await supervisor.stop()
    assert child.process is not None and child.process.returncode is not None
    assert child.history == [child.process.returncode]


async def test_a_service_whose_supervisor_is_gone_is_told_to_stop(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SUPERVISOR_PID_ENV, raising=False)
    assert orphan_watchdog(lambda: None) is None  # not run by habitus up: nothing to watch

    not_our_parent = os.getppid() + 1
    monkeypatch.setenv(SUPERVISOR_PID_ENV, str(not_our_parent))
    stop = asyncio.Event()
    watchdog = orphan_watchdog(stop.set, interval=0.05, grace=60)
    assert watchdog is not None
    try:
        await asyncio.wait_for(stop.wait(), 10)
    finally:
        watchdog.cancel()
