"""A local NATS cluster: three (or more) embedded nats-servers with routes between them.

What a production deployment runs (three nodes, JetStream streams replicated R3), on one machine
from the same wheel, so the suite and `habitus up --nats-cluster` can show that losing a node
loses nothing. Each node is an `EmbeddedNats` named ``nats-<i>`` with its own ports and store
(``<data_dir>/nats-<i>``); the cluster's `url` names every node, comma-separated, which
`habitus.bus.connect` (and so `HABITUS_NATS_URL`) accepts: a client then fails over between
them, and learns the other nodes from the cluster in any case.

A node answers its own health check before the cluster has elected a JetStream meta leader, so
`start` waits, after every node is up, until each reports JetStream healthy in the full check.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import Self

from habitus.runtime.embedded.errors import EmbeddedServerError
from habitus.runtime.embedded.nats import ClusterRole, EmbeddedNats, _http_status
from habitus.runtime.embedded.ports import LOCALHOST, STANDARD_PORTS, free_port

CLUSTER_NAME = "habitus"


class EmbeddedNatsCluster:
    """`size` routed nats-server nodes with JetStream; start, stop, and kill or restart one."""

    def __init__(self, data_dir: Path, size: int = 3, *, die_with_owner: bool = False):
        if size < 3:
            raise ValueError("size: a JetStream cluster needs at least 3 nodes for a quorum")
        taken: set[int] = set(STANDARD_PORTS)
        ports: list[tuple[int, int, int]] = []
        for _ in range(size):
            picked = []
            for _ in range(3):  # client, monitoring, cluster
                port = free_port(avoid=taken)
                taken.add(port)
                picked.append(port)
            ports.append((picked[0], picked[1], picked[2]))
        routes = tuple(f"nats://{LOCALHOST}:{cluster}" for _, _, cluster in ports)
        self.data_dir = Path(data_dir)
        self.nodes: list[EmbeddedNats] = []
        for i, (client, monitor, cluster) in enumerate(ports):
            node = EmbeddedNats(self.data_dir, client, monitor, die_with_owner=die_with_owner,
                                cluster=ClusterRole(f"nats-{i + 1}", CLUSTER_NAME, cluster,
                                                    routes))
            node.name = f"nats-{i + 1}"  # its directory, log and name among a supervisor's
            self.nodes.append(node)

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what `HABITUS_NATS_URL` may hold)."""
        return ",".join(node.url for node in self.nodes)

    def start(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.start(timeout=max(1.0, deadline - time.monotonic()))
        self.wait_healthy(max(1.0, deadline - time.monotonic()))
        return self.url

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every running node says JetStream is current (a meta leader is known)."""
        deadline = time.monotonic() + timeout
        while True:
            waiting = [node for node in self.nodes if node.is_running()
                       and _http_status(f"{node.monitor_url}/healthz") != 200]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    "NATS cluster not healthy in time: "
                    + ", ".join(f"{n.cluster.server_name if n.cluster else n.url} "
                                f"(log {n.log_path})" for n in waiting))
            time.sleep(0.1)

    def kill(self, index: int) -> None:
        """SIGKILL node `index` (no chance to flush or leave the cluster)."""
        self.nodes[index].kill()

    def restart(self, index: int, timeout: float = 30.0) -> None:
        """Start node `index` again on its ports and store, and wait for it to rejoin."""
        self.nodes[index].start(timeout=timeout)
        self.wait_healthy(timeout)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
