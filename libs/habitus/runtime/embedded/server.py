"""The base of every embedded server: one child process with its data under a directory, and
its life cycle (prepare, spawn, wait until it really answers, stop, restart after a crash)."""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from habitus.runtime.embedded.errors import EmbeddedServerError, _log_tail
from habitus.runtime.embedded.permissions import _RunAs
from habitus.runtime.embedded.ports import free_port
from habitus.runtime.embedded.processes import (
    _inspect_process,
    _read_pid,
    _terminate_pid,
    _wait_gone,
)
from habitus.runtime.lifetime import ProcessRef, death_signal_preexec

# One logger for the whole package, named as before the split into modules.
_log = logging.getLogger("habitus.runtime.embedded")


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

    def kill(self) -> None:
        """SIGKILL the server's process group now: a crash, for the chaos tests (`start` again
        brings it back on the same ports and data)."""
        self._kill_now()

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
