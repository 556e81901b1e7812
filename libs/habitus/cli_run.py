"""`habitus up` and `habitus demo`: start the whole system here (embedded servers for whatever
is not configured), and for the demo replay a scripted scenario through it."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from habitus.config import get_settings


def up(observe: Annotated[bool, typer.Option(
        help="also run a local Prometheus scraping every process (data in var/prometheus)")
       ] = False) -> None:
    """Start everything not configured (embedded NATS, Postgres, Redis), migrate, run all
    services and the gateway; Ctrl-C stops it all."""
    _run_up(demo=False, keep=True, observe=observe)


def demo(keep: Annotated[bool, typer.Option(help="leave the system running afterwards")
                         ] = False) -> None:
    """Start the system, replay three weeks of two tenants' agents (examples/scenarios) through
    the gateway, and show per user what was learned (facets, PROFILE.md, tool rules, habits,
    prompt.context, routing), checked against the scenario; then stop (unless --keep)."""
    _run_up(demo=True, keep=keep)


def _run_up(*, demo: bool, keep: bool, observe: bool = False) -> None:
    from habitus.runtime.up import up as run_up
    from habitus.telemetry.logging import configure_logging

    settings = get_settings()
    configure_logging("up", "WARNING", settings.log_json)
    raise typer.Exit(asyncio.run(run_up(settings, demo=demo, keep=keep, observe=observe)))
