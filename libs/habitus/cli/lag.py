"""`habitus lag`: per projection, the stream's last sequence on the projection's subjects against
its checkpoint row (`<schema>.projection_checkpoints`), its durable consumer's pending and
unacknowledged deliveries and its dead letters in HABITUS_DLQ.

The measurement is `habitus.ops.lag` (the demo shows the same one); this module prints it.
It needs HABITUS_NATS_URL and HABITUS_DATABASE_URL, or a `habitus up` running here.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from habitus.cli.connect import bus_settings, nats, run, where
from habitus.cli.gateway import fail
from habitus.cli.output import AsJson, console, echo_json, or_dash

if TYPE_CHECKING:
    from habitus.ops.lag import Lag


def lag(projection: Annotated[list[str] | None, typer.Argument(
            help="only these projections (default: every installed one)")] = None,
        as_json: AsJson = False) -> None:
    """Per projection: the stream's last sequence on its subjects against its checkpoint, its
    consumer's pending and unacknowledged deliveries, and its dead letters."""
    settings = bus_settings("nats_url", "database_url")

    async def go() -> list[Lag]:
        # imported here, not at the top: the measurement loads the service registry, which
        # every `habitus --help` would pay for
        from habitus.ops.lag import measure

        async with nats(settings, "habitus-lag") as nc:
            return await measure(nc, str(settings.database_url), projection)

    import psycopg

    try:
        lags = run(go)
    except LookupError as exc:
        raise fail(str(exc)) from None
    except psycopg.OperationalError as exc:
        raise fail(f"cannot reach Postgres at {where(str(settings.database_url))} ({exc}): "
                   "is it running? "
                   "(`habitus up` starts one)") from None
    if as_json:
        echo_json([{**asdict(x), "behind": x.behind} for x in lags])
        return
    table = Table("projection", "stream", "last seq", "checkpoint", "behind", "pending",
                  "ack pending", "dlq")
    for x in lags:
        behind = x.behind
        style = "" if not behind and not x.dead_letters else "yellow"
        table.add_row(x.projection, x.stream.removeprefix("HABITUS_"), str(x.stream_seq),
                      or_dash(x.checkpoint), or_dash(behind), or_dash(x.pending),
                      or_dash(x.ack_pending), str(x.dead_letters), style=style)
    console.print(table)
