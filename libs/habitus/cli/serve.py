"""`habitus serve <service>`: one service in the foreground, what containers and `habitus up`
run. Its help lists the installed services from their entry points alone."""

from __future__ import annotations

import asyncio
import logging
from enum import StrEnum
from typing import Annotated, Any

import typer

from habitus.cli.connect import live_settings
from habitus.cli.gateway import fail

#: `habitus.service.registry.GROUP`, spelt out: importing the registry imports the service
#: host (NATS, the database driver), most of a second that every `habitus` run would pay
#: for its help text (a unit test holds the two equal)
SERVICES_GROUP = "habitus.services"


def service_names() -> list[str]:
    """The installed services' names, from their entry points' metadata alone (a few
    milliseconds): naming them imports no service, and the registry checks that each entry
    point's name is its descriptor's."""
    from importlib.metadata import entry_points

    return sorted(ep.name for ep in entry_points(group=SERVICES_GROUP))


class Role(StrEnum):
    """HABITUS_ROLE's values (habitus.config.Settings.role)."""

    all = "all"
    rpc = "rpc"
    projections = "projections"


ROLES = tuple(r.value for r in Role)


def serve(service: Annotated[str, typer.Argument(
        help="the service to run, one of those listed above", show_default=False)],
          role: Annotated[Role | None, typer.Option(
              show_default=False,
              help="what this process does (instead of HABITUS_ROLE): all; rpc, its RPC "
                   "methods only; projections, all but its RPC methods")] = None) -> None:
    """Run one service in the foreground (what containers and `habitus up` run)."""
    from habitus.service import registry
    from habitus.service.host import ServiceHost
    from habitus.telemetry.logging import configure_logging

    try:
        descriptor = registry.service(service)
    except LookupError as exc:
        raise fail(str(exc)) from None
    settings = live_settings()
    if role is not None:
        settings = settings.model_copy(update={"role": role.value})
    configure_logging(service, settings.log_level, settings.log_json)
    if settings.cpu_nice:
        from habitus.runtime.priority import lower_priority

        logging.getLogger(__name__).info(
            "cpu priority lowered", extra={"changed": lower_priority(settings.cpu_nice)})
    run_event_loop(ServiceHost(descriptor, settings).serve_forever())


def run_event_loop(main: Any) -> Any:
    """Services run on uvloop where it is installed (it is a dependency on Linux): the bus
    client, the HTTP server and the database driver all spend their time in the event loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
