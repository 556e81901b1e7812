"""`habitus demo`: three weeks of two companies' agents, replayed through the gateway, then
what Habitus learned about each user, checked against what the story says it should learn.

The scenario is `examples/scenarios/three_weeks.py` (two tenants, four users, each with a
story and its expected outcome); its LLM parts (the extractor, habits' Analyze and judge) are
answered by `examples/scenarios/scripted_model.py` unless `HABITUS_LLM_BASE_URL` and
`HABITUS_LLM_MODEL` name a real model (the demo's `habitus up` starts the scripted one, see
`scripted_model_for_demo`). Everything goes through the public HTTP API with tenant keys, as an
integrator's agents would send it; the demo reads Postgres and NATS only to show how far each
projection has come (stream sequence against checkpoint).

It runs in a sandbox of its own (:mod:`habitus.runtime.sandbox`): the only tenants there are
the scenario's, and the scripted model is wired into that sandbox's services alone.

What it prints of the data (facet values, rules with their `[critical]` priority, PROFILE.md,
stories) is text, never Rich markup: `_text` and `escape` keep brackets as they are.

The steps are plain functions so that `tests/e2e/test_scenario.py` replays the same scenario
the same way: `configure`, `send`, `wait_caught_up`, `act`, `outcomes`, `problems`.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from habitus.scripted_llm import ScriptedLlmServer

#: the repository checkout this module runs from (an editable install: libs/habitus/demo.py)
REPO = Path(__file__).resolve().parents[2]
SCENARIO = "examples.scenarios.three_weeks"
MODEL = "examples.scenarios.scripted_model"
#: items per POST /v1/events
BATCH = 25
#: settings the demo gives the services it starts when the environment sets none: extraction
#: windows that close seconds after the replay instead of five minutes
DEMO_SERVICE_ENV = {"HABITUS_EXTRACTOR_WINDOW_SECONDS": "3",
                    "HABITUS_EXTRACTOR_SWEEP_SECONDS": "0.5"}

Scenario = Any  # examples.scenarios.three_weeks.Scenario (outside the typed package)


def _import(name: str) -> Any:
    if str(REPO) not in sys.path and (REPO / "examples" / "scenarios").is_dir():
        sys.path.insert(0, str(REPO))
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise RuntimeError(f"the demo needs the repository's examples/scenarios ({REPO}): "
                           f"{exc}") from exc


def build_scenario(now: float | None = None, tenants: dict[str, str] | None = None
                   ) -> Scenario:
    return _import(SCENARIO).build(time.time() if now is None else now, tenants)


def llm_configured(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ) if env is None else env
    return bool(env.get("HABITUS_LLM_BASE_URL") and env.get("HABITUS_LLM_MODEL"))


def start_scripted_model(scenario: Scenario | None = None) -> ScriptedLlmServer:
    """The scenario's scripted model on a free local port."""
    server: ScriptedLlmServer = _import(MODEL).serve(scenario)
    return server


def scripted_model_for_demo() -> tuple[ScriptedLlmServer | None, dict[str, str]]:
    """What the demo's `habitus up` adds to its services' environment (theirs only): the
    scripted model (started here, when no real one is configured) and short extraction windows
    (unless set)."""
    env = {k: v for k, v in DEMO_SERVICE_ENV.items() if k not in os.environ}
    if llm_configured():
        return None, env
    server = start_scripted_model()
    env.update(HABITUS_LLM_BASE_URL=server.url, HABITUS_LLM_MODEL=server.model,
               HABITUS_LLM_MAX_RETRIES="1")
    return server, env


# -- talking to the gateway ---------------------------------------------------------------


class Api:
    """One tenant's view of the gateway."""

    def __init__(self, base_url: str, key: str, timeout: float = 60.0):
        self.client = httpx.Client(base_url=base_url, timeout=timeout, trust_env=False,
                                   headers={"Authorization": f"Bearer {key}"})

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, **params: Any) -> httpx.Response:
        return self.client.post(f"/v1/rpc/{method}", json=params)

    def rpc(self, method: str, **params: Any) -> Any:
        response = self.call(method, **params)
        if response.status_code != 200:
            raise RuntimeError(f"{method} answered {response.status_code}: {response.text}")
        return response.json()["result"]

    def send(self, items: Sequence[dict[str, Any]]) -> int:
        response = self.client.post("/v1/events", json=list(items))
        if response.status_code not in (200, 202):
            raise RuntimeError(f"POST /v1/events answered {response.status_code}: "
                               f"{response.text[:500]}")
        return int(response.json().get("accepted", len(items)))

    def profile_md(self, user: str) -> str:
        return self.client.get(f"/v1/users/{user}/profile.md").text


def apis(base_url: str, keys: dict[str, str]) -> dict[str, Api]:
    return {tenant: Api(base_url, key) for tenant, key in keys.items()}


def session_turns(user: str, said: Sequence[tuple[str, str]], *, start: float,
                  session_id: str, channel: str, reply_after: float = 3.0,
                  next_after: float = 15.0) -> list[dict[str, Any]]:
    """`TurnRecorded` items for (message, reply) pairs, timed like a real session: each reply
    `reply_after` s after its message, the next message `next_after` s after the last one, and
    each turn saying when the previous reply came (so a quick correction reads as one)."""
    items: list[dict[str, Any]] = []
    at, previous = start, None
    for n, (message, reply) in enumerate(said, start=1):
        payload: dict[str, Any] = {
            "session_id": session_id, "turn_id": f"t{n}", "channel": channel,
            "user_message": message, "assistant_message": reply,
            "user_at": at, "assistant_at": at + reply_after, "tool_calls": [],
        }
        if previous is not None:
            payload["previous_assistant_at"] = previous
        items.append({"type": "TurnRecorded", "user_id": user, "payload": payload})
        previous, at = at + reply_after, at + next_after
    return items


def ordered_items(scenario: Scenario) -> list[tuple[str, dict[str, Any]]]:
    """Every tenant's items, as (tenant, item), in the order they happened."""
    pairs = [(t.tenant_id, item) for t in scenario.tenants for item in scenario.items(t)]
    return sorted(pairs, key=lambda pair: _item_time(pair[1]))


def _item_time(item: dict[str, Any]) -> float:
    p = item["payload"]
    for key in ("user_at", "sent_at", "started_at", "synced_at"):
        if key in p:
            return float(p[key])
    return float(item.get("occurred_at", 0.0))


def configure(api: dict[str, Api], scenario: Scenario) -> None:
    """What each tenant sets before its agents report (habits keep a month of turns)."""
    for t in scenario.tenants:
        api[t.tenant_id].rpc("habits.configure", retention_days=t.retention_days)


def send(api: dict[str, Api], pairs: Sequence[tuple[str, dict[str, Any]]],
         on_batch: Callable[[int], None] | None = None) -> int:
    """Send the items in order, a batch at a time (a batch holds one tenant's items)."""
    accepted, i = 0, 0
    while i < len(pairs):
        tenant = pairs[i][0]
        batch: list[dict[str, Any]] = []
        while i < len(pairs) and pairs[i][0] == tenant and len(batch) < BATCH:
            batch.append(pairs[i][1])
            i += 1
        accepted += api[tenant].send(batch)
        if on_batch is not None:
            on_batch(len(batch))
    return accepted


# -- catching up ---------------------------------------------------------------------------


@dataclass
class Lag:
    projection: str
    stream: str
    last_seq: int | None
    checkpoint: int | None
    pending: int | None

    @property
    def caught_up(self) -> bool:
        """Its consumer has nothing pending; or it has no consumer (yet) and nothing to read: a
        service still starting (slow on a busy machine) has no consumer while its events wait."""
        return self.pending == 0 or (self.pending is None and not self.last_seq)


async def _projection_lag(nats_url: str, database_url: str) -> list[Lag]:
    """What `habitus lag` measures (the checkpoints read through the checkpoint store), as
    the demo's table shows it."""
    import nats

    from habitus.cli_ops import measure

    nc = await nats.connect(nats_url, name="habitus-demo")
    try:
        measured = await measure(nc, database_url)
    finally:
        await nc.close()
    return [Lag(m.projection, m.stream, m.stream_seq, m.checkpoint,
                None if m.pending is None else m.pending + (m.ack_pending or 0))
            for m in sorted(measured, key=lambda m: m.projection)]


def projection_lag(nats_url: str, database_url: str) -> list[Lag]:
    return asyncio.run(_projection_lag(nats_url, database_url))


def _user_settled(api: Api, user: str, extractor: bool) -> str | None:
    """Why the user is not settled yet, or None."""
    facets = api.rpc("learning.list_facets", user_id=user)
    if facets["pending_since"] is not None:
        return "learning"
    if extractor:
        status = api.rpc("extraction.status", user_id=user)
        if status["enabled"]:
            w = status["windows"]
            if w.get("open", 0) or w.get("ready", 0):
                return "extraction"
    return None


def wait_caught_up(api: dict[str, Api], scenario: Scenario, *, timeout: float,
                   nats_url: str | None = None, database_url: str | None = None,
                   on_status: Callable[[list[Lag], dict[str, str]], None] | None = None,
                   extractor: bool = True) -> bool:
    """Until every projection applied what the streams hold and every user's learning and
    extraction are idle, twice in a row; False on timeout."""
    deadline = time.monotonic() + timeout
    calm = 0
    while time.monotonic() < deadline:
        lags = projection_lag(nats_url, database_url) if nats_url and database_url else []
        waiting = {}
        for t, u in scenario.users():
            why = _user_settled(api[t.tenant_id], u.user_id, extractor)
            if why:
                waiting[u.user_id] = why
        if on_status is not None:
            on_status(lags, waiting)
        calm = calm + 1 if all(lag.caught_up for lag in lags) and not waiting else 0
        if calm >= 2:
            return True
        time.sleep(0.5)
    return False


# -- what a person does afterwards ---------------------------------------------------------


def _when(text: str) -> str:
    text = " ".join(text.split()).rstrip(".").casefold()
    return text[5:] if text.startswith("when ") else text


def act(api: dict[str, Api], scenario: Scenario) -> dict[str, Any]:
    """Declare habits, run Analyze, approve suggestions, relearn routing; what each answered."""
    done: dict[str, Any] = {}
    for t, u in scenario.users():
        a = api[t.tenant_id]
        declared = [a.rpc("habits.declare", user_id=u.user_id, when=when, do=do)["outcome"]
                    for when, do in u.declare]
        analyzed = a.rpc("habits.analyze", user_id=u.user_id)
        approved = []
        for when in u.approve:
            habits = a.rpc("habits.list", user_id=u.user_id)["habits"]
            habit = next((h for h in habits if _when(h["when"]) == _when(when)), None)
            if habit is not None and habit["status"] == "candidate":
                approved.append(a.rpc("habits.apply_review", user_id=u.user_id,
                                      habit_id=habit["habit_id"], checksum=habit["checksum"],
                                      action="approve")["outcome"])
        done[u.user_id] = {"declared": declared, "analyzed": analyzed, "approved": approved}
    for t in scenario.tenants:
        done[t.tenant_id] = api[t.tenant_id].rpc("router.update_policy", policy="learned")
    return done


# -- what was learned ----------------------------------------------------------------------


def outcomes(api: dict[str, Api], scenario: Scenario) -> dict[str, Any]:
    """Everything the demo shows and the test checks, per user and per tenant's routing."""
    out: dict[str, Any] = {}
    for t, u in scenario.users():
        a, user = api[t.tenant_id], u.user_id
        cls, key = u.explain
        out[user] = {
            "facets": a.rpc("learning.list_facets", user_id=user)["facets"],
            "profile": a.profile_md(user),
            "explain": a.call("learning.explain_facet", user_id=user,
                              **{"class": cls, "key": key}).json().get("result"),
            "rules": a.rpc("memory.tool_rule_list", user_id=user)["rules"],
            "habits": a.rpc("habits.list", user_id=user)["habits"],
            "context": a.rpc("prompt.context", user_id=user, tools=list(u.tools),
                             request=u.sample_request) if u.sample_request else None,
            "route_stats": a.rpc("traces.route_stats", user_id=user),
        }
    for t in scenario.tenants:
        a, first = api[t.tenant_id], t.users[0].user_id
        out[t.tenant_id] = [{
            "query_class": r.query_class,
            "learned": a.rpc("router.select_model", query=r.query,
                             available_models=list(r.models), policy="learned",
                             user_id=first, record=True),
            "heuristic": a.rpc("router.select_model", query=r.query,
                               available_models=list(r.models), policy="heuristic"),
            "expected": r,
        } for r in t.routing]
    return out


def route_count(stats: dict[str, Any]) -> int:
    return sum(int(row.get("count", row.get("traces", 0))) for row in stats.get("routes", []))


def _set_by_user(facet: dict[str, Any]) -> bool:
    return bool(facet.get("pinned")) or facet.get("origin") == "set_by_user"


def problems(scenario: Scenario, found: dict[str, Any], *, scripted: bool = True) -> list[str]:
    """What differs from the scenario's expectations (with a real model, the expectations that
    rest on the model's answers are not checked)."""
    bad: list[str] = []
    for t, u in scenario.users():
        got, exp, who = found[u.user_id], u.expected, f"{t.tenant_id}/{u.user_id}"
        facets = {(f["class"], f["key"]): f for f in got["facets"]}
        for e in exp.facets:
            if e.llm and not scripted:
                continue
            f = facets.get((e.class_, e.key))
            if f is None:
                bad.append(f"{who}: no facet {e.class_}/{e.key} (expected {e.value}, "
                           f"{e.state})")
            elif (f["value"].casefold(), f["state"]) != (e.value.casefold(), e.state) or \
                    (e.set_by_user != _set_by_user(f)):
                mark = ", set by the user"
                bad.append(f"{who}: {e.class_}/{e.key} is {f['value']} ({f['state']}"
                           f"{mark if _set_by_user(f) else ''}), expected {e.value} "
                           f"({e.state}{mark if e.set_by_user else ''})")
        for cls, key, value in exp.absent:
            f = facets.get((cls, key))
            if f is not None and f["value"].casefold() == value.casefold():
                bad.append(f"{who}: learned {cls}/{key}={value}, which is not theirs")
        for line in exp.profile:
            if line not in got["profile"]:
                bad.append(f"{who}: PROFILE.md lacks {line!r}")
        for r in exp.rules:
            if not any(rule["tool_name"] == r.tool and rule["priority"] == r.priority and
                       r.contains.casefold() in rule["rule"].casefold() and r.tag in rule["tags"]
                       for rule in got["rules"]):
                bad.append(f"{who}: no {r.priority} rule for {r.tool} saying {r.contains!r} "
                           f"tagged {r.tag}")
        if len(got["rules"]) != len(exp.rules):
            bad.append(f"{who}: {len(got['rules'])} tool rules, expected {len(exp.rules)}")
        for h in exp.habits:
            if h.llm and not scripted:
                continue
            habit = next((x for x in got["habits"] if _when(x["when"]) == _when(h.when)), None)
            if habit is None:
                bad.append(f"{who}: no habit 'When {h.when}'")
            elif (habit["status"], habit["review_status"], habit["origin"]) != (
                    h.status, h.review_status, h.origin) or \
                    " ".join(habit["do"].split()).casefold() != h.do.casefold():
                bad.append(f"{who}: habit 'When {h.when}' is {habit['status']}/"
                           f"{habit['review_status']}/{habit['origin']} doing {habit['do']!r}, "
                           f"expected {h.status}/{h.review_status}/{h.origin}")
        if scripted and len(got["habits"]) != len(exp.habits):
            bad.append(f"{who}: {len(got['habits'])} habits, expected {len(exp.habits)}")
        if scripted and got["context"] is not None and \
                got["context"]["steered_by"] != exp.steered_by:
            bad.append(f"{who}: prompt.context steered by {got['context']['steered_by']}, "
                       f"expected {exp.steered_by}")
        if route_count(got["route_stats"]) != exp.traces:
            bad.append(f"{who}: route_stats counts {route_count(got['route_stats'])} traces, "
                       f"expected {exp.traces}")
    for t in scenario.tenants:
        for r in found[t.tenant_id]:
            e = r["expected"]
            for policy in ("learned", "heuristic"):
                if r[policy]["model"] != getattr(e, policy):
                    bad.append(f"{t.tenant_id}: {policy} routing of the {e.query_class} query "
                               f"chose {r[policy]['model']}, expected {getattr(e, policy)}")
    return bad


# -- showing it ----------------------------------------------------------------------------


def _text(*values: object) -> list[Text]:
    """Table cells that show `values` as they are: a plain str cell is Rich markup, which would
    swallow a rule's `[critical]` or any bracketed facet value."""
    return [Text(str(v)) for v in values]


def _lag_table(lags: Iterable[Lag], waiting: dict[str, str]) -> Table:
    table = Table("projection", "stream", "last seq", "checkpoint", "pending",
                  title="Projections catching up", title_justify="left")
    for lag in lags:
        pending = "-" if lag.pending is None else str(lag.pending)
        style = "green" if lag.caught_up else "yellow"
        table.add_row(*_text(lag.projection, lag.stream, lag.last_seq or 0,
                             lag.checkpoint or 0), Text(pending, style=style))
    caption = ("pending: events the projection reads that it has not applied yet (its "
               "checkpoint stops at the last event it reads)")
    if waiting:
        caption += "; still working: " + ", ".join(f"{u} ({w})" for u, w in waiting.items())
    table.caption = Text(caption)
    return table


def show_user(out: Console, tenant: Any, user: Any, got: dict[str, Any]) -> None:
    out.rule(Text.assemble((f"{tenant.tenant_id}/{user.user_id}", "bold"),
                           f": {user.name}, {user.persona}"))
    out.print(Text(user.story, style="dim"))
    facets = Table("class", "key", "value", "state", "stability", "set by",
                   title="Active and provisional facets", title_justify="left")
    for f in got["facets"]:
        set_by = {"set_by_user": "the user", "provider": "their account",
                  "stated": "said once"}.get(f.get("origin", ""), "learned")
        if f["pinned"]:
            set_by = "the user"
        stability = "" if f["stability"] is None else f"{f['stability']:.2f}"
        facets.add_row(*_text(f["class"], f["key"], f["value"], f["state"], stability, set_by))
    out.print(facets)
    out.print(Panel(Text(got["profile"].rstrip()), title="PROFILE.md", expand=False))
    explain = got["explain"]
    if explain:
        table = Table("value", "family", "count", "decay", "contribution",
                      title=Text(f"learning.explain_facet {explain['class']}/{explain['key']}: "
                                 f"{explain['state']}, stability {explain['stability']}"),
                      title_justify="left")
        for v in explain["values"]:
            for fam in v.get("families", v.get("cue_families", [])):
                table.add_row(*_text(v.get("value"), fam.get("family", fam.get("cue")),
                                     fam.get("count"), f"{float(fam.get('decay', 0)):.2f}",
                                     f"{float(fam.get('contribution', 0)):.2f}"))
        out.print(table)
    if got["rules"]:
        rules = Table("tool", "priority", "rule", "tags", title="Tool rules",
                      title_justify="left")
        for r in got["rules"]:
            rules.add_row(*_text(r["tool_name"], r["priority"], r["rule"], ", ".join(r["tags"])))
        out.print(rules)
    if got["habits"]:
        habits = Table("when", "do", "status", "review", "origin", "support",
                       title="Habits", title_justify="left")
        for h in got["habits"]:
            habits.add_row(*_text(h["when"], h["do"], h["status"], h["review_status"],
                                  h["origin"], f"{h['support']} obs / {h['days']} days"))
        out.print(habits)
    context = got["context"]
    if context is not None:
        steered = ", ".join(context["steered_by"]) or "no habit"
        out.print(Panel(Text(context["text"].rstrip() or "(empty)"),
                        title=Text(f"prompt.context for {user.sample_request!r} "
                                   f"(steered by: {steered})"), expand=False))
    routes = Table("model", "agent", "traces", "success", "feedback",
                   title="traces.route_stats", title_justify="left")
    for row in got["route_stats"].get("routes", []):
        feedback = row.get("avg_feedback")
        routes.add_row(*_text(row.get("model"), row.get("agent"),
                              row.get("count", row.get("traces")),
                              f"{float(row.get('success_rate', 0)):.0%}",
                              "-" if feedback is None else f"{float(feedback):.2f}"))
    out.print(routes)


def show_routing(out: Console, tenant: Any, decisions: list[dict[str, Any]]) -> None:
    table = Table("query", "class", "heuristic", "learned", "why",
                  title=Text(f"router.select_model for {tenant.tenant_id}"),
                  title_justify="left")
    for d in decisions:
        query = d["expected"].query
        table.add_row(*_text(query if len(query) < 40 else query[:37] + "...",
                             d["query_class"], d["heuristic"]["model"], d["learned"]["model"],
                             d["learned"]["reason"]))
    out.print(table)


# -- the whole demo ------------------------------------------------------------------------


def tenant_keys(scenario: Scenario, key: str, database_url: str | None) -> dict[str, str]:
    """A key per tenant of the scenario (made in the key table when the database is known;
    else every tenant acts through `key`'s own tenant)."""
    if database_url is None:
        return {t.tenant_id: key for t in scenario.tenants}

    async def make() -> dict[str, str]:
        from psycopg_pool import AsyncConnectionPool

        from habitus.auth.keys import create_key

        async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False
                                       ) as pool:
            return {t.tenant_id: await create_key(pool, t.tenant_id, label="habitus demo")
                    for t in scenario.tenants}

    return asyncio.run(make())


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
        _next_steps(out, base_url, keys, scenario, data_dir)
    return True


def _settle(out: Console, api: dict[str, Api], scenario: Scenario, nats_url: str | None,
            database_url: str | None, timeout: float) -> bool:
    from rich.live import Live

    with Live(Group(), console=out, transient=True, refresh_per_second=4) as live:
        def status(lags: list[Lag], waiting: dict[str, str]) -> None:
            live.update(_lag_table(lags, waiting))

        ok = wait_caught_up(api, scenario, timeout=timeout, nats_url=nats_url,
                            database_url=database_url, on_status=status)
    if nats_url and database_url:
        out.print(_lag_table(projection_lag(nats_url, database_url), {}))
    return ok


def _next_steps(out: Console, base_url: str, keys: dict[str, str], scenario: Scenario,
                data_dir: Path | None = None) -> None:
    """What to try on the demo's system while it runs, one unwrapped line each (to be copied).
    The `export` lines come first: without them `habitus ...` commands would find the user's
    own system (./var, port 8080, HABITUS_*_URL) instead of the demo's."""
    tenant = scenario.tenants[0]
    user = tenant.users[0]
    key = keys[tenant.tenant_id]
    lines = [f"export HABITUS_URL={base_url}"]
    if data_dir is not None:
        lines.append(f"export HABITUS_DATA_DIR={data_dir}   # the demo's data, kept after "
                     f"Ctrl-C: rm -rf it when done")
    lines.append(f"export HABITUS_API_KEY={key}   # tenant {tenant.tenant_id}")
    shadowing = [v for v in ("HABITUS_NATS_URL", "HABITUS_DATABASE_URL", "HABITUS_REDIS_URL")
                 if os.environ.get(v, "").strip()]
    if shadowing:
        lines.append(f"unset {' '.join(shadowing)}   # they name your own system's servers")
    lines += [
        f"curl -s $HABITUS_URL/v1/users/{user.user_id}/profile.md -H \"Authorization: Bearer "
        f"$HABITUS_API_KEY\"",
        f"curl -s -X POST $HABITUS_URL/v1/rpc/prompt.context -H \"Authorization: Bearer "
        f"$HABITUS_API_KEY\" -d '{{\"user_id\": \"{user.user_id}\", \"request\": "
        f"\"{user.sample_request}\"}}'",
        f"habitus rules list --user {user.user_id}",
        "habitus traces stats",
        "habitus route 'def f(x): return x' --models qwen2.5-coder:7b,llama3.1:70b "
        "--policy learned",
        "# keys of the other tenants: " + ", ".join(f"{t}={k}" for t, k in keys.items()
                                                     if t != tenant.tenant_id),
    ]
    out.rule("Still running (Ctrl-C stops it): try", align="left")
    for line in lines:
        out.print(Text(f"  {line}"), soft_wrap=True)
