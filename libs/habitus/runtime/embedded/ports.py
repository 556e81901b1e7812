"""Loopback ports for the embedded servers: picking free ones, never the standard ports, and
waiting until one accepts TCP connections."""

from __future__ import annotations

import functools
import random
import socket
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Final

from habitus.runtime.embedded.errors import EmbeddedServerError

LOCALHOST: Final = "127.0.0.1"
#: NATS client, Postgres, Redis and NATS monitoring: system services may own them.
STANDARD_PORTS: Final[frozenset[int]] = frozenset({4222, 5432, 6379, 8222})

# Ports handed out by free_port() in this process: the kernel may hand the same ephemeral port to
# two back-to-back binds once the first probe socket is closed, before any server has bound it.
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


#: where free_port looks first: below the kernel's ephemeral range (Linux: 32768 - 60999), which
#: the source ports of outgoing connections come from. A port the kernel chose for a bind of port
#: 0 is in that range, and once the probe closed it, a connection to the database made right
#: then can take it as its source port and hold it as long as it stays open: a server pinned to
#: the port (a gateway given HABITUS_HTTP_PORT) then cannot bind it for minutes.
_LOW_PORTS: Final = range(20_000, 32_768)


@functools.cache
def _low_ports() -> range:
    """`_LOW_PORTS` below the start of the kernel's ephemeral range (32768 where it cannot be
    read)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        ephemeral = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32_768
    return range(_LOW_PORTS.start, min(_LOW_PORTS.stop, ephemeral))


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOCALHOST, *, avoid: Collection[int] = STANDARD_PORTS) -> int:
    """Return a TCP port that is free on `host` now, never one of `avoid` (the standard ports).

    Tries random ports below the kernel's ephemeral range first (no outgoing connection takes
    one of those as its source port), then lets the kernel choose (port 0), in both cases never
    a port this process already handed out. The port can still be taken before the server binds
    it; the servers retry with a new port when that happens and the caller did not pin one.
    """
    low = _low_ports()
    for port in _candidates(host, low):
        if port in avoid:
            continue
        with _handed_out_lock:
            if port in _handed_out:
                continue
            _handed_out.add(port)
        return port
    raise EmbeddedServerError(f"no free TCP port on {host} after 150 attempts")


def _candidates(host: str, low: range) -> Iterator[int]:
    """Free ports to offer: 50 random tries below the ephemeral range, then 100 of the
    kernel's choosing."""
    for _ in range(50 if len(low) else 0):
        port = random.choice(low)
        if _bindable(host, port):
            yield port
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            yield int(sock.getsockname()[1])


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
