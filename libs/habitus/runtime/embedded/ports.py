"""Loopback ports for the embedded servers: picking free ones, never the standard ports, and
waiting until one accepts TCP connections."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Collection
from typing import Final

from habitus.runtime.embedded.errors import EmbeddedServerError

LOCALHOST: Final = "127.0.0.1"
#: NATS client, Postgres, Redis and NATS monitoring: system services may own them.
STANDARD_PORTS: Final[frozenset[int]] = frozenset({4222, 5432, 6379, 8222})

# Ports handed out by free_port() in this process: the kernel may hand the same ephemeral port to
# two back-to-back binds once the first probe socket is closed, before any server has bound it.
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


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
