"""`habitus up` and `habitus demo`: start the whole system here (embedded servers for whatever
is not configured); the demo starts one of its own in a sandbox and replays a scripted scenario
through it.

`up` is `habitus.runtime.up`; the demo is `habitus.demo.system`, which runs that same `up` in
its sandbox with the demo as its guest (the runtime knows nothing of the demo)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from habitus.config import Settings, get_settings


def up(observe: Annotated[bool, typer.Option(
        help="also run a local Prometheus scraping every process (data in var/prometheus)")
       ] = False,
       nats_cluster: Annotated[bool, typer.Option(
           help="run the embedded NATS as a three-node cluster with R3 streams (data in "
                "var/nats-1..3); a killed node is restarted and loses nothing")] = False,
       replicas: Annotated[int, typer.Option(
           min=1, max=8, help="processes of each service that applies projections: they "
                              "share its projections' partitions, and a killed one's are "
                              "taken over by the others")] = 1,
       partitions: Annotated[int | None, typer.Option(
           help="partitions of every projection laid out for the first time (1, 2, 4, 8 or "
                "16; default HABITUS_PARTITIONS); `habitus partitions set` changes an "
                "existing one")] = None,
       ) -> None:
    """Start everything not configured (embedded NATS, Postgres, Redis), migrate, run all
    services and the gateway; Ctrl-C stops it all."""
    from habitus.runtime.forkserver import prefork
    from habitus.runtime.up import SERVICE_PRELOAD
    from habitus.runtime.up import up as run_up

    # Forked before the event loop starts and before the settings are read: the fork server
    # begins with what this process has imported (see habitus.runtime.forkserver.prefork).
    preforked = prefork(SERVICE_PRELOAD)
    settings = _settings()
    if partitions is not None:
        try:
            settings = Settings.model_validate({**settings.model_dump(),
                                                "partitions": partitions})
        except ValueError as exc:
            raise typer.BadParameter(str(exc).splitlines()[-1], param_hint="--partitions"
                                     ) from None
    raise typer.Exit(asyncio.run(run_up(settings, observe=observe, preforked=preforked,
                                        nats_cluster=nats_cluster, replicas=replicas)))


def demo(keep: Annotated[bool, typer.Option(
        help="leave the demo's system running afterwards (Ctrl-C stops it) and keep its data")
           ] = False) -> None:
    """Start a system of its own (a fresh temporary data directory, embedded servers and a
    gateway on free ports: never the data, servers or ports of `habitus up`), replay three weeks
    of two tenants' agents (examples/scenarios) through the gateway, and show per user what was
    learned (facets, PROFILE.md, tool rules, habits, prompt.context, routing), checked against
    the scenario; then stop and remove it all (unless --keep)."""
    from habitus.demo.system import demo as run_demo
    from habitus.runtime.forkserver import prefork
    from habitus.runtime.up import SERVICE_PRELOAD

    preforked = prefork(SERVICE_PRELOAD)  # before the event loop and the settings, as for `up`
    settings = _settings()
    raise typer.Exit(asyncio.run(run_demo(settings, keep=keep, preforked=preforked)))


def _settings() -> Settings:
    """The environment's settings, with the terminal showing warnings only (up's own lines are
    its output)."""
    from habitus.telemetry.logging import configure_logging

    settings = get_settings()
    configure_logging("up", "WARNING", settings.log_json)
    return settings
