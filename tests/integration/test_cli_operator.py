"""The operator commands of `habitus` (Typer's CliRunner, in a thread) against real servers:
facets, profile, habits and route through the gateway with an API key; events tail, lag and the
DLQ on the bus and the database; and the errors an operator meets (no gateway, a refused
request)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio
from click.testing import Result
from typer.testing import CliRunner

from habitus.auth.keys import create_key
from habitus.bus.streams import DLQ, EVENTS, INGEST
from habitus.cli import app
from habitus.client.items import trace as trace_item
from habitus.client.items import wire_item
from habitus.config import get_settings
from habitus.events import Event
from habitus.projection import ApplyContext, Delivered
from habitus.service.migrations import migrate
from habitus.subjects import ingest_subject, parse_subject
from services.producers.main import build as producers
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from services.trace_router.main import build as trace_router
from tests.conftest import ServerUrls
from tests.integration.runner_support import eventually, new_tally, publish, run_to_end
from tests.support.factories import turn, unique
from tests.support.habits_model import ANALYZE, Observations, habit, proposals, refs
from tests.support.habits_stack import Client, Stack, habits_stack, observed
from tests.support.services import running
from tests.support.tally import PoisonError, TallyProjection, read_counts

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
RUNNER = CliRunner()


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[Stack]:
    """The gateway, habits and profile renderer (habits_stack), plus the producers, the
    learning cache and the router."""
    migrate(servers.database)
    # short leases: a repartition is taken up at the services' next renewal (a third of it)
    settings = servers.settings().model_copy(update={"lease_seconds": 1.5})
    async with AsyncExitStack() as services:
        for spec in (producers(), learning(LearningSettings(scheduler_enabled=False)),
                     trace_router()):
            await services.enter_async_context(running(spec, settings))
        yield await services.enter_async_context(habits_stack(servers))


@pytest_asyncio.fixture
async def acme(stack: Stack, pool: Any) -> Client:
    tenant = unique("ops")
    return Client(stack.base, await create_key(pool, tenant), tenant)


async def habitus(servers: ServerUrls, *args: str, client: Client | None = None,
                  env: dict[str, str] | None = None) -> Result:
    """Run `habitus <args>` in a thread (the commands run their own event loop), with the
    servers' URLs, and the client's gateway and key."""
    environment = {**servers.env(), "COLUMNS": "200", "HABITUS_GATEWAY_URL": None,
                   **({"HABITUS_URL": client.base, "HABITUS_API_KEY": client.key}
                      if client else {}), **(env or {})}

    def invoke() -> Result:
        get_settings.cache_clear()
        try:
            return RUNNER.invoke(app, list(args), env=environment, catch_exceptions=False)
        finally:
            get_settings.cache_clear()

    return await asyncio.to_thread(invoke)


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def as_json(result: Result) -> Any:
    return json.loads(ok(result))


# --------------------------------------------------------------------------- facets, profile


async def learned(servers: ServerUrls, acme: Client, user: str) -> list[dict[str, Any]]:
    """Explicit statements through the gateway, then the cache rebuilt, until a facet shows."""
    now = time.time() - 3600
    items = []
    for i in range(6):
        t = now + 400 * i
        items.append({"type": "TurnRecorded", "user_id": user, "payload": {
            "session_id": "s1", "turn_id": f"t{i}", "channel": "web",
            "user_message": "too long, shorter please", "assistant_message": "x" * 100,
            "user_at": t, "assistant_at": t + 5, "previous_assistant_at": t - 5}})
    await acme.send(*items)

    async def facets() -> list[dict[str, Any]]:
        await acme.rpc("learning.rebuild_cache", user_id=user)
        return list(as_json(await habitus(servers, "facets", "list", "--user", user, "--json",
                                          client=acme))["facets"])

    found: list[dict[str, Any]] = []

    async def some() -> bool:
        found[:] = await facets()
        return any(f["key"] == "verbosity" for f in found)

    await eventually(some, timeout=30, interval=0.3)
    return found


async def test_facets_list_explain_pin_unpin_forget(servers: ServerUrls, acme: Client) -> None:
    user = unique("ana")
    facets = await learned(servers, acme, user)
    verbosity = next(f for f in facets if f["key"] == "verbosity")
    assert verbosity["class"] == "style" and verbosity["value"] == "terse"

    table = ok(await habitus(servers, "facets", "list", "--user", user, client=acme))
    assert "verbosity" in table and "terse" in table and verbosity["state"] in table

    ref = ("--user", user, "style/verbosity")
    explained = ok(await habitus(servers, "facets", "explain", *ref, client=acme))
    assert "style/verbosity" in explained and "explicit" in explained and "x cue mix" in explained
    explained_json = as_json(await habitus(servers, "facets", "explain", *ref, "--json",
                                           client=acme))
    assert explained_json["value"] == "terse"
    assert {f["family"] for v in explained_json["values"] for f in v["families"]} >= {
        "explicit"}

    pinned = ok(await habitus(servers, "facets", "pin", *ref, client=acme))
    assert "style/verbosity = terse" in pinned and "pinned" in pinned
    listed = as_json(await habitus(servers, "facets", "list", "--user", user, "--json",
                                   client=acme))["facets"]
    assert next(f for f in listed if f["key"] == "verbosity")["pinned"] is True

    unpinned = ok(await habitus(servers, "facets", "unpin", *ref, client=acme))
    assert "style/verbosity" in unpinned and "pinned" not in unpinned

    forgotten = ok(await habitus(servers, "facets", "forget", *ref, client=acme))
    assert "forgotten" in forgotten
    listed = as_json(await habitus(servers, "facets", "list", "--user", user, "--json",
                                   client=acme))["facets"]
    assert all(f["key"] != "verbosity" or f["user_state"] == "forgotten" for f in listed)


async def test_profile_show_renders_the_markdown(servers: ServerUrls, acme: Client) -> None:
    user = unique("bo")
    await acme.rpc("learning.update_facet", user_id=user, **{"class": "style"},
                   key="tone", value="formal")
    raw = await acme.rpc("profile.get", user_id=user)
    assert "tone" in raw["markdown"]

    shown = ok(await habitus(servers, "profile", "show", "--user", user, client=acme))
    assert f"{user}: version {raw['version']}" in shown
    assert "tone" in shown and "formal" in shown
    assert "**" not in shown  # rendered, not the markdown source
    assert ok(await habitus(servers, "profile", "show", "--user", user, "--raw",
                            client=acme)).rstrip("\n") == raw["markdown"].rstrip("\n")


async def test_context_prints_the_sections_an_agent_gets(servers: ServerUrls, acme: Client
                                                         ) -> None:
    """A plain statement, once, reaches `habitus context` as it reaches an agent's prompt."""
    user = unique("eve")
    at = time.time() - 600
    await acme.send({"type": "TurnRecorded", "user_id": user, "payload": {
        "session_id": "s1", "turn_id": "t1", "channel": "web",
        "user_message": "Please don't pad answers with an introduction, just get to it.",
        "assistant_message": "Understood.", "user_at": at, "assistant_at": at + 3}})
    stated = "**style/preamble**: skip"
    answer: dict[str, Any] = {}

    async def in_context() -> bool:
        await acme.rpc("learning.rebuild_cache", user_id=user)
        answer.update(as_json(await habitus(servers, "context", "--user", user, "--json",
                                            client=acme)))
        return stated in answer["text"]

    await eventually(in_context, timeout=30, interval=0.3)
    assert answer == await acme.rpc("prompt.context", user_id=user)  # --json: the raw result
    shown = ok(await habitus(servers, "context", "--user", user, "--tools", "",
                             "--unconfirmed", "--tenant", acme.tenant, client=acme))
    profile = next(s for s in answer["sections"] if s["name"] == "user_profile")
    assert f"-- user_profile --\n{profile['content'].rstrip()}\n" in shown
    assert stated in shown and f"{user}: PROFILE.md version" in shown


# --------------------------------------------------------------------------- habits


async def test_habits_review_numbers_duplicates_and_approve_reject_by_number_or_id(
        servers: ServerUrls, stack: Stack, acme: Client, pool: Any) -> None:
    x, near, far = [1.0, 0.0, 0.0], [0.95, 0.3122498999, 0.0], [0.0, 0.0, 1.0]
    code = ("When I ask for a code review", "Point out the missing tests")
    again = ("When I request a review of my code", "Mention any tests that are missing")
    notes = ("When I ask for release notes", "Group the changes by component")
    stack.embedder.fix({code[0]: x, code[1]: x, again[0]: near, again[1]: near,
                        notes[0]: far, notes[1]: far})
    user, marker = unique("cy"), unique("mk")
    await acme.declare(user, *code)  # active at once
    said = [f"Review my change and tell me which tests are missing {marker}",
            f"Group the release notes by component please {marker}",
            f"Again: which tests are missing, and notes by component {marker}"]
    await acme.send(acme.turn(user, said[0], days_ago=1.2), acme.turn(user, said[1]),
                    acme.turn(user, said[2]))
    await observed(pool, acme.tenant, user, 3)

    def two(obs: Observations) -> dict[str, Any]:
        return proposals(habit(*again, refs(obs, said[0], said[2])),
                         habit(*notes, refs(obs, said[1], said[2])))

    stack.model.script(marker, ANALYZE, two)
    assert (await acme.rpc("habits.analyze", user_id=user))["suggested"] == 2

    listed = ok(await habitus(servers, "habits", "list", "--user", user, client=acme))
    assert "Point out the missing tests" in listed and "active" in listed

    review = as_json(await habitus(servers, "habits", "review", "--user", user, "--json",
                                   client=acme))
    by_text = {item["habit"]["do"]: item for item in review["items"]}
    assert set(by_text) >= {again[1], notes[1]}
    shown = ok(await habitus(servers, "habits", "review", "--user", user, client=acme))
    for item in review["items"]:
        when, do = item["text"].splitlines()
        assert f"{item['number']}. {when}\n   {do}\n" in shown
        for n in item["duplicates"]:
            assert f"#{n}" in shown

    number = by_text[notes[1]]["number"]
    approved = ok(await habitus(servers, "habits", "approve", "--user", user, str(number),
                                client=acme))
    assert "approve:" in approved and notes[1] in approved
    after = {h["do"]: h for h in await acme.habits(user)}
    assert after[notes[1]]["approved"] is True

    rejected = ok(await habitus(servers, "habits", "reject", "--user", user, "--habit",
                                after[again[1]]["habit_id"], "--reason", "a duplicate",
                                client=acme))
    assert "-> rejected" in rejected
    assert {h["do"]: h for h in await acme.habits(user)}[again[1]]["review_status"] \
        == "rejected"

    missing = await habitus(servers, "habits", "approve", "--user", user, "99", client=acme)
    assert missing.exit_code == 2 and "no habit numbered 99" in missing.output
    both = await habitus(servers, "habits", "approve", "--user", user, client=acme)
    assert both.exit_code == 2 and "review number or --habit" in both.output


# --------------------------------------------------------------------------- route


async def test_route_picks_from_the_models_given(servers: ServerUrls, acme: Client) -> None:
    query = "Fix this Python bug: def f(x): return x +"
    chosen = as_json(await habitus(servers, "route", query, "--models",
                                   "qwen3:8b,deepseek-coder-v2:16b", "--user", "u1", "--json",
                                   client=acme))
    assert chosen["model"] in ("qwen3:8b", "deepseek-coder-v2:16b")
    assert chosen["query_class"] == "code"
    line = ok(await habitus(servers, "route", query, "--models", "small-model,big-coder",
                            client=acme))
    assert "code" in line and "decision " in line


async def test_route_ignores_the_order_of_models_and_follows_recorded_traces(
        servers: ServerUrls, acme: Client) -> None:
    # Once `--models gpt-4o-mini,gpt-4o` answered gpt-4o-mini and the reverse gpt-4o, and 24
    # traces of gpt-4o-mini failing on code did not change the default answer.
    query = "Why does this Python function raise a KeyError? def f(d): return d['x']"

    async def both_orders() -> dict[str, Any]:
        """One answer for both orders. The router reads a tenant's state anew at most every
        second, so a pair of calls may straddle new traces: asked again, they agree."""
        for _ in range(5):
            answers = [as_json(await habitus(servers, "route", query, "--models", models,
                                             "--json", client=acme))
                       for models in ("gpt-4o-mini,gpt-4o", "gpt-4o,gpt-4o-mini")]
            for answer in answers:
                answer.pop("decision_id")
            if answers[0] == answers[1]:
                return answers[0]
            await asyncio.sleep(1.1)
        raise AssertionError(f"the order of the models changed the answer: {answers}")

    cold = await both_orders()
    assert (cold["model"], cold["query_class"]) == ("gpt-4o", "code")
    assert cold["reason"].startswith("heuristic (only 0 code traces"), cold["reason"]
    assert "gpt-4o $12.50 per 1M tokens vs gpt-4o-mini $0.75 per 1M tokens" in cold["reason"]

    # this tenant's traces say the opposite of the price: the small model wins on code
    await acme.send(*(wire_item(trace_item(
        "u1", f"{query} #{n}", "ok" if good else "wrong", agent="coder", model=model,
        outcome="success" if good else "failure", feedback=0.9 if good else 0.2))
        for n in range(12) for model, good in (("gpt-4o-mini", True), ("gpt-4o", False))))

    deadline = time.monotonic() + 30
    warm = await both_orders()
    while not warm["reason"].startswith("learned from"):
        assert time.monotonic() < deadline, warm
        await asyncio.sleep(0.5)
        warm = await both_orders()
    assert warm["model"] == "gpt-4o-mini"
    assert warm["reason"].startswith("learned from 24 code traces: gpt-4o-mini "), warm["reason"]
    line = ok(await habitus(servers, "route", query, "--models", "gpt-4o,gpt-4o-mini",
                            client=acme))
    assert line.startswith("gpt-4o-mini  (learned, code): learned from 24 code traces"), line


# --------------------------------------------------------------------------- errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_gateway_down_says_so_and_how_to_start_it(servers: ServerUrls, acme: Client
                                                        ) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    for args in (("facets", "list", "--user", "u1"), ("profile", "show", "--user", "u1"),
                 ("habits", "review", "--user", "u1"), ("route", "hi", "--models", "a"),
                 ("rules", "list"), ("traces", "stats")):
        result = await habitus(servers, *args, client=acme, env={"HABITUS_URL": down})
        assert result.exit_code == 2, (args, result.output)
        assert f"cannot reach the gateway at {down}" in result.output
        assert "habitus up" in result.output and "Traceback" not in result.output
    # the older variable and --url are honoured too
    old = await habitus(servers, "facets", "list", "--user", "u1", client=acme,
                        env={"HABITUS_URL": None, "HABITUS_GATEWAY_URL": down})
    assert old.exit_code == 2 and down in old.output
    flag = await habitus(servers, "facets", "list", "--user", "u1", "--url", down,
                         client=acme)
    assert flag.exit_code == 2 and down in flag.output


async def test_a_refused_request_prints_the_gateways_message_naming_the_field(
        servers: ServerUrls, acme: Client) -> None:
    bad_class = await habitus(servers, "facets", "explain", "--user", "u1", "nope/k",
                              client=acme)
    assert bad_class.exit_code == 2, bad_class.output
    assert "learning.explain_facet: 400" in bad_class.output and "class" in bad_class.output
    bad_user = await habitus(servers, "profile", "show", "--user", "not a user", client=acme)
    assert bad_user.exit_code == 2 and "user_id" in bad_user.output
    bad_key = await habitus(servers, "facets", "list", "--user", "u1", client=acme,
                            env={"HABITUS_API_KEY": "hab_nope"})
    assert bad_key.exit_code == 2 and "401" in bad_key.output


# --------------------------------------------------------------------------- events tail


async def test_events_tail_prints_one_line_per_event(servers: ServerUrls, acme: Client,
                                                     nc: Any) -> None:
    user = unique("dee")
    for n in range(3):
        await acme.rpc("learning.update_facet", user_id=user, **{"class": "style"},
                       key=f"k{n}", value=f"v{n}")
    lines = ok(await habitus(servers, "events", "tail", "--from-start", "--tenant",
                             acme.tenant, "--user", user, "--type", "FacetUpdated",
                             "--count", "3", "--timeout", "30")).splitlines()
    assert len(lines) == 3
    for n, line in enumerate(lines):
        at, seq, kind, owner, payload = line.split("  ", 4)
        assert at.endswith("Z") and seq.isdigit()
        assert (kind, owner) == ("FacetUpdated", f"{acme.tenant}/{user}")
        assert f'"key":"k{n}"' in payload

    # from now: only what is published after the subscription. The first tail's consumer
    # may not be deleted yet: the live one is a consumer that was not there before.
    async def tenant_consumers() -> set[str]:
        consumers = await nc.jetstream().consumers_info(EVENTS)
        return {c.name for c in consumers if acme.tenant in str(c.config.filter_subject)}

    before = await tenant_consumers()

    async def subscribed() -> bool:
        return bool(await tenant_consumers() - before)

    # Filtered by type: the profile renderer may still be publishing its CacheRebuilt for
    # the three facets above, after the subscription, and that is not what is looked for.
    live = asyncio.create_task(habitus(servers, "events", "tail", "--tenant", acme.tenant,
                                       "--type", "FacetUpdated", "--count", "1",
                                       "--timeout", "30"))
    await eventually(subscribed, timeout=20, interval=0.1)
    await acme.rpc("learning.update_facet", user_id=user, **{"class": "style"}, key="late",
                   value="now")
    [line] = ok(await live).splitlines()
    assert "FacetUpdated" in line and '"key":"late"' in line

    bad = await habitus(servers, "events", "tail", "--type", "a.b", "--count", "1")
    assert bad.exit_code == 2 and "--type 'a.b'" in bad.output


# --------------------------------------------------------------------------- lag and dlq


async def checkpoint_rows(pool: Any, schemas: set[str]) -> dict[tuple[str, str], int]:
    out = {}
    async with pool.connection() as conn:
        for schema in schemas:
            cur = await conn.execute(
                f"SELECT projection, last_seq FROM {schema}.projection_checkpoints")
            out.update({(schema, p): int(s) for p, s in await cur.fetchall()})
    return out


async def test_lag_matches_the_checkpoints_and_the_dlq(servers: ServerUrls, acme: Client,
                                                       pool: Any, nc: Any) -> None:
    await acme.rpc("learning.update_facet", user_id="u1", **{"class": "style"}, key="tone",
                   value="dry")
    for _ in range(20):  # the services settle: the checkpoints do not move while it reads
        before = await checkpoint_rows(pool, {"learning", "profile", "producers"})
        rows = as_json(await habitus(servers, "lag", "--json"))
        after = await checkpoint_rows(pool, {"learning", "profile", "producers"})
        if before == after:
            break
        await asyncio.sleep(0.5)
    assert before == after
    by_name = {r["projection"]: r for r in rows}
    assert {"learning.cache", "producers.candidates"} <= set(by_name)
    for row in rows:
        if (row["schema"], row["projection"]) in after:
            assert row["checkpoint"] == after[(row["schema"], row["projection"])], row
    js = nc.jetstream()
    dlq = await js.stream_info(DLQ, subjects_filter="habitus.v1.dlq.>")
    for name in ("learning.cache", "producers.candidates"):
        row = by_name[name]
        assert row["behind"] == 0, row  # running and idle: caught up
        assert row["pending"] == 0 and row["ack_pending"] == 0, row
        assert row["dead_letters"] == sum(
            n for s, n in (dlq.state.subjects or {}).items()
            if s.split(".")[3] == row["durable"])
    assert by_name["learning.cache"]["stream"] == EVENTS
    assert by_name["producers.candidates"]["stream"] == INGEST

    table = ok(await habitus(servers, "lag"))
    assert "learning.cache" in table and "checkpoint" in table
    unknown = await habitus(servers, "lag", "no.such")
    assert unknown.exit_code == 2 and "unknown projection" in unknown.output


class PoisonUntilHealed(TallyProjection):
    """The tally, whose POISON event fails until `healed` (the operator fixed the cause)."""

    healed = False

    async def apply_batch(self, cur: Any, batch: Sequence[Delivered], ctx: ApplyContext
                          ) -> None:
        if not self.healed:
            await super().apply_batch(cur, batch, ctx)
            return
        for d in batch:
            await cur.execute(f"INSERT INTO {self.schema}.seen (event_id, seq, user_id) "
                              "VALUES (%s, %s, %s)", (d.event.event_id, d.seq, d.event.user_id))
            await cur.execute(
                f"""INSERT INTO {self.schema}.counts (tenant_id, user_id, n) VALUES (%s, %s, 1)
                    ON CONFLICT (tenant_id, user_id) DO UPDATE SET n = counts.n + 1""",
                (d.event.tenant_id, d.event.user_id))


async def test_dlq_list_and_replay_the_consumer_sees_it_again(servers: ServerUrls, pool: Any,
                                                              nc: Any) -> None:
    plain, tenant = await new_tally(pool)
    projection = PoisonUntilHealed(plain.schema, tenant)
    poison: Event[Any] = turn(tenant, "u1", "POISON")
    acks = await publish(nc, [turn(tenant, "u1"), poison, turn(tenant, "u2")])
    await run_to_end(projection, nc, pool)
    assert await read_counts(pool, projection.schema) == {"u1": 1, "u2": 1}

    durable = projection.durable
    [letter] = as_json(await habitus(servers, "dlq", "list", "--consumer", durable, "--json"))
    assert letter["reason"] == "apply_failed" and PoisonError.__name__ in letter["detail"]
    # as the stream stored it (with the partition slots); replayed on the published subject
    published = parse_subject(letter["original_subject"]).published
    assert published == ingest_subject("turn", tenant, "u1")
    assert letter["original_seq"] == acks[1].seq and letter["event_id"] == poison.event_id
    table = ok(await habitus(servers, "dlq", "list", "--consumer", durable))
    assert str(letter["seq"]) in table and "apply_failed" in table

    lag = as_json(await habitus(servers, "lag", "--json"))
    assert all(r["dead_letters"] >= 0 for r in lag)

    # fixed: the replay sends it back, the projection applies it, the DLQ forgets it
    projection.healed = True
    replayed = as_json(await habitus(servers, "dlq", "replay", "--consumer", durable, "--json"))
    assert [(r["dlq_seq"], r["subject"], r["duplicate"]) for r in replayed] == [
        (letter["seq"], published, False)]
    assert replayed[0]["seq"] > acks[-1].seq
    assert as_json(await habitus(servers, "dlq", "list", "--consumer", durable, "--json")) == []
    await run_to_end(projection, nc, pool)
    assert await read_counts(pool, projection.schema) == {"u1": 2, "u2": 1}

    gone = await habitus(servers, "dlq", "replay", str(letter["seq"]))
    assert gone.exit_code == 2 and f"no dead letter at HABITUS_DLQ sequence {letter['seq']}" \
        in gone.output
    neither = await habitus(servers, "dlq", "replay")
    assert neither.exit_code == 2 and "one of them" in neither.output


async def test_dlq_replay_by_sequence_of_a_running_consumer(servers: ServerUrls, stack: Stack,
                                                            acme: Client, nc: Any) -> None:
    """A malformed ingest event: the producers dead-letter it; replayed by its DLQ sequence
    it reaches them again (and, still malformed, is dead-lettered again at its new
    sequence)."""
    subject = ingest_subject("turn", acme.tenant, "u1")
    bad = json.dumps({"type": "TurnRecorded", "event_id": "nope", "payload": {}}).encode()
    ack = await nc.jetstream().publish(subject, bad)
    mine: list[dict[str, Any]] = []

    async def listed(original_seq: int) -> bool:
        found = as_json(await habitus(servers, "dlq", "list", "--consumer",
                                      "proj_producers_candidates", "--limit", "100000",
                                      "--json"))
        mine[:] = [x for x in found
                   if parse_subject(x["original_subject"]).published == subject]
        return any(x["original_seq"] == original_seq for x in mine)

    await eventually(lambda: listed(ack.seq), timeout=20, interval=0.3)
    [first] = mine
    assert first["reason"] == "invalid_event" and first["type"] == "TurnRecorded"

    done = ok(await habitus(servers, "dlq", "replay", str(first["seq"])))
    assert f"dlq {first['seq']} (proj_producers_candidates) -> {subject}" in done
    new_seq = int(done.split(" sequence ")[1].split(";")[0])
    await eventually(lambda: listed(new_seq), timeout=20, interval=0.3)
    assert [x["original_seq"] for x in mine] == [new_seq]  # the first one is gone


async def test_partitions_shows_the_owners_and_set_repartitions_while_it_runs(
        servers: ServerUrls, acme: Client) -> None:
    """`habitus partitions` names the replica applying each partition; `set` splits a running
    projection (the service takes the new layout up by itself) and it goes on learning;
    `admin.partitions` through the gateway answers the same."""
    name = "producers.candidates"

    async def parts() -> list[dict[str, Any]]:
        return list(as_json(await habitus(servers, "partitions", "-p", name, "--json")))

    [whole] = await parts()
    assert (whole["partition"], whole["state"], whole["owner_alive"]) == ("0/1", "active", True)
    table = ok(await habitus(servers, "partitions"))
    assert name in table and "owners: " in table

    for bad, why in ((["--count", "3"], "one of 1, 2, 4, 8, 16"),
                     (["nope.nothing", "--count", "2"], "unknown projection")):
        args = [name, *bad] if bad[0] == "--count" else bad
        refused = await habitus(servers, "partitions", "set", *args)
        assert refused.exit_code == 2 and why in refused.output, refused.output

    async def laid_out(count: int) -> bool:
        found = await parts()
        return (sorted(p["partition"] for p in found) == [f"{i}/{count}" for i in range(count)]
                and all(p["state"] == "active" and p["owner_alive"] for p in found))

    try:
        [done] = as_json(await habitus(servers, "partitions", "set", name, "--count", "2",
                                       "--json"))
        assert done["count"] == 2 and done["cutover"] > 0
        await eventually(lambda: laid_out(2), timeout=30, interval=0.3)
        facts = await learned(servers, acme, "after-split")
        assert facts, "nothing learned after the split"
        answer = await acme.rpc("admin.partitions", projections=[name])
        assert sorted(p["partition"] for p in answer["partitions"]) == ["0/2", "1/2"]
        status, why = await acme.refused("admin.partitions", projections=["nope.nothing"])
        assert status == 400 and "unknown projection" in why
    finally:
        as_json(await habitus(servers, "partitions", "set", name, "--count", "1", "--json"))
        await eventually(lambda: laid_out(1), timeout=30, interval=0.3)
