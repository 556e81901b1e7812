"""`habitus optimize`: search a tenant's configuration, follow the run, apply or undo its result,
export it as a file; through the gateway with an API key, as an integrator's script would.

A run is described by a file (JSON or TOML): either the `optimize.run` parameters themselves
(`space`, `objectives`, `proposer`, ...) or a table `[optimize]` holding the space's `search`,
`fixed` and `constraints`, as optimisation frameworks write it. Flags override the file.
`habitus optimize run` follows the run with a progress bar until it ends (Ctrl-C leaves it
running and says how to follow it again).
"""

from __future__ import annotations

import json
import math
import time
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from habitus.cli.gateway import Gateway, Key, Tenant, Url, fail
from habitus.cli.output import console, echo_json

optimize_app = typer.Typer(
    help="Search the tenant's configuration over what already happened (through the gateway).",
    no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]
RunId = Annotated[str, typer.Argument(help="the run")]
TrialId = Annotated[str, typer.Argument(help="the trial")]
#: seconds between two looks at a run being followed
POLL = 0.5


def read_definition(path: Path) -> dict[str, Any]:
    """A run's parameters from a JSON or TOML file (see the module docstring)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(f"{path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise fail(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: "
                   f"{exc}") from None
    if not isinstance(data, dict):
        raise fail(f"{path}: expected an object of run parameters")
    if "optimize" in data and "space" not in data:
        section = dict(data.pop("optimize"))
        space = {k: section.pop(k) for k in ("search", "fixed", "constraints") if k in section}
        data = {**data, **section, "space": space}
    return data


def parse_objective(text: str) -> dict[str, Any]:
    """`metric:direction[:weight]`, e.g. `reward:max` or `cost_usd:min:2`."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise typer.BadParameter(f"{text!r}: expected metric:direction[:weight]")
    objective: dict[str, Any] = {"metric": parts[0], "direction": parts[1]}
    if len(parts) == 3:
        try:
            objective["weight"] = float(parts[2])
        except ValueError:
            raise typer.BadParameter(f"{text!r}: the weight is not a number") from None
    return objective


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def _follow(gateway: Gateway, run_id: str, total: int) -> dict[str, Any]:
    status: dict[str, Any] = gateway.call("optimize.status", {"run_id": run_id})
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("best {task.fields[best]}"), console=console,
                  transient=False) as bar:
        task = bar.add_task(f"run {run_id}", total=total, best="-")
        while True:
            bar.update(task, completed=status["trials"], best=status["best_trial_id"] or "-")
            if status["status"] != "running":
                return status
            time.sleep(POLL)
            status = gateway.call("optimize.status", {"run_id": run_id})


def _print_status(status: dict[str, Any]) -> None:
    line = (f"run {status['run_id']}: {status['status']}, {status['trials']} of "
            f"{status['max_trials']} trials ({status['proposer']} proposer, "
            f"{status['evaluator']} evaluator)")
    console.print(line, soft_wrap=True)
    if status["best_trial_id"]:
        console.print(f"best trial {status['best_trial_id']}; frontier "
                      f"{', '.join(status['frontier']) or '-'}", soft_wrap=True)
    if status["reason"]:
        console.print(f"why it ended: {status['reason']}", soft_wrap=True)


@optimize_app.command("run")
def run(definition: Annotated[Path, typer.Argument(help="the run's parameters (JSON or TOML)")],
        proposer: Annotated[str | None, typer.Option(help="random, grid or llm")] = None,
        evaluator: Annotated[str | None, typer.Option(
            help="counterfactual or replay")] = None,
        max_trials: Annotated[int | None, typer.Option("--max-trials")] = None,
        patience: Annotated[int | None, typer.Option(
            help="stop after this many trials without a better best")] = None,
        seed: Annotated[int | None, typer.Option(help="seeds random and grid")] = None,
        objective: Annotated[list[str] | None, typer.Option(
            "--objective", help="metric:direction[:weight], repeatable (reward:max)")] = None,
        detach: Annotated[bool, typer.Option(
            "--detach", help="answer the run id and return without following it")] = False,
        as_json: AsJson = False, url: Url = None, key: Key = None,
        tenant: Tenant = None) -> None:
    """Start a run and follow it to its end with a progress bar."""
    params = read_definition(definition)
    overrides = {"proposer": proposer, "evaluator": evaluator, "max_trials": max_trials,
                 "patience": patience, "seed": seed}
    params.update({k: v for k, v in overrides.items() if v is not None})
    if objective:
        params["objectives"] = [parse_objective(o) for o in objective]
    gateway = Gateway(url, key, tenant)
    started = gateway.call("optimize.run", params)
    run_id = started["run_id"]
    if detach:
        echo_json(started) if as_json else console.print(f"started run {run_id}")
        return
    try:
        status = _follow(gateway, run_id, int(params.get("max_trials", 20)))
    except KeyboardInterrupt:
        console.print(f"run {run_id} goes on; follow it with `habitus optimize status "
                      f"{run_id}`, stop it with `habitus optimize stop {run_id}`")
        raise typer.Exit(130) from None
    if as_json:
        echo_json(status)
        return
    _print_status(status)
    if status["best_trial_id"]:
        console.print(f"apply it with `habitus optimize apply {run_id} "
                      f"{status['best_trial_id']}`")


@optimize_app.command("status")
def status(run_id: RunId, as_json: AsJson = False, url: Url = None, key: Key = None,
           tenant: Tenant = None) -> None:
    """A run's progress: trials so far, best trial, frontier."""
    found = Gateway(url, key, tenant).call("optimize.status", {"run_id": run_id})
    echo_json(found) if as_json else _print_status(found)


@optimize_app.command("runs")
def runs(as_json: AsJson = False, url: Url = None, key: Key = None,
         tenant: Tenant = None) -> None:
    """The tenant's runs, newest first."""
    found = Gateway(url, key, tenant).call("optimize.runs", {})["runs"]
    if as_json:
        echo_json(found)
        return
    if not found:
        console.print("no runs yet for this tenant")
        return
    table = Table("run", "status", "trials", "best", "proposer", "evaluator")
    for r in found:
        table.add_row(r["run_id"], r["status"], f"{r['trials']}/{r['max_trials']}",
                      r["best_trial_id"] or "-", r["proposer"], r["evaluator"])
    console.print(table)


@optimize_app.command("frontier")
def frontier(run_id: RunId,
             every: Annotated[bool, typer.Option("--all", help="every trial")] = False,
             as_json: AsJson = False, url: Url = None, key: Key = None,
             tenant: Tenant = None) -> None:
    """The run's Pareto frontier (or every trial) with params and metrics."""
    found = Gateway(url, key, tenant).call("optimize.frontier",
                                           {"run_id": run_id, "all": every})
    if as_json:
        echo_json(found)
        return
    metrics = [o["metric"] for o in found["objectives"]]
    table = Table("trial", *metrics, "support", "params", "")
    for t in found["trials"]:
        mark = ("best " if t["best"] else "") + ("frontier" if t["on_frontier"] else "")
        cells = [_number(t["metrics"].get(m)) for m in metrics]
        params = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(t["params"].items()))
        table.add_row(t["trial_id"], *cells, str(t["support"]),
                      params or (t["refused"] or ""), mark.strip())
    console.print(table)
    refused = [t for t in found["trials"] if t["refused"]]
    if refused and every:
        console.print(f"{len(refused)} trials without an estimate: {refused[0]['refused']}",
                      soft_wrap=True)


def _print_configuration(found: dict[str, Any]) -> None:
    console.print(f"configuration version {found['version']}")
    for path, value in sorted(found["params"].items()):
        console.print(f"  {path} = {json.dumps(value)}", soft_wrap=True)


@optimize_app.command("apply")
def apply(run_id: RunId, trial_id: TrialId, as_json: AsJson = False, url: Url = None,
          key: Key = None, tenant: Tenant = None) -> None:
    """Make a trial's configuration the tenant's (answered once routing follows it)."""
    found = Gateway(url, key, tenant).call("optimize.apply",
                                           {"run_id": run_id, "trial_id": trial_id})
    echo_json(found) if as_json else _print_configuration(found)


@optimize_app.command("undo")
def undo(run_id: RunId, trial_id: TrialId, as_json: AsJson = False, url: Url = None,
         key: Key = None, tenant: Tenant = None) -> None:
    """Undo what applying a trial changed."""
    found = Gateway(url, key, tenant).call("optimize.undo",
                                           {"run_id": run_id, "trial_id": trial_id})
    echo_json(found) if as_json else _print_configuration(found)


def parse_setting(text: str) -> tuple[str, Any]:
    """`path=value`: the value read as JSON when it is JSON (`0.2`, `true`, `["a","b"]`,
    `null` to remove the setting), else as the text itself (`routing.policy=bandit`)."""
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise fail(f"{text!r}: expected path=value, e.g. routing.policy=bandit")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return path.strip(), value


@optimize_app.command("configuration")
def configuration(as_json: AsJson = False, url: Url = None, key: Key = None,
                  tenant: Tenant = None) -> None:
    """Show the tenant's configuration and its version."""
    found = Gateway(url, key, tenant).call("optimize.configuration", {})
    echo_json(found) if as_json else _print_configuration(found)


@optimize_app.command("set")
def set_settings(settings: Annotated[list[str], typer.Argument(
                     help="path=value pairs; value JSON or text, null removes the setting")],
                 as_json: AsJson = False, url: Url = None, key: Key = None,
                 tenant: Tenant = None) -> None:
    """Change settings of the tenant's configuration by hand (answered once routing follows)."""
    params = dict(parse_setting(text) for text in settings)
    found = Gateway(url, key, tenant).call("optimize.configure", {"params": params})
    echo_json(found) if as_json else _print_configuration(found)


@optimize_app.command("stop")
def stop(run_id: RunId, as_json: AsJson = False, url: Url = None, key: Key = None,
         tenant: Tenant = None) -> None:
    """Stop a running run after its current trial."""
    found = Gateway(url, key, tenant).call("optimize.stop", {"run_id": run_id})
    echo_json(found) if as_json else _print_status(found)


def to_toml(params: dict[str, Any], header: dict[str, Any]) -> str:
    """A configuration as TOML: a `[source]` table (where it came from) and a
    `[configuration]` table of quoted dotted paths (their values are strings, numbers,
    booleans or lists of them, all of which JSON writes as valid TOML)."""
    lines = ["[source]"] + [f"{k} = {json.dumps(v)}" for k, v in header.items()
                            if v is not None]
    lines += ["", "[configuration]"]
    lines += [f"{json.dumps(path)} = {json.dumps(value)}" for path, value in
              sorted(params.items())]
    return "\n".join(lines) + "\n"


@optimize_app.command("export")
def export(run_id: RunId,
           trial_id: Annotated[str | None, typer.Argument(
               help="the trial (default: the run's best)")] = None,
           output: Annotated[Path, typer.Option(
               "--output", "-o", help="the file (.toml or .json)")] = Path("configuration.toml"),
           url: Url = None, key: Key = None, tenant: Tenant = None) -> None:
    """Write a trial's configuration (over the tenant's current one) to a file."""
    gateway = Gateway(url, key, tenant)
    found = gateway.call("optimize.frontier", {"run_id": run_id, "all": True})
    chosen = trial_id or found["best_trial_id"]
    if chosen is None:
        raise fail(f"run {run_id} has no best trial to export")
    trial = next((t for t in found["trials"] if t["trial_id"] == chosen), None)
    if trial is None:
        raise fail(f"run {run_id} has no trial {chosen}")
    current = gateway.call("optimize.configuration", {})
    params = {**current["params"], **trial["params"]}
    header = {"run_id": run_id, "trial_id": chosen, "metrics": None}
    if output.suffix.lower() == ".json":
        text = json.dumps({"run_id": run_id, "trial_id": chosen, "metrics": trial["metrics"],
                           "configuration": params}, indent=2, sort_keys=True) + "\n"
    else:
        text = to_toml(params, header)
    output.write_text(text, encoding="utf-8")
    console.print(f"wrote {output} ({len(params)} settings of trial {chosen})")
