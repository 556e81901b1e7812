"""What a `habitus up` leaves in its data directory for others to find: a lock and runtime.json.

* ``up.lock`` is flock'ed for the whole life of `habitus up`. The kernel drops the lock when the
  owner dies however it dies, so "the lock is held" is the one reliable answer to "is an owner
  alive?": a pid file can outlive its process and its pid can be reused. A second start on the
  same directory therefore refuses instead of stopping the live instance's servers, and the CLI
  can tell a stale runtime.json from a live one without waiting for a connect timeout.
* ``runtime.json`` has the server URLs, the gateway URL and every child with its start time, so a
  start after a crash can stop exactly what the crashed run left behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from habitus.runtime.lifetime import ProcessRef, kill_group

RUNTIME_FILE = "runtime.json"
LOCK_FILE = "up.lock"


def runtime_file(data_dir: Path) -> Path:
    return data_dir / RUNTIME_FILE


class AlreadyRunning(RuntimeError):
    """Another `habitus up` holds the data directory."""


class Unavailable(RuntimeError):
    """runtime.json names servers that no live `habitus up` serves, or that do not answer."""


def read_runtime(data_dir: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(runtime_file(data_dir).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_runtime(data_dir: Path, doc: dict[str, Any]) -> None:
    """Replace runtime.json atomically: a reader never sees half a file."""
    path = runtime_file(data_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tmp.replace(path)


class InstanceLock:
    """The exclusive flock of one data directory, held by `habitus up` until it exits."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise AlreadyRunning naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        # A CLI probing the lock holds it shared for an instant: try a few times before refusing.
        for attempt in range(5):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or attempt == 4:
                    os.close(fd)
                    if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise AlreadyRunning(describe_holder(self.path.parent)) from None
                    raise
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def lock_held(data_dir: Path) -> bool:
    """Whether a live `habitus up` holds `data_dir` (probed with a shared lock, let go at once)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # also releases the shared lock if we got it
    return False


def describe_holder(data_dir: Path) -> str:
    pid: str = "unknown"
    with contextlib.suppress(OSError, IndexError):
        pid = (data_dir / LOCK_FILE).read_text().split()[0]
    doc = read_runtime(data_dir) or {}
    where = doc.get("gateway") if str(doc.get("pid")) == pid else None
    return (f"Habitus is already running on {data_dir} "
            f"(pid {pid}, {where or 'gateway not ready yet'})")


@dataclass(frozen=True)
class Leftover:
    name: str
    ref: ProcessRef
    stop_signal: int = signal.SIGTERM


def leftovers(doc: dict[str, Any]) -> list[Leftover]:
    """Children recorded by a run that is no longer alive and that still run (or whose process
    group still has members), identified by pid *and* start time."""
    found: list[Leftover] = []
    for name, child in (doc.get("children") or {}).items():
        try:
            ref = ProcessRef(int(child["pid"]), float(child["create_time"]))
            stop_signal = signal.Signals(int(child.get("stop_signal", signal.SIGTERM)))
        except (KeyError, TypeError, ValueError):
            continue
        if ref.alive() or ref.group_members():
            found.append(Leftover(str(name), ref, stop_signal))
    return found


def clean_leftovers(data_dir: Path) -> list[str]:
    """Stop what a crashed `habitus up` on `data_dir` left running; call only with the lock
    held (so the recorded owner is dead). Returns "name (pid N)" for each thing stopped."""
    doc = read_runtime(data_dir)
    if doc is None:
        return []
    cleaned: list[str] = []
    # Services first, servers last: the services hold connections to the servers.
    kinds = {name: child.get("kind") for name, child in (doc.get("children") or {}).items()}
    found = sorted(leftovers(doc), key=lambda item: kinds.get(item.name) == "server")
    for item in found:
        if kill_group(item.ref, item.stop_signal, timeout=5.0):
            cleaned.append(f"{item.name} (pid {item.ref.pid})")
    return cleaned


def _tcp_targets(url: str) -> list[tuple[str, int]]:
    """Host and port of each server `url` names (a NATS cluster's nodes are comma-separated)."""
    targets = []
    for part in url.split(","):
        try:
            parts = urlsplit(part.strip())
            if parts.hostname is not None and parts.port is not None:
                targets.append((parts.hostname, parts.port))
        except ValueError:
            continue
    return targets


def _accepts(target: tuple[str, int], timeout: float) -> bool:
    try:
        socket.create_connection(target, timeout=timeout).close()
        return True
    except OSError:
        return False


def live_urls(data_dir: Path, needed: list[str], probe_timeout: float = 2.0) -> dict[str, str]:
    """The server URLs of the live `habitus up` on `data_dir` ({} when there is no runtime.json).

    Raises Unavailable at once, rather than letting a client wait out its connect timeout, when
    runtime.json is left over from an owner that is gone, or when one of the `needed` servers
    (``nats_url``, ``database_url``, ``redis_url``) does not accept connections.
    """
    doc = read_runtime(data_dir)
    if doc is None:
        return {}
    if not lock_held(data_dir):
        raise Unavailable(
            f"habitus up is not running on {data_dir} (its runtime.json is left from pid "
            f"{doc.get('pid')}, which is gone): start it, or set the HABITUS_*_URL variables")
    urls = {k: str(v) for k, v in doc.items() if k.endswith("_url") and v}
    for key in needed:
        targets = _tcp_targets(urls.get(key, ""))
        if not targets:
            raise Unavailable(
                f"habitus up (pid {doc.get('pid')}) on {data_dir} has not started its "
                f"{key.removesuffix('_url')} server yet: try again in a moment")
        if not any(_accepts(target, probe_timeout) for target in targets):  # one node will do
            where = ", ".join(f"{host}:{port}" for host, port in targets)
            raise Unavailable(
                f"habitus up (pid {doc.get('pid')}) is running on {data_dir}, but its "
                f"{key.removesuffix('_url')} server at {where} does not answer "
                "(restarting?): try again in a moment")
    return urls


def port_in_use(host: str, port: int) -> bool:
    """Whether binding `host:port` fails now (bound as uvicorn binds it, with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            # Anything but "in use" (an IPv6 host, say) is for the gateway itself to report.
            return err.errno == errno.EADDRINUSE
    return False
