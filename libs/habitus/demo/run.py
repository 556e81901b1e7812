"""`run_demo`: the whole demo on a running system, what `habitus demo` runs once its sandbox's
gateway is ready (and `tests/e2e/test_demo.py` runs against the in-process stack).

Replay the scenario through the gateway, wait until every projection caught up, act as the
users would, wait again, then show what was learned per user and check it against the
scenario's expectations.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from habitus.demo.api import Api, apis, configure, send, tenant_keys
from habitus.demo.model import llm_configured
from habitus.demo.outcomes import act, outcomes, problems
from habitus.demo.progress import Lag, projection_lag, wait_caught_up
from habitus.demo.scenario import Scenario, build_scenario, ordered_items
from habitus.demo.show import lag_table, next_steps, show_routing, show_user


def run_demo(base_url: str, key: str, *, console: Console | None = None,
             nats_url: str | None = None, database_url: str | None = None,
             scripted: bool | None = None, timeout: float = 240.0, keep: bool = False,
             tenants: dict[str, str] | None = None, data_dir: Path | None = None) -> bool:
    """Replay the scenario, wait until every projection caught up, show what was learned per
    user, and check it against the scenario's expectations. True when all of it was met.

    `nats_url` and `database_url` (given by `habitus up`) show the projections' lag and make a
    key per tenant; without them every tenant acts through `key`. `tenants` renames the
    scenario's tenants (tests sharing servers; the demo's sandbox is fresh, so it needs none).
    `data_dir` (the sandbox) is where `--keep`'s next steps point the CLI."""
    out = console or Console()
    scripted = not llm_configured() if scripted is None else scripted
    started = time.monotonic()
    scenario = build_scenario(tenants=tenants)
    keys = tenant_keys(scenario, key, database_url)
    api = apis(base_url, keys)
    try:
        configure(api, scenario)
        pairs = ordered_items(scenario)
        with Progress(TextColumn("  replaying three weeks"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=out, transient=False) as progress:
            task = progress.add_task("replay", total=len(pairs))
            accepted = send(api, pairs, lambda n: progress.advance(task, n))
        out.print(Text(f"  sent {len(pairs)} items for {len(scenario.users())} users of "
                       f"{len(scenario.tenants)} tenants ({accepted} accepted)"))
        ok = _settle(out, api, scenario, nats_url, database_url, timeout)
        done = act(api, scenario)
        out.print(Text(
            "  habits declared, Analyze run, suggestions approved, routing relearned: " +
            ", ".join(f"{u}: {d['analyzed']['suggested']} suggested"
                      for u, d in done.items() if isinstance(d, dict) and "analyzed" in d)))
        ok = _settle(out, api, scenario, nats_url, database_url, timeout) and ok
        found = outcomes(api, scenario)
    finally:
        for a in api.values():
            a.close()
    for t in scenario.tenants:
        out.rule(Text.assemble((t.tenant_id, "bold magenta"), f": {t.company}"))
        for u in t.users:
            show_user(out, t, u, found[u.user_id])
        show_routing(out, t, found[t.tenant_id])
    missing = problems(scenario, found, scripted=scripted)
    elapsed = time.monotonic() - started
    if missing or not ok:
        out.print(f"[red]  demo: {len(missing)} expectation(s) not met after {elapsed:.0f} s:")
        for line in missing:
            out.print(Text(f"    - {line}", style="red"))
        if not ok:
            out.print("[red]    - the projections did not catch up in time")
        return False
    model = "the scripted model" if scripted else os.environ.get("HABITUS_LLM_MODEL", "")
    out.print(f"[green]  demo: every expectation of the scenario met ({elapsed:.0f} s, LLM "
              f"parts answered by {escape(model)})")
    if keep:
        next_steps(out, base_url, keys, scenario, data_dir)
    return True


def _settle(out: Console, api: dict[str, Api], scenario: Scenario, nats_url: str | None,
            database_url: str | None, timeout: float) -> bool:
    with Live(Group(), console=out, transient=True, refresh_per_second=4) as live:
        def status(lags: list[Lag], waiting: dict[str, str]) -> None:
            live.update(lag_table(lags, waiting))

        ok = wait_caught_up(api, scenario, timeout=timeout, nats_url=nats_url,
                            database_url=database_url, on_status=status)
    if nats_url and database_url:
        out.print(lag_table(projection_lag(nats_url, database_url), {}))
    return ok
