"""Children that cannot outlive `habitus up`, and recognising a process again later.

`kill -9` of the owner runs none of its shutdown code, so the children must learn of it from the
kernel: on Linux each child asks for a signal when its parent dies (``PR_SET_PDEATHSIG``). The
kernel sends it when the *thread* that forked the child exits, so children are spawned from
threads that live as long as the owner (the event loop thread, or one dedicated thread for the
servers). The request is made in ``preexec_fn``, which CPython runs after the switch to another
user (Postgres runs as ``embedded_postgres`` when we are root), so the credential change cannot
clear it. A parent that died before the request was made is caught by comparing ``getppid()``.

A pid alone does not identify a process after its owner crashed: the number may have been reused.
A pid recorded together with its start time does, which is what a later start relies on to stop
what a crashed run left behind without ever touching an unrelated process.

The other half, a service noticing that its supervisor is gone, runs in the service itself:
`habitus.service.watchdog`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: Start times are read from /proc with clock-tick resolution; more than this apart is another
#: process that got the same pid.
_START_TIME_TOLERANCE = 0.5


def death_signal_preexec(sig: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive `sig` when the forking thread dies.

    None where the kernel offers no such request (not Linux): the owner's watchdogs and the next
    start's cleanup still apply there.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork, not in the child
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request: nobody would stop us
            os._exit(1)

    return arm


def arm_death_signal(sig: int, parent: int) -> bool:
    """In a process whose parent is `parent` now: receive `sig` when that parent's thread dies.

    For a process that became `parent`'s child by being re-parented (see
    :func:`become_subreaper`) rather than by a fork in `parent`. False when `parent` is no
    longer the parent once the request is made (it died in between) or the platform has no such
    request; the caller then exits, as nobody would stop it."""
    if not sys.platform.startswith("linux"):
        return os.getppid() == parent
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return os.getppid() == parent


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux's ``PR_SET_CHILD_SUBREAPER``).

    A process whose parent exits is handed to the nearest ancestor that asked for this, not to
    init: the fork server (:mod:`habitus.runtime.forkserver`) forks each service twice so that
    the service becomes a child of `habitus up` itself, which can then wait for it and read its
    exit status like any child's. False where the kernel offers no such request."""
    if not sys.platform.startswith("linux"):
        return False
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return bool(prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def reap_adopted_orphans() -> list[int]:
    """Reap the exited orphans a subreaper adopted; their pids.

    A subreaper is handed every orphan below it, not only the services it means to adopt: a
    Postgres backend whose postmaster was killed, for one. Those exit on their own but stay as
    zombies until reaped. They are told apart from the processes this one started by their
    session: everything `habitus up` starts leads a session of its own, an adopted orphan is a
    member of another's."""
    import psutil

    reaped: list[int] = []
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return reaped
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE or os.getsid(child.pid) == child.pid:
                continue
            if os.waitpid(child.pid, os.WNOHANG)[0] == child.pid:
                reaped.append(child.pid)
        except (psutil.Error, OSError):
            continue
    return reaped


@dataclass(frozen=True)
class ProcessRef:
    """A process as recorded while it ran: enough to recognise it (and only it) later."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcessRef | None:
        """The live process `pid` now, or None when it is gone."""
        import psutil

        try:
            return cls(pid, float(psutil.Process(pid).create_time()))
        except psutil.Error:
            return None

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a reuse of its pid)."""
        import psutil

        try:
            proc = psutil.Process(self.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            return abs(float(proc.create_time()) - self.create_time) < _START_TIME_TOLERANCE
        except psutil.Error:
            return False

    def _zombie(self) -> bool:
        import psutil

        try:
            return bool(psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def group_members(self) -> list[int]:
        """Live processes still in the process group this process led (it led one: every child
        starts a new session), started no earlier than it: e.g. Postgres backends that outlived
        a killed postmaster and still hold its shared memory."""
        import psutil

        if psutil.pid_exists(self.pid) and not self.alive() and not self._zombie():
            # The pid now names another process, so the kernel had released the group id:
            # the group is gone and whatever uses that id now is not ours.
            return []
        members: list[int] = []
        for proc in psutil.process_iter(["pid", "create_time", "status"]):
            info = proc.info
            if info["status"] == psutil.STATUS_ZOMBIE:
                continue
            try:
                if os.getpgid(info["pid"]) != self.pid:
                    continue
            except OSError:
                continue
            if float(info["create_time"] or 0) + _START_TIME_TOLERANCE >= self.create_time:
                members.append(int(info["pid"]))
        return members


def kill_group(ref: ProcessRef, sig: int = signal.SIGTERM, timeout: float = 5.0) -> bool:
    """Stop `ref` and what is left of its process group: `sig` to the leader, SIGKILL to all
    after `timeout` s. True if anything was running. Touches only processes that are `ref` or
    members of its group (which cannot be unrelated: a pid used as a group id is not reused)."""
    leader_alive = ref.alive()
    members = [pid for pid in ref.group_members() if pid != ref.pid]
    if not leader_alive and not members:
        return False
    if leader_alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(ref.pid, sig)
        deadline = time.monotonic() + timeout
        while ref.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    for pid in [ref.pid] if ref.alive() else []:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in ref.group_members():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    _wait_all_gone([ref.pid, *members], 5.0)
    return True


def _wait_all_gone(pids: Iterable[int], timeout: float) -> None:
    import psutil

    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.05)
