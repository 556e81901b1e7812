"""Optimisation over what already happened, end to end through the gateway.

A tenant's agents route their queries with `router.select_model` (a sampling policy, so every
decision is recorded with its propensity) and report each trace with the decision's id. The log
has a planted better configuration: on code queries the small model earns the better reward at
the same cost, while the tenant's routing today (the heuristic) sends code to the large one.
The counterfactual evaluator ranks the planted configuration first with an interval that
excludes today's; a random-proposer run finds it; applying it changes this tenant's routing for
code queries and nothing else, and undoing it restores it. An LLM-proposer run against a
scripted model reads every proposal or records the parse failure with the fixed values kept,
and the replay evaluator asks the model under the trial's configuration.

Every installed service runs in-process on the embedded servers; the model is a scripted
OpenAI-compatible server over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
import random
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.crypto.columns import COLUMNS
from habitus.llm import LlmSettings
from habitus.service.migrations import migrate
from services.optimizer import store
from services.optimizer.settings import OptimizerSettings
from services.stability_detector.settings import LearningSettings
from services.tool_memory.settings import ToolMemorySettings
from services.trace_router.settings import RouterSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.llm_server import Answer, ScriptedLlm
from tests.support.services import every_service, skip_all_history

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
SMALL, LARGE = "llama3.1:8b", "qwen3:32b"
T0 = 1_764_000_000.0
#: the planted truth: mean feedback per (class, model); cost and latency are equal
TRUTH = {("code", SMALL): 0.90, ("code", LARGE): 0.40,
         ("general", SMALL): 0.80, ("general", LARGE): 0.75}
CODE_QUERIES = ("def parse(line): return line.split(',')  # empty fields vanish",
                "import csv; why does my reader skip the header row?",
                "Fix this: for x in range(10): print(x",
                "class Cache: how do I make get() thread safe?")
GENERAL_QUERIES = ("Draft a short note to the team about Friday's office closure, please.",
                   "Summarise the attached incident report for the on-call channel today.",
                   "Plan a three-day offsite agenda for twelve people near Lisbon.")
SPACE = {"search": [
    {"name": "routing.model_for.code", "type": "categorical", "values": [SMALL, LARGE]},
    {"name": "routing.model_for.general", "type": "categorical", "values": [SMALL, LARGE]}]}


def _responder(body: dict[str, Any]) -> Answer:
    """The scripted endpoint: a replay's answer depends on the model asked (the small model
    knows the capital), a judge grades, and the proposer's questions get proposals in turn
    (one unreadable)."""
    system = str(body["messages"][0]["content"])
    if system.startswith("You tune the configuration"):
        n = sum(1 for _ in _PROPOSALS_SEEN)
        _PROPOSALS_SEEN.append(n)
        answers = [
            "```json\n" + json.dumps({"params": {"routing.model_for.code": LARGE},
                                      "reasoning": "the large model for code"}) + "\n```",
            "I would need more data before proposing anything.",
            "Next: " + json.dumps({"params": {"routing.model_for.code": SMALL,
                                              "routing.model_for.general": SMALL,
                                              "colour": "red"},
                                   "reasoning": "small everywhere"}),
        ]
        return Answer(content=answers[n % len(answers)])
    if system.startswith("You grade answers"):
        return Answer(content="0.75")
    model = body.get("model")
    return Answer(content="The capital of Australia is Canberra." if model == SMALL
                  else "I think it is Sydney.", usage=(40, 12))


_PROPOSALS_SEEN: list[int] = []


@pytest_asyncio.fixture(scope="module")
async def llm() -> AsyncIterator[ScriptedLlm]:
    async with ScriptedLlm(responder=_responder) as server:
        yield server


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls, llm: ScriptedLlm) -> AsyncIterator[str]:
    migrate(servers.database)
    presets = {"stability_detector": LearningSettings(scheduler_enabled=False),
               "tool_memory": ToolMemorySettings(semantic_recall=False),
               "trace_router": RouterSettings(relearn_seconds=0.5),
               "optimizer": OptimizerSettings(
                   poll_seconds=0.2, llm=LlmSettings(base_url=llm.url, model="scripted",
                                                     timeout_seconds=5.0, max_retries=0))}
    await skip_all_history(servers.database, servers.nats)  # this module's events only
    async with every_service(servers.settings(), presets) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


class Tenant:
    def __init__(self, base: str, key: str, name: str):
        self.base, self.key, self.name = base, key, name

    async def post(self, path: str, body: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=60, verify=TLS) as client:
            return await client.post(path, json=body,
                                      headers={"Authorization": f"Bearer {self.key}"})

    async def call(self, method: str, **params: Any) -> httpx.Response:
        return await self.post(f"/v1/rpc/{method}", params)

    async def rpc(self, method: str, **params: Any) -> Any:
        response = await self.call(method, **params)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    async def route(self, query: str, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self.rpc(
            "router.select_model", query=query, available_models=[SMALL, LARGE],
            default_model=SMALL, **params)
        return result


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)


async def new_tenant(base: str, pool: Any) -> Tenant:
    name = unique("opt")
    return Tenant(base, await create_key(pool, name), name)


@pytest_asyncio.fixture(scope="module")
async def logged(stack: str, pool: Any) -> Tenant:
    """A tenant whose default policy is the heuristic, and 320 queries routed by the GRPO
    policy (recorded with their propensities), each reported as a trace with its decision
    id and a reward drawn from the planted truth."""
    tenant = await new_tenant(stack, pool)
    await tenant.rpc("router.set_default_policy", policy="heuristic")
    rng = random.Random(11)
    gate = asyncio.Semaphore(8)

    async def one(n: int) -> dict[str, Any]:
        cls = "code" if n % 2 else "general"
        query = (CODE_QUERIES if cls == "code" else GENERAL_QUERIES)[n % 3]
        user = f"u{n % 4}"
        async with gate:
            decision = await tenant.route(query, policy="grpo", user_id=user)
        assert 0 < decision["propensity"] <= 1 and decision["query_class"] == cls
        model = decision["model"]
        feedback = min(1.0, max(0.0, rng.gauss(TRUTH[(cls, model)], 0.08)))
        t = T0 + n
        return {"type": "TraceCompleted", "user_id": user, "payload": {
            "trace_id": f"tr-{n}", "query": query, "agent": "assistant", "model": model,
            "engine": "vllm", "result": "done", "outcome": "success", "feedback": feedback,
            "started_at": t, "ended_at": t + 2, "total_tokens": 400,
            "total_latency_seconds": 2.0, "cost_usd": 0.002,
            "decision_id": decision["decision_id"],
            "steps": [{"step_type": "generate", "timestamp": t, "duration_seconds": 2.0,
                       "input": {"model": model},
                       "output": {"prompt_tokens": 300, "completion_tokens": 100},
                       "metadata": {"energy_joules": 40.0}}]}}

    traces = await asyncio.gather(*(one(n) for n in range(320)))
    for start in range(0, len(traces), 100):
        response = await tenant.post("/v1/events", traces[start:start + 100])
        assert response.status_code == 200, response.text
    # a trace reported without a decision is kept but joins nothing
    unrouted = dict(traces[0], payload={**traces[0]["payload"], "trace_id": "tr-free",
                                        "decision_id": None})
    assert (await tenant.post("/v1/events", [unrouted])).status_code == 200

    async def all_in() -> bool:
        found = await tenant.rpc("optimize.evaluate", params={})
        return bool(found["current"]["support"] >= 100)

    await until(all_in)
    return tenant


# ------------------------------------------------------------------ the acceptance

async def test_the_counterfactual_ranks_the_planted_configuration_first(logged: Tenant) -> None:
    configurations = [{"routing.model_for.code": c, "routing.model_for.general": g}
                      for c in (SMALL, LARGE) for g in (SMALL, LARGE)]
    found = [await logged.rpc("optimize.evaluate", params=p) for p in configurations]
    rewards = [f["estimate"]["metrics"]["reward"] for f in found]
    assert rewards.index(max(rewards)) == 0  # small for code, small for general
    today = found[0]["current"]
    assert today["refused"] is None
    # today: the heuristic sends code to the largest model
    planted = found[0]["estimate"]
    assert planted["intervals"]["reward"][0] > today["intervals"]["reward"][1]
    assert planted["support"] >= 60 and planted["refused"] is None
    # equal cost everywhere, so the estimates agree on it
    assert planted["metrics"]["cost_usd"] == pytest.approx(0.002)
    assert "energy_joules" not in planted["metrics"]  # not an objective: not estimated
    energy = await logged.rpc("optimize.evaluate", params=configurations[0], objectives=[
        {"metric": "energy_joules", "direction": "minimize"},
        {"metric": "tokens", "direction": "minimize"}])
    assert energy["estimate"]["metrics"] == {"energy_joules": pytest.approx(40.0),
                                             "tokens": pytest.approx(400.0)}
    assert found[0]["params"] == configurations[0]


async def test_a_random_run_finds_it_and_applying_it_changes_code_routing_only(
        logged: Tenant, stack: str, pool: Any) -> None:
    started = await logged.rpc("optimize.run", space=SPACE, proposer="random",
                               evaluator="counterfactual", max_trials=20, patience=20, seed=3)
    run_id = started["run_id"]

    async def ended() -> Any:
        status = await logged.rpc("optimize.status", run_id=run_id)
        return status if status["status"] != "running" else None

    status = await until(ended)
    assert status["status"] == "completed" and status["trials"] <= 20
    frontier = await logged.rpc("optimize.frontier", run_id=run_id, all=True)
    assert len(frontier["trials"]) == status["trials"] == 4  # the whole space, once each
    best = next(t for t in frontier["trials"] if t["best"])
    assert best["params"]["routing.model_for.code"] == SMALL
    assert best["trial_id"] == status["best_trial_id"] == frontier["best_trial_id"]
    assert all(t["proposer"] in ("random", "merge") for t in frontier["trials"])

    probes = [*CODE_QUERIES, *GENERAL_QUERIES, "hi", "Solve 2x + 3 = 11 for x."]
    before = [(await logged.route(q, record=False))["model"] for q in probes]
    other = await new_tenant(stack, pool)
    elsewhere = [(await other.route(q, record=False))["model"] for q in probes]

    applied = await logged.rpc("optimize.apply", run_id=run_id, trial_id=best["trial_id"])
    assert applied["version"] == 1 and applied["previous"] == {}
    assert applied["params"]["routing.model_for.code"] == SMALL
    after = [await logged.route(q, record=False) for q in probes]
    changed = {q for q, b, a in zip(probes, before, after, strict=True) if b != a["model"]}
    assert changed == set(CODE_QUERIES)  # the heuristic sent them to the largest model
    assert all(a["model"] == SMALL and a["configuration"] == 1 and a["reason"].startswith(
        "configured: code queries") for a in after[:len(CODE_QUERIES)])
    assert [(await other.route(q, record=False))["model"] for q in probes] == elsewhere
    current = await logged.rpc("optimize.configuration")
    assert current["version"] == 1 and current["trial_id"] == best["trial_id"]

    undone = await logged.rpc("optimize.undo", run_id=run_id, trial_id=best["trial_id"])
    assert undone["version"] == 2 and undone["undoes"] == 1 and undone["params"] == {}
    assert [(await logged.route(q, record=False))["model"] for q in probes] == before
    again = await logged.call("optimize.undo", run_id=run_id, trial_id=best["trial_id"])
    assert again.status_code == 409 and "already undone" in again.text


async def test_an_llm_run_reads_every_proposal_or_records_the_failure(logged: Tenant,
                                                                      llm: ScriptedLlm) -> None:
    asked = len(llm.requests)
    started = await logged.rpc(
        "optimize.run", space={**SPACE, "search": SPACE["search"][:1],
                               "fixed": {"routing.model_for.general": SMALL}},
        proposer="llm", max_trials=4, patience=10)

    async def ended() -> Any:
        status = await logged.rpc("optimize.status", run_id=started["run_id"])
        return status if status["status"] != "running" else None

    status = await until(ended)
    assert status["status"] == "completed", status
    trials = (await logged.rpc("optimize.frontier", run_id=started["run_id"],
                               all=True))["trials"]
    assert len(trials) == 4
    proposals = [r for r in llm.requests[asked:]
                 if str(r["messages"][0]["content"]).startswith("You tune")]
    assert len(proposals) == 4
    assert "Trials so far (3" in proposals[3]["messages"][1]["content"]
    failures = [t for t in trials if t["parse_failure"]]
    assert failures and all(t["params"] == {"routing.model_for.general": SMALL}
                            for t in failures)
    assert all("could not be read" in (t["reasoning"] or "") for t in failures)
    read = [t for t in trials if not t["parse_failure"]]
    assert read and all(t["params"]["routing.model_for.general"] == SMALL for t in read)
    assert any("(dropped colour: not in the search space)" in (t["reasoning"] or "")
               for t in read)


async def test_the_replay_evaluator_asks_the_model_under_the_configuration(
        logged: Tenant) -> None:
    benchmark = [{"query": "What is the capital of Australia? Answer in one sentence.",
                  "reference": "Canberra"}] * 3
    replay = {"benchmark": benchmark, "models": [SMALL, LARGE]}
    small = await logged.rpc("optimize.evaluate", evaluator="replay", replay=replay,
                             params={"routing.model_for.general": SMALL,
                                     "generation.temperature": 0.3},
                             objectives=[{"metric": "accuracy", "direction": "max"},
                                         {"metric": "latency_seconds", "direction": "min"},
                                         {"metric": "tokens", "direction": "min"}])
    large = await logged.rpc("optimize.evaluate", evaluator="replay", replay=replay,
                             params={"routing.model_for.general": LARGE},
                             objectives=[{"metric": "accuracy", "direction": "max"}])
    assert small["estimate"]["metrics"]["accuracy"] == 1.0
    assert small["estimate"]["metrics"]["tokens"] == 52.0
    assert small["estimate"]["metrics"]["latency_seconds"] > 0
    assert small["estimate"]["support"] == 3 and small["current"] is None
    assert large["estimate"]["metrics"]["accuracy"] == 0.0
    judged = await logged.rpc(
        "optimize.evaluate", evaluator="replay", params={},
        replay={"benchmark": [{"query": "Write a haiku about autumn."}],
                "judge_model": "grader", "models": [SMALL]},
        objectives=[{"metric": "accuracy", "direction": "max"}])
    assert judged["estimate"]["metrics"]["accuracy"] == 0.75


async def test_trace_queries_are_sealed_at_rest_and_a_replay_of_the_log_asks_them_opened(
        logged: Tenant, pool: Any, llm: ScriptedLlm) -> None:
    queries = {(CODE_QUERIES if n % 2 else GENERAL_QUERIES)[n % 3] for n in range(320)}

    async def stored() -> list[tuple[str, str]]:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT user_id, query FROM optimize.outcomes "
                                     "WHERE tenant_id = %s", (logged.name,))
            rows = await cur.fetchall()
        return rows if len(rows) == 321 else []

    raw = await until(stored)
    # what the users asked holds nothing readable on disk. Words of five letters or more: a
    # sealed value is base64, where a three-letter word turns up by chance ("...RJoVcsvgIZ..."
    # held "csv" in one run, about one run in a hundred)
    for _, query in raw:
        assert query.startswith("hc1:") and not any(
            word in query for word in ("parse", "reader", "header", "Lisbon", "offsite")), query
    assert {COLUMNS.open(logged.name, user, query) for user, query in raw} == queries
    # four users asked the same six queries: the replay asks each once, as it was asked
    before = len(llm.requests)
    replayed = await logged.rpc("optimize.evaluate", evaluator="replay", params={},
                                replay={"sample": 20, "models": [SMALL]},
                                objectives=[{"metric": "latency_seconds", "direction": "min"}])
    assert replayed["estimate"]["support"] == len(queries)
    asked = [m["content"] for body in llm.requests[before:] for m in body["messages"]
             if m["role"] == "user" and m["content"] in queries]
    assert sorted(asked) == sorted(queries)


def _outcome(tenant: str, user: str, n: int, query: str) -> store.OutcomeRow:
    return store.OutcomeRow(
        tenant_id=tenant, user_id=user, trace_id=f"tr-{n}", decision_id=None, seq=n,
        query=query, query_class="general", has_code=False, has_math=False,
        has_reasoning=False, query_length=len(query), model=SMALL, outcome="success",
        feedback=None, latency_seconds=1.0, cost_usd=None, tokens=10, prompt_tokens=None,
        completion_tokens=None, energy_joules=None, started_at=T0 + n)


async def test_recent_queries_are_distinct_across_users_and_pass_an_erased_user_over(
        pool: Any) -> None:
    """Read by the tenant across users: the same query asked by four users is one (told
    apart only once opened, so the page grows past duplicates), and a user whose keys were
    destroyed while a run reads (erasure shreds before it deletes) is left out, not a
    failure of the replay."""
    assert COLUMNS.keyring is not None
    tenant = unique("opt")
    rows = [_outcome(tenant, user, 4 * i + j, query)
            for i, query in enumerate(GENERAL_QUERIES)
            for j, user in enumerate(("ana", "bob", "cy", "zoe"))]
    secret = "Zoe's own question about the Nightingale merger"
    rows.append(_outcome(tenant, "zoe", len(rows), secret))
    async with pool.connection() as conn, conn.cursor() as cur:
        await store.insert_outcomes(cur, rows)
    newest_first = [secret, *reversed(GENERAL_QUERIES)]

    async def recent(limit: int) -> list[str]:
        async with pool.connection() as conn, conn.cursor() as cur:
            return [q for q, _, _ in await store.recent_queries(cur, tenant, limit, None, None)]

    assert await recent(2) == newest_first[:2]
    assert await recent(3) == newest_first[:3]
    assert await recent(10) == newest_first
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT query FROM optimize.outcomes WHERE tenant_id = %s "
                                 "AND user_id = 'zoe'", (tenant,))
        assert all(r[0].startswith("hc1:") and "Nightingale" not in r[0]
                   for r in await cur.fetchall())
    COLUMNS.keyring.destroy(tenant, "zoe")
    assert await recent(10) == newest_first[1:]


# ------------------------------------------------------------------ the edges

async def test_bad_runs_are_refused_with_the_field_and_nothing_starts(logged: Tenant) -> None:
    before = await logged.rpc("optimize.runs")
    bad = await logged.call("optimize.run", space={"search": [
        {"name": "routing.speed", "values": ["fast"]}]})
    assert bad.status_code == 400 and "routing.speed: unknown setting" in bad.text
    bad = await logged.call("optimize.run", space=SPACE, max_trials=0)
    assert bad.status_code == 400 and "max_trials" in bad.text
    assert await logged.rpc("optimize.runs") == before
    missing = await logged.call("optimize.status", run_id="nope")
    assert missing.status_code == 404
    bad_apply = await logged.call("optimize.apply", run_id="nope", trial_id="nope-t0")
    assert bad_apply.status_code == 404


async def test_a_run_with_no_log_refuses_and_cannot_be_applied(stack: str, pool: Any) -> None:
    empty = await new_tenant(stack, pool)
    run = await empty.rpc("optimize.run", space=SPACE, max_trials=2)

    async def ended() -> Any:
        status = await empty.rpc("optimize.status", run_id=run["run_id"])
        return status if status["status"] != "running" else None

    status = await until(ended)
    assert status["best_trial_id"] is None and status["frontier"] == []
    trials = (await empty.rpc("optimize.frontier", run_id=run["run_id"], all=True))["trials"]
    assert trials and all(t["refused"].startswith("no recorded decision") for t in trials)
    refused = await empty.call("optimize.apply", run_id=run["run_id"],
                               trial_id=trials[0]["trial_id"])
    assert refused.status_code == 409 and "no estimate" in refused.text
    # another tenant's run is not this tenant's
    assert (await empty.call("optimize.status", run_id="r" + "0" * 23)).status_code == 404


async def test_a_stopped_run_ends_and_says_why(logged: Tenant) -> None:
    run = await logged.rpc("optimize.run", space={"search": [
        {"name": "generation.temperature", "type": "continuous", "low": 0, "high": 1}]},
        max_trials=500, patience=500)
    stopped = await logged.rpc("optimize.stop", run_id=run["run_id"], reason="enough")
    assert stopped["status"] == "stopped" and stopped["reason"] == "enough"
    again = await logged.call("optimize.stop", run_id=run["run_id"])
    assert again.status_code == 409
    await asyncio.sleep(1.0)
    later = await logged.rpc("optimize.status", run_id=run["run_id"])
    assert later["status"] == "stopped" and later["trials"] < 500
    listed = [r["run_id"] for r in (await logged.rpc("optimize.runs"))["runs"]]
    assert listed[0] == run["run_id"]
    assert json.dumps(later)  # plain JSON all the way


# ------------------------------------------------------------------ the command line

async def test_the_command_line_runs_follows_exports_applies_and_undoes(
        logged: Tenant, servers: ServerUrls, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from habitus.cli import app
    from habitus.config import get_settings

    definition = tmp_path / "run.toml"
    definition.write_text(
        '[optimize]\nsearch = [\n'
        f'  {{ name = "routing.model_for.code", type = "categorical", values = ["{SMALL}", '
        f'"{LARGE}"] }},\n]\n[optimize.fixed]\n"routing.model_for.general" = "{SMALL}"\n')

    async def habitus(*args: str) -> Any:
        environment = {**servers.env(), "COLUMNS": "200", "HABITUS_GATEWAY_URL": None,
                       "HABITUS_URL": logged.base, "HABITUS_API_KEY": logged.key}

        def invoke() -> Any:
            get_settings.cache_clear()
            try:
                return CliRunner().invoke(app, list(args), env=environment,
                                          catch_exceptions=False)
            finally:
                get_settings.cache_clear()

        return await asyncio.to_thread(invoke)

    ran = await habitus("optimize", "run", str(definition), "--objective", "reward:max",
                        "--objective", "cost_usd:min:0.5", "--max-trials", "5", "--json")
    assert ran.exit_code == 0, ran.output
    status = json.loads(ran.output[ran.output.index("{"):])
    assert status["status"] == "completed" and status["trials"] == 2
    run_id, best = status["run_id"], status["best_trial_id"]
    shown = await habitus("optimize", "frontier", run_id, "--all")
    assert shown.exit_code == 0 and best in shown.output and "best" in shown.output
    exported = tmp_path / "chosen.toml"
    out = await habitus("optimize", "export", run_id, "-o", str(exported))
    assert out.exit_code == 0, out.output
    written = tomllib.loads(exported.read_text())
    assert written["source"] == {"run_id": run_id, "trial_id": best}
    assert written["configuration"] == {"routing.model_for.code": SMALL,
                                        "routing.model_for.general": SMALL}
    applied = await habitus("optimize", "apply", run_id, best)
    assert applied.exit_code == 0 and f'routing.model_for.code = "{SMALL}"' in applied.output
    undone = await habitus("optimize", "undo", run_id, best)
    assert undone.exit_code == 0 and "routing.model_for.code" not in undone.output
    refused = await habitus("optimize", "undo", run_id, best)
    assert refused.exit_code == 2 and "already undone" in refused.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"space": {"search": [{"name": "routing.speed", "values": [1]}]}}')
    wrong = await habitus("optimize", "run", str(bad))
    assert wrong.exit_code == 2 and "routing.speed: unknown setting" in wrong.output
    listed = await habitus("optimize", "runs")
    assert listed.exit_code == 0 and run_id in listed.output
    # by hand: set two settings, read them back, remove one; a wrong value names its path
    changed = await habitus("optimize", "set", "routing.policy=bandit",
                            "generation.temperature=0.2")
    assert changed.exit_code == 0, changed.output
    assert 'routing.policy = "bandit"' in changed.output
    assert "generation.temperature = 0.2" in changed.output
    removed = await habitus("optimize", "set", "generation.temperature=null")
    assert removed.exit_code == 0 and "generation.temperature" not in removed.output
    shown = await habitus("optimize", "configuration", "--json")
    assert json.loads(shown.output)["params"] == {"routing.policy": "bandit"}
    hot = await habitus("optimize", "set", "generation.temperature=9")
    assert hot.exit_code == 2 and "generation.temperature" in hot.output
    malformed = await habitus("optimize", "set", "routing.policy")
    assert malformed.exit_code == 2 and "expected path=value" in malformed.output


# ------------------------------------------------------------------ the behaviour loop

async def test_prompts_carry_worked_examples_of_the_requests_class_once_opted_in(
        stack: str, pool: Any) -> None:
    tenant = await new_tenant(stack, pool)
    other = await new_tenant(stack, pool)

    def coded(user: str, n: int, query: str, feedback: float) -> dict[str, Any]:
        t = T0 + n
        return {"type": "TraceCompleted", "user_id": user, "payload": {
            "trace_id": f"ex-{n}", "query": query, "agent": "coder", "model": SMALL,
            "engine": "vllm", "result": f"Use csv.DictReader and skip blank rows ({n}).",
            "outcome": "success", "feedback": feedback, "started_at": t, "ended_at": t + 1,
            "total_tokens": 100, "total_latency_seconds": 1.0,
            "steps": [{"step_type": "tool_call", "timestamp": t, "duration_seconds": 0.2,
                       "input": {"tool": name}, "output": {"success": True}}
                      for name in ("search", "python")]}}

    mine = [coded("ana", n, q, fb) for n, (q, fb) in enumerate([
        (CODE_QUERIES[0], 0.95), (CODE_QUERIES[1], 0.9), (CODE_QUERIES[2], 0.8),
        (CODE_QUERIES[3], 0.4), (GENERAL_QUERIES[0], 1.0)])]
    assert (await tenant.post("/v1/events", mine)).status_code == 200
    theirs = [coded("ana", 50 + n, f"import secrets  # other tenant's query {n}", 1.0)
              for n in range(3)]
    assert (await other.post("/v1/events", theirs)).status_code == 200

    async def stored() -> bool:
        return bool((await tenant.rpc("traces.summary"))["traces"] == 5 and
                    (await other.rpc("traces.summary"))["traces"] == 3)

    await until(stored)
    request = "def merge(a, b): why does this drop keys?"
    plain = await tenant.rpc("prompt.context", user_id="ana", request=request)
    assert "examples" not in [s["name"] for s in plain["sections"]]  # not opted in

    asked = await tenant.rpc("prompt.context", user_id="ana", request=request, examples=2,
                             skills=True)
    section = next(s["content"] for s in asked["sections"] if s["name"] == "examples")
    assert section.startswith("Worked examples of similar code requests")
    assert CODE_QUERIES[0][:30] in section and CODE_QUERIES[1][:30] in section
    assert CODE_QUERIES[3][:30] not in section  # rated 0.4: not an example
    assert GENERAL_QUERIES[0] not in section  # another class
    assert "other tenant" not in section
    assert "Answer began: Use csv.DictReader" in section
    assert "- search -> python (worked 3 times)" in section
    assert section in asked["text"]
    tight = await tenant.rpc("prompt.context", user_id="ana", request=request, examples=3,
                             skills=True, budget_chars=len(plain["text"]) + 300)
    assert len(tight["text"]) <= len(plain["text"]) + 300
    nobody = await tenant.rpc("prompt.context", user_id="ben", request=request, examples=2)
    assert "examples" not in [s["name"] for s in nobody["sections"]]

    # the tenant's configuration turns it on for every request (and off again)
    configured = await tenant.rpc("optimize.configure",
                                  params={"prompt.examples": 1, "prompt.skills": True})
    assert configured["version"] == 1 and configured["run_id"] is None
    default = await tenant.rpc("prompt.context", user_id="ana", request=request)
    section = next(s["content"] for s in default["sections"] if s["name"] == "examples")
    assert section.count("- Request:") == 1 and "search -> python" in section
    assert (await other.rpc("optimize.configuration"))["version"] == 0
    bad = await tenant.call("optimize.configure", params={"prompt.examples": 99})
    assert bad.status_code == 400 and "prompt.examples: must be at most 10" in bad.text
    off = await tenant.rpc("optimize.configure", params={"prompt.examples": None,
                                                         "prompt.skills": None})
    assert off["version"] == 2 and off["params"] == {}
    default = await tenant.rpc("prompt.context", user_id="ana", request=request)
    assert "examples" not in [s["name"] for s in default["sections"]]
