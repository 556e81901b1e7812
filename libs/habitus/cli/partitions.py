"""`habitus partitions`: per projection and partition, the replica applying it, its state,
checkpoint and lag; `habitus partitions set` changes how many partitions a projection has.

The measurement is `habitus.service.partitions` (the gateway's `admin.partitions` answers the
same); this module prints it. It needs HABITUS_NATS_URL and HABITUS_DATABASE_URL, or a
`habitus up` running here.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.connect import bus_settings, nats, run, where
from habitus.cli.gateway import fail
from habitus.cli.output import AsJson, console, echo_json, or_dash

partitions_app = typer.Typer(
    help="Each projection's partitions: which replica applies each, how far it is; `set` "
         "changes how many there are.")


async def _connected(settings: Any, work: Any) -> Any:
    import psycopg

    async with nats(settings, "habitus-partitions") as nc:
        async with await psycopg.AsyncConnection.connect(
                str(settings.database_url), autocommit=True) as conn:
            return await work(nc.jetstream(), conn)


def _run(settings: Any, work: Any) -> Any:
    import psycopg

    try:
        return run(lambda: _connected(settings, work))
    except LookupError as exc:
        raise fail(str(exc)) from None
    except psycopg.OperationalError as exc:
        raise fail(f"cannot reach Postgres at {where(str(settings.database_url))} ({exc}): "
                   "is it running? (`habitus up` starts one)") from None
    except psycopg.errors.UndefinedColumn:
        raise fail("the database's schemas are older than this habitus: run `habitus migrate` "
                   "(or start the system, which migrates)") from None


@partitions_app.callback(invoke_without_command=True)
def show(ctx: typer.Context,
         projection: Annotated[list[str] | None, typer.Option(
             "--projection", "-p", help="only these projections (default: every installed one)"
         )] = None,
         as_json: AsJson = False) -> None:
    """Per projection and partition: its state, the replica that applies it (and whether that
    replica's lease is alive), its checkpoint, the stream's last sequence on its subjects, how
    far behind it is and its consumer's pending deliveries."""
    if ctx.invoked_subcommand is not None:
        return
    settings = bus_settings("nats_url", "database_url")
    from habitus.service.partitions import states

    found = _run(settings, lambda js, conn: states(js, conn, projection))
    if as_json:
        echo_json([p.as_dict() for p in found])
        return
    table = Table("projection", "partition", "state", "owner", "checkpoint", "last seq",
                  "behind", "pending")
    for p in found:
        owner = or_dash(p.owner) + ("" if p.owner is None or p.owner_alive else " (gone)")
        style = "" if p.state == "active" and p.owner_alive and not p.behind else "yellow"
        table.add_row(p.projection, p.partition, p.state, owner, str(p.checkpoint),
                      str(p.stream_seq), str(p.behind), or_dash(p.pending), style=style)
    console.print(table)
    owners = Counter(p.owner for p in found if p.owner is not None and p.owner_alive)
    if owners:
        console.print("owners: " + ", ".join(f"{o} ({n} partitions)"
                                             for o, n in sorted(owners.items())))


@partitions_app.command("set")
def set_count(projections: Annotated[list[str] | None, typer.Argument(
                  help="the projections to repartition")] = None,
              count: Annotated[int, typer.Option(
                  "--count", "-n", help="partitions each will have: 1, 2, 4, 8 or 16")] = 4,
              every: Annotated[bool, typer.Option(
                  "--all", help="every installed projection")] = False,
              as_json: AsJson = False) -> None:
    """Split projections COUNT ways from now on: their partitions apply what the stream holds
    up to now, then the new ones take over after it (the replicas keep running; nothing is
    applied twice or out of a user's order)."""
    if bool(projections) == every:
        raise fail("name the projections to repartition, or --all (not both)")
    settings = bus_settings("nats_url", "database_url")
    from habitus.projection.checkpoints import LayoutBusy
    from habitus.service.partitions import installed, repartition

    async def work(js: Any, conn: Any) -> list[Any]:
        names = projections or [p.name for p in installed()]
        installed(names)  # unknown names: refused before anything changes
        return [await repartition(js, conn, name, count) for name in names]

    try:
        done = _run(settings, work)
    except (ValueError, LayoutBusy) as exc:
        raise fail(str(exc)) from None
    if as_json:
        echo_json([{"projection": d.projection, "count": d.count, "cutover": d.cutover,
                    "partitions": d.partitions} for d in done])
        return
    for d in done:
        console.print(f"{d.projection}: {d.count} partitions from sequence {d.cutover + 1} "
                      f"({', '.join(d.partitions)})")
