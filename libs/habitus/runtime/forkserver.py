"""Service processes for `habitus up`, forked from a process that has already imported them.

Starting a service is mostly importing: about a CPU second each, for eight services per start
and for every restart, all at once on a machine that may have two cores. The fork server imports
it once, in :mod:`habitus.runtime.zygote`, while the embedded servers start; each service is then
forked from it in a few milliseconds and shares its memory until it writes to it.

Nothing else changes for the supervisor: each service is still its own OS process and session,
a child of `habitus up` (forked twice and re-parented, `up` being a subreaper), so `up` waits for
it, reads its exit status, signals it and restarts it as before, and a service SIGKILLed is a
real process dying. What the fork server cannot start (a command that is not ``python -m``, a
platform without subreapers or pidfds, a zygote that will not start) is started the ordinary
way, with one line saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from habitus.runtime.lifetime import (
    ProcessRef,
    arm_death_signal,
    become_subreaper,
    death_signal_preexec,
    reap_adopted_orphans,
)
from habitus.runtime.supervisor import ChildProcess, ProcessSpec, exec_process, say

log = logging.getLogger(__name__)

#: How long the zygote may take to import what it preloads (a cold disk, a loaded machine).
READY_TIMEOUT = 120.0
#: How long one fork may take before the zygote counts as stuck.
SPAWN_TIMEOUT = 30.0
#: How often the orphans adopted as a subreaper are reaped.
REAP_INTERVAL = 5.0
#: Of what a zygote preloads, what `habitus up` itself needs (every service's descriptor):
#: loaded before a prefork, so that only one of the two processes pays for it.
OWNER_PRELOAD = frozenset({"habitus.service.registry:services"})


class ForkServerUnavailable(RuntimeError):
    """The zygote could not be started or stopped answering; services start the ordinary way."""


class ForkedProcess:
    """A service forked by the zygote and re-parented to us: the part of
    :class:`asyncio.subprocess.Process` the supervisor uses, over a pidfd."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = self._loop.create_future()
        # Our child (a zombie at worst) until we reap it, so the pid cannot name another process.
        self._pidfd = os.pidfd_open(pid)
        self._loop.add_reader(self._pidfd, self._reap)

    def _reap(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: the status is lost
            pid, status = self.pid, 255 << 8
        if pid == 0:
            return
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self.returncode = os.waitstatus_to_exitcode(status)
        if not self._exited.done():
            self._exited.set_result(self.returncode)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)


def forkable(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` when `argv` is this interpreter running ``-m module args``."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return argv[2], list(argv[3:])
    return None


def supported() -> str | None:
    """Why the fork server cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "it needs Linux (subreapers and pidfds)"
    if not hasattr(os, "pidfd_open"):
        return "this Python has no os.pidfd_open"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as exc:
        return f"the kernel refuses pidfds ({exc})"
    return None


@dataclass(frozen=True)
class Preforked:
    """A zygote forked from the `habitus up` process itself, before its event loop and threads
    started: it inherits what `up` already imported (most of the library) instead of importing
    it again in a fresh interpreter, about 1.5 CPU s of each start."""

    pid: int
    #: the pipe this process writes requests to
    requests: int
    #: the pipe this process reads answers from
    answers: int


def prefork(preload: Sequence[str]) -> Preforked | None:
    """Fork the zygote from this process now; None where that cannot be done safely (another
    thread runs, or the platform lacks what the fork server needs), and the zygote is then
    started as a fresh process when the fork server starts. Call before any event loop or
    thread starts: the fork copies every thread's locks as they are."""
    if supported() is not None or threading.active_count() > 1 or not become_subreaper():
        return None
    from habitus.runtime import zygote

    # What the owner needs anyway (the services' descriptors, for their names and migrations)
    # is loaded before the fork, so that the two processes do not each load it.
    zygote.preload(name for name in preload if name in OWNER_PRELOAD)

    request_read, request_write = os.pipe()
    answer_read, answer_write = os.pipe()
    owner = os.getpid()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # what is buffered would be written twice, once by each process
    pid = os.fork()
    if pid == 0:  # the zygote: never returns
        code = 1
        try:
            os.setsid()  # no Ctrl-C from the terminal: it stops with its owner
            if not arm_death_signal(signal.SIGTERM, owner):
                os._exit(1)
            os.dup2(request_read, 0)
            os.dup2(answer_write, 1)
            zygote.keep_only_stdio()
            zygote.set_title(
                f"{sys.executable} -m habitus.runtime.zygote (fork server of pid {owner})")
            code = zygote.main(list(preload))
        except BaseException:
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            os._exit(code)
    os.close(request_read)
    os.close(answer_write)
    return Preforked(pid, request_write, answer_read)


class _PreforkedZygote:
    """A preforked zygote behind the part of :class:`asyncio.subprocess.Process` the fork
    server uses (its pipes as streams, its exit status through a pidfd)."""

    def __init__(self, preforked: Preforked, stdin: asyncio.StreamWriter,
                 stdout: asyncio.StreamReader) -> None:
        self.pid = preforked.pid
        self.stdin = stdin
        self.stdout = stdout
        self._exit = ForkedProcess(preforked.pid)

    @property
    def returncode(self) -> int | None:
        return self._exit.returncode

    async def wait(self) -> int:
        return await self._exit.wait()

    def kill(self) -> None:
        self._exit.send_signal(signal.SIGKILL)

    @classmethod
    async def adopt(cls, preforked: Preforked) -> _PreforkedZygote:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                     os.fdopen(preforked.answers, "rb", buffering=0))
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(preforked.requests, "wb", buffering=0))
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(preforked, writer, reader)


def discard(preforked: Preforked) -> None:
    """Stop a preforked zygote that will not be used (a start that was refused)."""
    for fd in (preforked.requests, preforked.answers):
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(OSError):
        os.kill(preforked.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(preforked.pid, 0)


class ForkServer:
    """Starts the zygote and asks it for services; a `launch` for the supervisor.

    Start it early (:meth:`start`): its import then overlaps whatever else is starting, and the
    first service waits only for what is left of it. Used from one event loop."""

    def __init__(self, preload: Sequence[str], log_path: Path,
                 on_start: Callable[[ProcessRef | None], None] | None = None,
                 preforked: Preforked | None = None) -> None:
        """`preforked`: a zygote already forked from this process (`prefork`), used for the
        first start; a zygote started again after it died is a fresh process."""
        self._preload = list(preload)
        self._log_path = log_path
        self._on_start = on_start
        self._preforked = preforked
        self._process: asyncio.subprocess.Process | _PreforkedZygote | None = None
        self._ready: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._unavailable: str | None = None
        self._stopped = False
        self._reaper: asyncio.Task[None] | None = None

    @property
    def process_ref(self) -> ProcessRef | None:
        """The zygote, while it runs (for runtime.json: a later start after a crash stops it)."""
        if self._process is None or self._process.returncode is not None:
            return None
        return ProcessRef.of(self._process.pid)

    def start(self) -> None:
        """Begin starting the zygote, without waiting for it."""
        if self._ready is None and not self._stopped:
            self._ready = asyncio.create_task(self._start(), name="forkserver-start")

    async def _start(self) -> None:
        reason = supported()
        if reason is not None:
            raise ForkServerUnavailable(reason)
        if self._reaper is None:
            if not become_subreaper():
                raise ForkServerUnavailable("the kernel refused to make habitus up a subreaper")
            self._reaper = asyncio.create_task(self._reap(), name="forkserver-reaper")
        if self._preforked is not None:
            preforked, self._preforked = self._preforked, None
            self._process = await _PreforkedZygote.adopt(preforked)
        else:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            logfile = open(self._log_path, "ab")  # noqa: ASYNC230 - a file handed to the child
            try:
                self._process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "habitus.runtime.zygote", *self._preload,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=logfile, start_new_session=True,
                    preexec_fn=death_signal_preexec(signal.SIGTERM),
                )
            finally:
                logfile.close()
        if self._on_start is not None:
            self._on_start(ProcessRef.of(self._process.pid))
        try:
            first = await asyncio.wait_for(self._read(), READY_TIMEOUT)
        except (TimeoutError, ForkServerUnavailable) as exc:
            await self._kill()
            raise ForkServerUnavailable(f"the zygote did not get ready: {exc}") from None
        if not first.get("ready"):
            await self._kill()
            raise ForkServerUnavailable(str(first.get("error") or "the zygote refused"))
        for failure in first.get("failed") or []:
            log.warning("the fork server could not preload %s", failure)

    async def _reap(self) -> None:
        """Reap, now and then, the orphans adopted as a subreaper (not only services are)."""
        while True:
            await asyncio.sleep(REAP_INTERVAL)
            try:
                reaped = reap_adopted_orphans()
            except Exception:  # the reaper must outlive any surprise
                log.exception("reaping adopted orphans failed")
                continue
            if reaped:
                log.info("reaped adopted orphans", extra={"pids": reaped})

    async def _read(self) -> dict[str, Any]:
        assert self._process is not None and self._process.stdout is not None
        line = await self._process.stdout.readline()
        if not line:
            code = await self._process.wait()
            raise ForkServerUnavailable(f"the zygote exited with {code} (log: {self._log_path})")
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise ForkServerUnavailable(f"the zygote answered {line!r}")
        return doc

    async def _kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            await self._process.wait()

    async def _ensure(self) -> None:
        """The zygote, started (again, once, if it had died); ForkServerUnavailable if not."""
        if self._unavailable is not None:
            raise ForkServerUnavailable(self._unavailable)
        if self._process is not None and self._process.returncode is not None:
            say(f"  fork server exited with {self._process.returncode}; starting it again "
                f"(log: {self._log_path})")
            self._ready = None
        self.start()
        assert self._ready is not None
        try:
            await asyncio.shield(self._ready)
        except ForkServerUnavailable as exc:
            self._give_up(exc)
            raise

    def _give_up(self, exc: ForkServerUnavailable) -> None:
        """From now on services start the ordinary way; said once."""
        self._unavailable = str(exc)
        say(f"  fork server unavailable, services start without it: {exc}")

    async def fork(self, spec: ProcessSpec, env: dict[str, str]) -> ForkedProcess:
        """Fork `spec` (a ``python -m`` command) from the zygote with `env`."""
        target = forkable(spec.argv)
        if target is None:
            raise ValueError(f"{spec.name}: not a `{sys.executable} -m` command")
        module, args = target
        async with self._lock:
            await self._ensure()
            assert self._process is not None and self._process.stdin is not None
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            spec.log_path.touch()  # there as soon as the service is, as with an exec'd one
            request = {"argv": spec.argv, "module": module, "args": args, "env": env,
                       "log": str(spec.log_path), "parent": os.getpid()}
            try:
                self._process.stdin.write(json.dumps(request).encode() + b"\n")
                await self._process.stdin.drain()
                answer = await asyncio.wait_for(self._read(), SPAWN_TIMEOUT)
            except (OSError, TimeoutError, ForkServerUnavailable) as exc:
                await self._kill()  # the next fork starts it again
                raise ForkServerUnavailable(f"the zygote stopped answering: {exc!r}") from None
            if "pid" not in answer:
                raise OSError(f"the zygote could not fork {spec.name}: {answer.get('error')}")
            return ForkedProcess(int(answer["pid"]))

    async def launch(self, spec: ProcessSpec, env: dict[str, str]) -> ChildProcess:
        """The supervisor's launch: forked when it can be, exec'd otherwise."""
        if forkable(spec.argv) is None or self._stopped or self._unavailable is not None:
            return await exec_process(spec, env)
        try:
            return await self.fork(spec, env)
        except ForkServerUnavailable:
            if self._unavailable is None and not self._stopped:
                try:  # a zygote that died is started again once before giving it up
                    return await self.fork(spec, env)
                except ForkServerUnavailable as exc:
                    self._give_up(exc)
            return await exec_process(spec, env)

    async def stop(self) -> None:
        """Stop the zygote (the services it forked are not its children: they stay)."""
        self._stopped = True
        if self._preforked is not None:  # never started: nothing asked it for anything
            discard(self._preforked)
            self._preforked = None
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._ready
        if self._process is None or self._process.returncode is not None:
            return
        if self._process.stdin is not None:
            with contextlib.suppress(Exception):
                self._process.stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), 5.0)
        except TimeoutError:
            await self._kill()
