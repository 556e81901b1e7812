"""Supervising service processes for `habitus up`: restart on crash with backoff, stop in order.

Each service runs as its own OS process (as it would in a container), so a crash, a leak or a
blocking bug in one cannot take the others down, and killing one is a realistic failure.

A watcher that dies takes its service's restarts with it, silently: so a failure inside the
watcher (a spawn that fails, a log call that raises) is logged, printed and retried with the same
backoff, and only cancellation ends it. Children get a parent-death signal (see
:mod:`habitus.runtime.lifetime`) and are spawned from the event loop's thread, which lives as
long as the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from habitus.runtime.lifetime import death_signal_preexec
from habitus.service.watchdog import SUPERVISOR_PID_ENV
from habitus.tasks import stop_task

log = logging.getLogger(__name__)


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path


class ChildProcess(Protocol):
    """What the supervisor needs of a started process (an :class:`asyncio.subprocess.Process`,
    or a service forked by :mod:`habitus.runtime.forkserver`)."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


#: How the supervisor starts a process: the spec, and the environment to start it with.
Launch = Callable[[ProcessSpec, dict[str, str]], Awaitable[ChildProcess]]


async def exec_process(spec: ProcessSpec, env: dict[str, str]) -> ChildProcess:
    """Start `spec` the ordinary way (fork and exec), in its own session, with its output in
    its log and a parent-death signal from the event loop's thread."""
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    logfile = open(spec.log_path, "ab")  # noqa: ASYNC230 - local file handed to the child
    try:
        return await asyncio.create_subprocess_exec(
            *spec.argv,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=logfile,
            stderr=logfile,
            start_new_session=True,
            preexec_fn=death_signal_preexec(signal.SIGTERM),
        )
    finally:
        logfile.close()


@dataclass
class Supervised:
    spec: ProcessSpec
    process: ChildProcess | None = None
    restarts: int = 0
    started_at: float = 0.0
    task: asyncio.Task[None] | None = None
    history: list[int] = field(default_factory=list)  # exit codes


def backoff_delay(restarts: int, base: float = 0.5, cap: float = 30.0) -> float:
    """0.5, 1, 2, 4, ... capped: a crash loop must not spin, a one-off crash recovers fast."""
    exponent = min(max(restarts - 1, 0), 32)  # bounded: a long crash loop must not overflow
    return float(min(cap, base * (2**exponent)))


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
        return f"signal {-code}"
    return f"code {code}"


def say(text: str) -> None:
    """One line in the terminal of `habitus up` (its stdout, where the ready line is)."""
    print(text, file=sys.stdout, flush=True)


class Supervisor:
    def __init__(
        self,
        stable_after: float = 60.0,
        stop_timeout: float = 35.0,
        on_spawn: Callable[[Supervised], None] | None = None,
        backoff: Callable[[int], float] = backoff_delay,
        launch: Launch = exec_process,
    ):
        self._children: dict[str, Supervised] = {}
        self._stopping = False
        self._stable_after = stable_after
        self._stop_timeout = stop_timeout
        self._on_spawn = on_spawn
        self._backoff = backoff
        self._launch = launch

    @property
    def children(self) -> dict[str, Supervised]:
        return self._children

    def add(self, spec: ProcessSpec) -> Supervised:
        child = Supervised(spec)
        self._children[spec.name] = child
        child.task = asyncio.create_task(self._keep_running(child), name=f"supervise:{spec.name}")
        child.task.add_done_callback(self._watcher_ended)
        return child

    def _watcher_ended(self, task: asyncio.Task[None]) -> None:
        # _keep_running catches everything; this is the last line should that ever change.
        if not task.cancelled() and task.exception() is not None and not self._stopping:
            log.error("supervisor watcher %s died", task.get_name(), exc_info=task.exception())
            say(f"  supervisor: {task.get_name()} stopped watching: {task.exception()!r}")

    async def _spawn(self, child: Supervised) -> ChildProcess:
        spec = child.spec
        proc = await self._launch(spec, {**spec.env, SUPERVISOR_PID_ENV: str(os.getpid())})
        child.process = proc
        child.started_at = time.monotonic()
        log.info("process started", extra={"child": spec.name, "pid": proc.pid})
        if self._on_spawn is not None:
            self._on_spawn(child)
        return proc

    async def _keep_running(self, child: Supervised) -> None:
        name = child.spec.name
        while not self._stopping:
            try:
                proc = await self._spawn(child)
                code = await proc.wait()
                child.history.append(code)
                reason = f"it exited with {describe_exit(code)}"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("supervising %s failed", name, extra={"child": name})
                reason = f"supervising it failed: {type(exc).__name__}: {exc}"
            if self._stopping:
                return
            if time.monotonic() - child.started_at > self._stable_after:
                child.restarts = 0
            child.restarts += 1
            delay = self._backoff(child.restarts)
            log.info("process exited; restarting",
                     extra={"child": name, "reason": reason, "in_seconds": delay})
            say(f"  restarting {name} in {delay:.1f}s: {reason} (log: {child.spec.log_path})")
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        """SIGTERM everyone, wait for graceful exits, SIGKILL what is left. Never raises for a
        child: whatever happens, the caller goes on to stop the servers."""
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
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
        for child in self._children.values():
            failed = await stop_task(child.task)
            if failed is not None:
                log.error("watcher of %s had failed", child.spec.name, exc_info=failed)
        # A watcher that was spawning while we collected the children may have started one more.
        late = [c.process for c in self._children.values()
                if c.process is not None and c.process.returncode is None
                and c.process not in procs]
        for proc in late:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in late:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5)
