"""The `habitus` command: run the system, migrate, serve one service, replay, manage keys, and
the operator's commands through the gateway and on the bus.

One module per command group, each importing only what its help needs at the top (the rest
inside the command: `habitus --help` must not load the service host); this module builds the
command tree from them. Nothing outside `habitus.cli` imports it: it is the top of the
library's layers (see docs/architecture.md).

Commands other than `up` need the server URLs; when they are not in the environment and a local
`habitus up` is running on the same data directory, its URLs are used, so `habitus keys create`
just works next to `make run` (`habitus.cli.connect`).

`habitus --help` lists the commands in three panels, in the order a new user needs them: run
the system (`up` and `demo` first), then what goes through the gateway (`context`, the prompt
an agent gets, first), then the bus and the database. Every command spells the same things the
same way: `--url`, `--key`, `--tenant`, `--user`, `--json` (see `habitus.cli.gateway`); the older
`--api-key` is still read as `--key`.
"""

from __future__ import annotations

import typer

from habitus.cli import (
    asyncapi,
    context,
    datakeys,
    dlq,
    erase,
    events,
    extractor,
    facets,
    habits,
    keys,
    lag,
    migrate,
    optimize,
    partitions,
    profile,
    replay,
    route,
    rules,
    run,
    serve,
    traces,
)

#: flag spellings from before the vocabulary was one, read as today's (hidden from --help)
DEPRECATED_FLAGS = {"api-key": "key"}


def normalize_flag(token: str) -> str:
    """Click hands every option name (without its dashes) and choice here before matching."""
    return DEPRECATED_FLAGS.get(token, token)


RUN = "Run the system"
GATEWAY = "Through the gateway (an API key)"
BUS = "On the bus and the database"

app = typer.Typer(help="Habitus: the learning layer for AI agents.", no_args_is_help=True,
                  context_settings={"token_normalize_func": normalize_flag})

# Registration order is the order of `habitus --help`: what a new user runs first, first.
app.command("up", rich_help_panel=RUN)(run.up)
app.command("demo", rich_help_panel=RUN)(run.demo)
app.command("serve", rich_help_panel=RUN, help=f"{serve.serve.__doc__}\n\nServices: "
            f"{', '.join(serve.service_names()) or 'none installed'}.",
            short_help=serve.serve.__doc__)(serve.serve)
app.command("migrate", rich_help_panel=RUN)(migrate.migrate)
app.command("asyncapi", rich_help_panel=RUN)(asyncapi.asyncapi)
app.command("context", rich_help_panel=GATEWAY)(context.context)
app.add_typer(facets.facets_app, name="facets", rich_help_panel=GATEWAY)
app.add_typer(profile.profile_app, name="profile", rich_help_panel=GATEWAY)
app.add_typer(habits.habits_app, name="habits", rich_help_panel=GATEWAY)
app.add_typer(rules.rules_app, name="rules", rich_help_panel=GATEWAY)
app.command("route", rich_help_panel=GATEWAY)(route.route)
app.add_typer(traces.traces_app, name="traces", rich_help_panel=GATEWAY)
app.add_typer(optimize.optimize_app, name="optimize", rich_help_panel=GATEWAY)
app.add_typer(extractor.extractor_app, name="extractor", rich_help_panel=GATEWAY)
app.add_typer(events.events_app, name="events", rich_help_panel=BUS)
app.command("lag", rich_help_panel=BUS)(lag.lag)
app.add_typer(partitions.partitions_app, name="partitions", rich_help_panel=BUS)
app.add_typer(dlq.dlq_app, name="dlq", rich_help_panel=BUS)
app.command("replay", rich_help_panel=BUS)(replay.replay)
app.command("erase", rich_help_panel=BUS)(erase.erase)
app.add_typer(keys.keys_app, name="keys", rich_help_panel=BUS)
app.add_typer(datakeys.datakeys_app, name="datakeys", rich_help_panel=BUS)


def main() -> None:
    """The console script `habitus` (pyproject's `[project.scripts]`)."""
    app()
