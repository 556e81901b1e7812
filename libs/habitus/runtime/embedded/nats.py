"""Embedded NATS: nats-server with JetStream, ready when its monitoring port says healthy."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from habitus.runtime.embedded.binaries import _nats_server_binary
from habitus.runtime.embedded.ports import LOCALHOST, STANDARD_PORTS, _tcp_accepts, free_port
from habitus.runtime.embedded.server import EmbeddedServer

# Readiness probes talk to 127.0.0.1 only; an http_proxy in the environment must not intercept them.
_DIRECT_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_status(url: str, timeout: float = 1.0) -> int | None:
    try:
        with _DIRECT_HTTP.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class ClusterRole:
    """One node's place in a NATS cluster: its server name (JetStream's peers are told apart by
    it), the cluster's name, the port it takes routes on and every node's route URL."""

    server_name: str
    cluster_name: str
    cluster_port: int
    routes: tuple[str, ...]

    def arguments(self) -> list[str]:
        return ["--name", self.server_name,
                "--cluster_name", self.cluster_name,
                "--cluster", f"nats://{LOCALHOST}:{self.cluster_port}",
                "--routes", ",".join(self.routes)]


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
        cluster: ClusterRole | None = None,
    ) -> None:
        super().__init__(data_dir, port, die_with_owner=die_with_owner)
        self.cluster = cluster
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
            *(self.cluster.arguments() if self.cluster else []),
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
