"""`make load`'s latency probe runs in a process of its own: its failures reach the runner,
and a probe process that dies leaves the runner an answer instead of a wait for ever."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from habitus.runtime.embedded import free_port
from tests.load.latency import Probe


async def test_a_probe_that_fails_says_why() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the first call fails
    with pytest.raises(RuntimeError, match="the latency probe failed: ConnectError"):
        await Probe("idle", url, ["ana"], "key", 3).start().result()


async def test_a_probe_process_killed_midway_is_reported_not_waited_for() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # failed calls are left out, the probe goes on
    probe = Probe("while_running", url, ["ana"], "key").start()
    await asyncio.sleep(1.0)  # running its loop
    assert probe._process.pid is not None
    os.kill(probe._process.pid, signal.SIGKILL)
    # the stop it is sent reaches nobody: without the check of the process, this waited
    with pytest.raises(RuntimeError, match=r"ended without a result \(exit code -9\)"):
        await asyncio.wait_for(probe.result(), 60)
