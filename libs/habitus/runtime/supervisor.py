"""Supervising service processes for `habitus up`: restart on crash with backoff, stop in order.

Each service runs as its own OS process (as it would in a container), so a crash, a leak or a
blocking bug in one cannot take the others down, and killing one is a realistic failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path


@dataclass
class Supervised:
    spec: ProcessSpec
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    task: asyncio.Task[None] | None = None
    history: list[int] = field(default_factory=list)  # exit codes


def backoff_delay(restarts: int, base: float = 0.5, cap: float = 30.0) -> float:
    """0.5, 1, 2, 4, ... capped: a crash loop must not spin, a one-off crash recovers fast."""
    exponent = min(max(restarts - 1, 0), 32)  # bounded: a long crash loop must not overflow
    return float(min(cap, base * (2**exponent)))


class Supervisor:
    def __init__(self, stable_after: float = 60.0, stop_timeout: float = 35.0):
        self._children: dict[str, Supervised] = {}
        self._stopping = False
        self._stable_after = stable_after
        self._stop_timeout = stop_timeout

    @property
    def children(self) -> dict[str, Supervised]:
        return self._children

    def add(self, spec: ProcessSpec) -> Supervised:
        child = Supervised(spec)
        self._children[spec.name] = child
        child.task = asyncio.create_task(self._keep_running(child), name=f"supervise:{spec.name}")
        return child

    async def _spawn(self, child: Supervised) -> asyncio.subprocess.Process:
        spec = child.spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        logfile = open(spec.log_path, "ab")  # noqa: ASYNC230 - local file handed to the child
        try:
            proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                env=spec.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=logfile,
                stderr=logfile,
                start_new_session=True,
            )
        finally:
            logfile.close()
        child.process = proc
        child.started_at = time.monotonic()
        log.info("process started", extra={"process": spec.name, "pid": proc.pid})
        return proc

    async def _keep_running(self, child: Supervised) -> None:
        while not self._stopping:
            proc = await self._spawn(child)
            code = await proc.wait()
            child.history.append(code)
            if self._stopping:
                return
            if time.monotonic() - child.started_at > self._stable_after:
                child.restarts = 0
            child.restarts += 1
            delay = backoff_delay(child.restarts)
            log.warning(
                "process exited; restarting",
                extra={"process": child.spec.name, "code": code, "in_seconds": delay},
            )
            print(f"  {child.spec.name} exited with {code}; restarting in {delay:.1f}s "
                  f"(log: {child.spec.log_path})", file=sys.stderr, flush=True)
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        """SIGTERM everyone, wait for graceful exits, SIGKILL what is left."""
        self._stopping = True
        procs = [c.process for c in self._children.values()
                 if c.process is not None and c.process.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)),
                                   self._stop_timeout)
        except TimeoutError:
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
        for child in self._children.values():
            if child.task is not None:
                child.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await child.task
