"""Erasing a user leaves nothing of the user anywhere, and touches no one else.

The whole stack runs (gateway, producers, learning, profile with its mirror, the extractor and
habits with a scripted model), two users of one tenant and a user of another tenant talk to it
through the gateway and declare and analyze habits; then one user is erased through
`admin.erase_user`. Every table of every installed service, the three streams, every
cache key and the workspace folder are searched for the user: only the `UserErased` tombstone
remains. The tables searched are found from the catalogue (every table with a `user_id`
column in a service's schema), so a projection added later is searched too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from psycopg import sql
from redis.asyncio import Redis

from habitus.auth.keys import create_key
from habitus.bus import EVENTS
from habitus.bus.streams import DLQ
from habitus.crypto.columns import COLUMNS, Columns, is_sealed
from habitus.crypto.keyring import Shredded
from habitus.crypto.sealing import open_event
from habitus.crypto.setup import keyring_from
from habitus.ids import TENANT_WIDE
from habitus.llm import LlmSettings
from habitus.service import registry
from habitus.service.erasure import user_filters
from habitus.service.migrations import migrate
from habitus.subjects import parse_subject
from services.extractor.settings import ExtractorSettings
from services.habits import main as habits_main
from services.habits.embedding import SentenceEncoder
from services.habits.identity import normalise
from services.habits.settings import HabitsSettings
from services.profile_renderer.main import ProfileSettings
from services.profile_renderer.mirror import mirror_path
from services.stability_detector.settings import LearningSettings
from services.tool_memory.settings import ToolMemorySettings
from tests.conftest import ServerUrls
from tests.support.extraction import chunks_of, request_kind
from tests.support.factories import turn_item, unique
from tests.support.habits_model import (
    ANALYZE,
    JUDGE,
    habit,
    judgments,
    observations,
    payload,
    proposals,
    refs,
)
from tests.support.habits_stack import observed
from tests.support.http import TLS
from tests.support.llm_server import Answer, ScriptedLlm
from tests.support.services import every_service, skip_all_history
from tests.support.streams import fetch_all

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
#: how long a user's material may take to reach every view: a bound on waiting, not a timing
#: claim (alone, it takes a second or two; beside the suite's heaviest files once, over 30 s)
SETTLE_SECONDS = 90
#: tables a user's ordinary data never reaches (records of dead letters: none here)
NEVER_FILLED = {"learning.dead_letters", "producers.dead_letters", "profile.dead_letters",
                "tools.dead_letters", "traces.dead_letters", "extractor.dead_letters",
                "habits.dead_letters", "optimize.dead_letters",
                # the tenant's own (routing policies and configuration, optimisation runs):
                # under `_tenant`, never a user's
                "traces.policies", "traces.defaults", "traces.configurations", "traces.advice",
                "optimize.runs", "optimize.trials", "optimize.configurations",
                "optimize.defaults",
                # the tenant's own (the habits law and settings): tenant-wide rows under
                # `_tenant`, never a user's (filled below and checked to survive the erasure)
                "habits.laws", "habits.tenant_settings"}

MESSAGES = [
    "Never email Sarah at sarah@example.com.",
    "Please keep it short, no preamble.",
    "I'm in Berlin and I use neovim for everything.",
    "Never use emoji with me.",
    "Keep answers short please, bullet points are fine.",
    "Be a bit more formal in this one.",  # a one-off: Provisional, under "Not yet sure"
]
#: the turn habits' Analyze cites (stated now: a turn's observation expires after retention)
HABIT_TURN = "Status reports again: three bullet points, no preamble, like last week."
#: two declared habits the real encoder pairs as duplicates (the same advice, the condition
#: one word apart)
DECLARED = [("When I ask for a status report", "Keep it to three bullet points"),
            ("When I ask for a status report please", "Keep it to three bullet points")]
SUGGESTED = ("When I write a status report", "Skip the preamble")


def habits_answer(body: dict[str, Any]) -> dict[str, Any]:
    """Analyze proposes one habit citing the habit turn, and one item validation refuses (so
    the quarantine holds the user); the judge finds nothing applicable."""
    if request_kind(body) == JUDGE:
        return judgments(payload(body), lambda _: False)
    obs = observations(body)
    return proposals(habit(*SUGGESTED, refs(obs, "no preamble")),
                     {"condition": "When I ask", "behavior": "Answer"})  # invalid_item


def model(body: dict[str, Any]) -> Answer:
    """A model that finds one style facet in every window (and one facet validation refuses,
    so the quarantine holds the user too); the habits service's calls are `habits_answer`'s."""
    if request_kind(body) in (ANALYZE, JUDGE):
        return Answer(json=habits_answer(body))
    chunks = chunks_of(body)
    words = " ".join(chunks[0]["text"].split()[:3])
    found = {"class": "style", "key": "opening", "value": words, "cue_family": "behavioral",
             "confidence": 0.7, "evidence": [{"chunk": chunks[0]["id"], "quote": words}]}
    if request_kind(body) == "reflection":
        return Answer(json={"observations": ["works with email"], "patterns": [],
                            "preferences": [found]})
    return Answer(json={"summary": "Talks about how answers should look.",
                        "facets": [found, {**found, "class": "mood"}]})


#: the habits service's sentence encoders, as it made them (to check what they keep cached)
ENCODERS: list[SentenceEncoder] = []


@contextmanager
def recorded_encoders() -> Iterator[None]:
    def made(*args: Any, **kwargs: Any) -> SentenceEncoder:
        encoder = SentenceEncoder(*args, **kwargs)
        ENCODERS.append(encoder)
        return encoder

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(habits_main, "SentenceEncoder", made)
        yield


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls, tmp_path_factory: Any) -> AsyncIterator[tuple[str, Path]]:
    migrate(servers.database)
    data_dir = tmp_path_factory.mktemp("erasure")
    settings = servers.settings(data_dir=data_dir)
    with ScriptedLlm(responder=model) as llm:
        # Small windows that never time out: the turns close some, the sent email stays open.
        extraction = ExtractorSettings(
            window_tokens=40, window_seconds=3600, sweep_seconds=0.1,
            llm=LlmSettings(base_url=llm.url, model="scripted", daily_calls_per_tenant=0))
        habits = HabitsSettings(llm=LlmSettings(
            base_url=llm.url, model="scripted", daily_calls_per_tenant=0,
            daily_tokens_per_tenant=0))
        presets = {"stability_detector": LearningSettings(scheduler_enabled=False),
                   "profile_renderer": ProfileSettings(mirror=True),
                   "tool_memory": ToolMemorySettings(semantic_recall=False),
                   "extractor": extraction, "habits": habits}
        # every projection starts at the streams' end: late in a run the worker's streams hold
        # tens of thousands of earlier modules' events, and folding them first spent the 90 s
        # waits for this module's own material (the extractor's windows above all: a model
        # call per window)
        await skip_all_history(servers.database, servers.nats)
        with recorded_encoders():
            async with every_service(settings, presets) as host:
                yield f"http://127.0.0.1:{host.bound_port}", data_dir


class Tenant:
    def __init__(self, base: str, key: str, name: str):
        self.base, self.key, self.name = base, key, name

    async def rpc(self, method: str, **params: Any) -> Any:
        async with httpx.AsyncClient(base_url=self.base, timeout=30, verify=TLS) as client:
            response = await client.post(f"/v1/rpc/{method}", json=params,
                                         headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code == 200, response.text
        return response.json()

    async def talk(self, user: str) -> None:
        items = [turn_item(user, message) for message in MESSAGES]
        recent = time.time() - 60  # a one-off of today: Provisional, not yet decayed away
        items[-1]["payload"].update(user_at=recent, assistant_at=recent + 1)
        items[0]["payload"]["tool_calls"] = [{"tool_name": "send_email", "ok": True}]
        items.append({"type": "ProviderProfileSynced", "user_id": user, "payload": {
            "toolkit": "gmail", "connection_id": f"c-{user}",
            "fields": {"name": "Dana Weber", "email": f"{user}@example.com",
                       "timezone": "Europe/Berlin"}}})
        items.append({"type": "TraceCompleted", "user_id": user, "payload": {
            "trace_id": f"tr-{user}", "query": "Draft a reply to Sarah's email.",
            "agent": "mail", "model": "qwen3:8b", "engine": "ollama", "result": "Drafted.",
            "outcome": "success", "started_at": 1_764_000_000.0, "ended_at": 1_764_000_004.0,
            "total_tokens": 120, "total_latency_seconds": 4.0,
            "steps": [{"step_type": "tool", "timestamp": 1_764_000_001.0,
                       "duration_seconds": 1.0, "input": {"tool": "send_email"}}]}})
        items.append({"type": "FeedbackGiven", "user_id": user, "payload": {
            "trace_id": f"tr-{user}-next", "score": 0.8}})  # for a trace still to come
        items.append({"type": "EmailObserved", "user_id": user, "payload": {
            "message_id": f"<{user}@example.com>", "direction": "sent",
            "from": f"{user}@example.com", "to": ["sarah@example.com"], "subject": "Hi",
            "body": "Short note.", "sent_at": 1_764_000_000.0}})
        async with httpx.AsyncClient(base_url=self.base, timeout=30, verify=TLS) as client:
            # the routing decision the trace followed (recorded for the optimizer's log)
            routed = await client.post("/v1/rpc/router.select_model", json={
                "query": "Draft a reply to Sarah's email.", "user_id": user,
                "decision_id": f"d-{user}", "available_models": ["qwen3:8b", "gpt-4o"]},
                headers={"Authorization": f"Bearer {self.key}"})
            assert routed.status_code == 200, routed.text
            items[-3]["payload"]["decision_id"] = f"d-{user}"
            response = await client.post("/v1/events", json=items,
                                         headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code in (200, 202), response.text

    async def habit_turn(self, user: str) -> None:
        """A turn of today (the ones above are from 2023, so their observations are expired
        when captured), which habits' Analyze cites."""
        item = turn_item(user, HABIT_TURN)
        now = time.time()
        item["payload"].update(session_id="s-habits", user_at=now - 2, assistant_at=now - 1)
        async with httpx.AsyncClient(base_url=self.base, timeout=30, verify=TLS) as client:
            response = await client.post("/v1/events", json=[item],
                                         headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code in (200, 202), response.text

    async def practise_habits(self, pool: Any, user: str) -> None:
        """The turn captured, Analyze run (a suggestion and a quarantined item), two habits
        declared that are duplicates (the second waits for a person)."""
        captured = await observed(pool, self.name, user, 1)
        assert any("no preamble" in text for _, text in captured), captured
        analyzed = (await self.rpc("habits.analyze", user_id=user))["result"]
        assert (analyzed["suggested"], analyzed["quarantined"], analyzed["error"]) == \
            (1, 1, None), analyzed
        (when1, do1), (when2, do2) = DECLARED
        first = (await self.rpc("habits.declare", user_id=user, when=when1, do=do1))["result"]
        assert first["outcome"] == "accepted_active", first
        second = (await self.rpc("habits.declare", user_id=user, when=when2, do=do2))["result"]
        assert second["outcome"] == "duplicate_resolution", second
        assert second["habit"]["blocked_by"] == [first["habit"]["habit_id"]]
        review = (await self.rpc("habits.list_review", user_id=user))["result"]
        assert review["pending_duplicates"] == 1, review


async def user_tables(pool: Any) -> list[tuple[str, str]]:
    schemas = [s.schema for s in registry.services() if s.schema]
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT table_schema, table_name FROM information_schema.columns "
            "WHERE column_name = 'user_id' AND table_schema = ANY(%s) "
            "ORDER BY 1, 2", (schemas,))
        return [(r[0], r[1]) for r in await cur.fetchall()]


async def rows_of(pool: Any, tenant: str, user: str) -> dict[str, int]:
    counts = {}
    async with pool.connection() as conn:
        for schema, table in await user_tables(pool):
            cur = await conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE tenant_id = %s AND user_id = %s").format(
                    sql.Identifier(schema, table)), (tenant, user))
            row = await cur.fetchone()
            assert row is not None
            if row[0]:
                counts[f"{schema}.{table}"] = int(row[0])
    return counts


async def messages_of(js: Any, tenant: str, user: str) -> dict[str, int]:
    """The user's messages per subject as published (the streams store them with their
    partition tokens, and may still hold some stored before them)."""
    found: dict[str, int] = {}
    for stream, subject in user_filters(tenant, user):
        info = await js.stream_info(stream, subjects_filter=subject)
        for stored, n in (info.state.subjects or {}).items():
            published = parse_subject(stored).published
            found[published] = found.get(published, 0) + n
    return found


async def cache_keys_of(redis_url: str, user: str) -> list[bytes]:
    redis = Redis.from_url(redis_url)
    try:
        return [k async for k in redis.scan_iter(match=f"*{user}*")]
    finally:
        await redis.aclose()


async def extracted(tenant: Tenant, user: str) -> None:
    """Every closed window of the user extracted (and a re-extraction asked for, so the
    requests hold the user too)."""
    await tenant.rpc("extraction.reextract", user_id=user, since=0)
    for _ in range(400):
        status = (await tenant.rpc("extraction.status", user_id=user))["result"]
        counts = status["windows"]
        if counts["done"] >= 2 and counts["ready"] == counts["waiting"] == 0 and \
                counts["open"] >= 1 and status["sources"]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{user}'s windows were never extracted: {status}")


async def settle(tenant: Tenant, user: str) -> dict[str, Any]:
    """Extracted, learned, its tool rule captured, rendered, mirrored and in the prompt cache.

    Each is waited for on its own: under load the renderer can show a profile before tool
    memory has captured the rule from the same turns."""
    await extracted(tenant, user)
    await tenant.rpc("learning.rebuild_cache", user_id=user)
    deadline = time.monotonic() + SETTLE_SECONDS
    while not (await tenant.rpc("memory.tool_rule_list", user_id=user))["result"]["rules"]:
        if time.monotonic() > deadline:
            raise AssertionError(f"{user}'s tool rule was never captured")
        await asyncio.sleep(0.05)
    while time.monotonic() < deadline:
        context = await tenant.rpc("prompt.context", user_id=user)
        if context["result"]["version"] > 0:
            return dict(context["result"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"{user}'s profile was never rendered")


async def test_an_erased_user_leaves_nothing_and_the_others_keep_everything(
        stack: tuple[str, Path], servers: ServerUrls, nc: Any, pool: Any) -> None:
    base, data_dir = stack
    acme, other = unique("acme"), unique("other")
    a = Tenant(base, await create_key(pool, acme), acme)
    b = Tenant(base, await create_key(pool, other), other)
    dana, sam, lee = unique("dana"), unique("sam"), unique("lee")
    # the tenant's own habits settings (rows of `_tenant`, which erasing a user leaves alone)
    await a.rpc("habits.configure", retention_days=30)
    await a.rpc("habits.set_law", text="deny: \\bcustomer names?\\b")
    for tenant, user in ((a, dana), (a, sam), (b, lee)):
        await tenant.talk(user)
        await tenant.habit_turn(user)
    for tenant, user in ((a, dana), (a, sam), (b, lee)):
        await settle(tenant, user)
        await tenant.practise_habits(pool, user)
    await a.rpc("learning.pin_facet", user_id=dana, **{"class": "style", "key": "verbosity"})

    js = nc.jetstream()
    before = {u: (await rows_of(pool, t, u), await messages_of(js, t, u))
              for t, u in ((acme, dana), (acme, sam), (other, lee), (acme, TENANT_WIDE))}
    assert {"habits.laws", "habits.tenant_settings"} <= set(before[TENANT_WIDE][0])
    # Every table that holds users holds this one, so "nothing left" below means something
    # (a service added later brings its tables into this check by itself).
    assert set(before[dana][0]) >= {f"{schema}.{table}" for schema, table in
                                    await user_tables(pool)} - NEVER_FILLED
    assert mirror_path(data_dir, acme, dana).exists()
    assert await cache_keys_of(servers.redis, dana)
    # the habits service's encoder caches the wordings it compared (a process-local copy)
    dana_wordings = [normalise(text) for pair in DECLARED for text in pair]
    assert all(any(e.cached(t) for e in ENCODERS) for t in dana_wordings), ENCODERS

    answer = (await a.rpc("admin.erase_user", user_id=dana, reason="user asked"))["result"]
    assert answer["user_id"] == dana
    assert answer["projections"] == sorted(f"{s.schema}.erasure" for s in registry.services()
                                           if s.projections)
    assert answer["purged_messages"] >= len(MESSAGES) + 1

    # Nothing of the user: no row, no message but the tombstone, no key, no file.
    assert await rows_of(pool, acme, dana) == {}
    assert await messages_of(js, acme, dana) == {
        f"habitus.v1.event.UserErased.{acme}.{dana}": 1}
    tombstone = await js.get_last_msg(EVENTS, f"habitus.v1.event.UserErased.{acme}.{dana}.>")
    assert tombstone.seq == answer["tombstone_seq"]
    assert await cache_keys_of(servers.redis, dana) == []
    assert not (data_dir / "workspaces" / acme / dana).exists()
    # ... nor a cached vector of the user's habit wordings (sam's same wordings are simply
    # embedded again when next compared)
    assert not [t for e in ENCODERS for t in dana_wordings if e.cached(t)]

    # Everyone else: untouched (and the tenant's own rows too).
    for tenant_id, user in ((acme, sam), (other, lee), (acme, TENANT_WIDE)):
        assert (await rows_of(pool, tenant_id, user),
                await messages_of(js, tenant_id, user)) == before[user]
    for tenant_id, user in ((acme, sam), (other, lee)):
        assert mirror_path(data_dir, tenant_id, user).exists()
    assert (await b.rpc("prompt.context", user_id=lee))["result"]["version"] > 0

    # Erasing again is harmless, and the user can start afresh.
    again = (await a.rpc("admin.erase_user", user_id=dana))["result"]
    assert again["purged_messages"] >= 1  # the earlier tombstones (the last one stays)
    assert list(await messages_of(js, acme, dana)) == [
        f"habitus.v1.event.UserErased.{acme}.{dana}"]
    assert await rows_of(pool, acme, dana) == {}


async def test_erasing_a_user_nobody_knows_answers(stack: tuple[str, Path], pool: Any) -> None:
    base, _ = stack
    name = unique("acme")
    tenant = Tenant(base, await create_key(pool, name), name)
    answer = (await tenant.rpc("admin.erase_user", user_id=unique("ghost")))["result"]
    assert answer["purged_messages"] == 0


async def test_erasure_refuses_a_bad_user_id(stack: tuple[str, Path], pool: Any) -> None:
    base, _ = stack
    name = unique("acme")
    key = await create_key(pool, name)
    async with httpx.AsyncClient(base_url=base, verify=TLS) as client:
        response = await client.post("/v1/rpc/admin.erase_user", json={"user_id": "a b"},
                                     headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 400
    assert "user_id" in response.text





async def test_habitus_erase_on_the_command_line(stack: tuple[str, Path], servers: ServerUrls,
                                                 nc: Any, pool: Any) -> None:
    base, data_dir = stack
    name = unique("acme")
    tenant = Tenant(base, await create_key(pool, name), name)
    user = unique("kim")
    await tenant.talk(user)
    await settle(tenant, user)
    assert mirror_path(data_dir, name, user).exists()

    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "habitus.cli", "erase", "--tenant", name,
                         "--user", user, "--reason", "asked by support"],
        env={**os.environ, **servers.env()}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"erased {name}/{user}" in done.stdout
    assert await rows_of(pool, name, user) == {}
    assert list(await messages_of(nc.jetstream(), name, user)) == [
        f"habitus.v1.event.UserErased.{name}.{user}"]
    assert not mirror_path(data_dir, name, user).exists()

    bad = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "habitus.cli", "erase", "--tenant", name,
                         "--user", "not a user"],
        env={**os.environ, **servers.env()}, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "user" in bad.stdout + bad.stderr


# ------------------------------------------------------------------------- crypto-shredding

#: what only zoe says: her address, her full name, a code name
ZOE = ("zoe.quantum@example.org", "Zoe Quantum-Fairweather", "Project Nightingale")
#: as they would show on disk in any case and alone (a search index keeps lowercased words)
ZOE_SECRETS = [b"zoe.quantum@example.org", b"fairweather", b"nightingale"]
#: and max, who stays
MAX = ("max.ironbridge@example.net", "Max Ironbridge-Tallow", "Project Kestrel")


def says(address: str, name: str, code: str) -> list[str]:
    return [f"Mail the draft to {address}, signed {name}.",
            f"Keep {code} out of every summary, and answer briefly.",
            # a tool edict (her tool rule); "never use emoji" is a veto, no rule
            f"Never run the deploy script for {code} without asking me.",
            "I'm in Berlin and I use neovim for everything."]


def person_items(user: str, address: str, name: str, code: str) -> list[dict[str, Any]]:
    """Everything a user can send that reaches a projection: turns (one calls a tool), a
    connected account with their name and address, an e-mail, a document, a trace, feedback."""
    items = [turn_item(user, line) for line in says(address, name, code)]
    items[0]["payload"]["tool_calls"] = [{"tool_name": "send_email", "ok": True}]
    items.append({"type": "ProviderProfileSynced", "user_id": user, "payload": {
        "toolkit": "gmail", "connection_id": f"c-{user}",
        "fields": {"name": name, "email": address}}})
    items.append({"type": "EmailObserved", "user_id": user, "payload": {
        "message_id": f"<{user}@example.org>", "direction": "sent",
        "from": address, "to": ["ops@example.org"], "subject": code,
        "body": f"{code} ships on Friday.", "sent_at": 1_764_000_000.0}})
    items.append({"type": "DocumentIngested", "user_id": user, "payload": {
        "source_id": "brief.md", "chunk_id": "1",
        "text": f"{code}: owner {name}, {address}."}})
    items.append({"type": "TraceCompleted", "user_id": user, "payload": {
        "trace_id": f"tr-{user}", "query": f"Summarise {code} for {name}",
        "agent": "mail", "model": "qwen3:8b", "engine": "ollama",
        "result": f"{code} summary sent to {address}.",
        "outcome": "success", "started_at": 1_764_000_000.0, "ended_at": 1_764_000_004.0,
        "total_tokens": 120, "total_latency_seconds": 4.0, "steps": []}})
    items.append({"type": "FeedbackGiven", "user_id": user, "payload": {
        "trace_id": f"tr-{user}", "score": 0.9}})
    return items


def files_holding(roots: list[Path], needles: list[bytes]) -> list[str]:
    """Every file under `roots` whose bytes hold one of `needles`, in any case (as
    `grep -ai` would); `needles` are lowercase."""
    found = []
    for root in roots:
        # os.walk, not Path.rglob: a directory removed while the search walks (a consumer's,
        # which NATS deletes with the consumer) is passed over, where rglob raised
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder, name)
                if path.is_symlink() or not path.is_file():
                    continue
                try:
                    data = path.read_bytes().lower()
                except OSError:
                    continue  # a file removed while the search walked (a WAL segment)
                found += [f"{path}: {n.decode()}" for n in needles if n in data]
    return found


async def shows(tenant: Tenant, method: str, params: dict[str, Any], text: str) -> None:
    """Wait until `method` answers with `text` (each projection catches up on its own).

    The stack's scheduler is off, so nothing rebuilds a user's cache after `settle`'s one
    request: under load the producers' candidates can reach the learning cache after that
    request was folded, and would then never be rendered. While `prompt.context` lacks the
    text, a rebuild is asked for again every two seconds, as the scheduler's debounce would."""
    deadline = time.monotonic() + SETTLE_SECONDS
    asked = time.monotonic()
    while text not in json.dumps(answer := await tenant.rpc(method, **params)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{method} never showed {text!r}: {answer}")
        if method == "prompt.context" and time.monotonic() - asked > 2.0:
            await tenant.rpc("learning.rebuild_cache", user_id=params["user_id"])
            asked = time.monotonic()
        await asyncio.sleep(0.05)


def copy_files(source: Path, target: Path) -> None:
    """The regular files under `source` (a server's socket is not data), as a backup takes
    them; a file removed while the copy walks (a recycled WAL segment) is skipped."""
    for folder, _, names in os.walk(source):  # a directory removed meanwhile is passed over
        for name in names:
            path = Path(folder, name)
            if path.is_symlink() or not path.is_file():
                continue
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(path, destination)


async def chatter(base: str, key: str, users: list[str], stop: asyncio.Event) -> int:
    """Other users' traffic, while the erasure runs."""
    sent = 0
    async with httpx.AsyncClient(base_url=base, timeout=30, verify=TLS) as client:
        while not stop.is_set():
            user = users[sent % len(users)]
            response = await client.post(
                "/v1/events", json=[turn_item(user, f"Please keep answers short, take {sent}.")],
                headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 200, response.text
            sent += 1
            await asyncio.sleep(0.02)
    return sent


async def sealed_columns_of(pool: Any, tenant: str, user: str) -> list[tuple[str, str]]:
    """(table.column, raw value) of every sealed value the projections keep for the user."""
    found = []
    async with pool.connection() as conn:
        for schema, table in await user_tables(pool):
            cur = await conn.execute(
                sql.SQL("SELECT * FROM {} WHERE tenant_id = %s AND user_id = %s").format(
                    sql.Identifier(schema, table)), (tenant, user))
            names = [d.name for d in cur.description or ()]
            for row in await cur.fetchall():
                found += [(f"{schema}.{table}.{column}", value)
                          for column, value in zip(names, row, strict=True) if is_sealed(value)]
    return found


@pytest.mark.timeout(300)
async def test_an_erased_users_words_are_unreadable_everywhere_on_disk_and_in_a_copy_made_before(
        stack: tuple[str, Path], servers: ServerUrls, nc: Any, pool: Any,
        tmp_path: Path) -> None:
    base, data_dir = stack
    name = unique("shred")
    tenant = Tenant(base, await create_key(pool, name), name)
    zoe, max_ = unique("zoe"), unique("max")
    async with httpx.AsyncClient(base_url=base, timeout=30, verify=TLS) as client:
        items = [*person_items(zoe, *ZOE), *person_items(max_, *MAX)]
        sent = await client.post("/v1/events", json=items,
                                 headers={"Authorization": f"Bearer {tenant.key}"})
    assert sent.status_code == 200, sent.text
    # every projection has what she said: learned, rendered, her rule, her trace searchable
    await settle(tenant, zoe)
    await settle(tenant, max_)
    await shows(tenant, "prompt.context", {"user_id": zoe}, "Quantum-Fairweather")
    await shows(tenant, "prompt.context", {"user_id": max_}, "Ironbridge-Tallow")
    await shows(tenant, "traces.search", {"text": "Nightingale"}, f"tr-{zoe}")
    async with pool.connection() as conn:
        await conn.execute("CHECKPOINT")  # her rows in the heap files too, not only the WAL

    # the projections keep her words sealed: values that open only with her key
    sealed = await sealed_columns_of(pool, name, zoe)
    kept = await sealed_columns_of(pool, name, max_)
    columns = {column for column, _ in sealed}
    assert {"learning.facets.value", "profile.documents.markdown", "profile.accounts.label",
            "traces.traces.query", "traces.search_terms.term", "tools.rules.rule"
            } <= columns, sorted(columns)
    assert any("Quantum-Fairweather" in COLUMNS.open(name, zoe, v) for _, v in sealed)

    async def copies() -> list[Any]:
        """The users' messages as a copy of the streams (a backup) holds them."""
        return [msg for user in (zoe, max_) for stream, subject in user_filters(name, user)
                if stream != DLQ for msg in await fetch_all(nc, stream, subject)]

    backup = await copies()
    assert {m.subject.split(".")[5] for m in backup} == {zoe, max_}
    for msg in backup:  # sealed on the wire
        assert not any(s in msg.data.lower() for s in ZOE_SECRETS), msg.subject
    local = not any(os.environ.get(v) for v in
                    ("HABITUS_NATS_URL", "HABITUS_DATABASE_URL", "HABITUS_REDIS_URL"))
    servers_dirs = [servers.data_dir / d for d in ("nats", "postgres", "redis")
                    if (servers.data_dir / d).is_dir()]
    if local:
        # a copy of the whole data directory, made before the erasure (a backup, a replica)
        before = tmp_path / "copy"
        for directory in servers_dirs:
            copy_files(directory, before / directory.name)
        assert files_holding([before], ZOE_SECRETS) == []

    others = [unique("bystander") for _ in range(3)]
    stop = asyncio.Event()
    traffic = asyncio.create_task(chatter(base, tenant.key, others, stop))
    try:
        answer = (await tenant.rpc("admin.erase_user", user_id=zoe))["result"]
    finally:
        stop.set()
        assert await traffic > 0
    assert answer["purged_messages"] >= len(says(*ZOE))

    # her key is gone from the key store: no process can open her sealed events or column
    # values, wherever a copy of them is; max's still open
    fresh = keyring_from(servers.settings())
    assert fresh is not None
    opener = Columns(fresh)
    for msg in backup:
        user = msg.subject.split(".")[5]
        doc = json.loads(msg.data)
        if "sealed" not in doc:
            continue  # the tombstones of earlier erasures, and the like
        if user == zoe:
            with pytest.raises(Shredded):
                open_event(msg.data, fresh)
        else:
            assert open_event(msg.data, fresh)["user_id"] == max_
    for _, value in sealed:
        with pytest.raises(Shredded):
            opener.open(name, zoe, value)
    assert any("Ironbridge-Tallow" in opener.open(name, max_, v) for _, v in kept)
    # max's words read back as before
    assert "Ironbridge-Tallow" in json.dumps(
        (await tenant.rpc("prompt.context", user_id=max_))["result"])
    if local:
        # nothing of hers in the clear in any file: streams, Postgres heap and WAL, Redis,
        # the profile mirrors (the copy held none to begin with, and what it holds is sealed)
        async with pool.connection() as conn:
            await conn.execute("CHECKPOINT")
        assert files_holding([*servers_dirs, data_dir], ZOE_SECRETS) == []
