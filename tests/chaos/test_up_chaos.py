"""SIGKILL every child of `habitus up` in turn under a steady ingest: every accepted event is
applied exactly once and nothing else appears.

The load is TurnRecorded items through `POST /v1/events`, each with its own event_id, retried with
that same id until the gateway says it is stored (kills cause connection errors and 503s), so the
accepted inputs are known exactly. Each user message holds a goal and a stated preference. The
reference is computed with the functions the producers' projection runs (heuristics, the
statement reader and reflection) and the ids it derives, so a change to the producers changes
the expectation with it. It is compared with the evidence rows of the learning cache and
with the CandidateEmitted events on HABITUS_EVENTS: each expected id exactly once, no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import nats
import psycopg
import pytest

from habitus.bus.streams import EVENTS
from habitus.events.ingest import TurnRecorded
from habitus.ids import new_event_id
from habitus.runtime.embedded import free_port
from habitus.subjects import EVENT_ROOT, user_filter
from services.producers.heuristics import SessionState, observe_turn
from services.producers.reading.reader import StatementReader
from services.producers.reflection import reflection_candidates, without_restated
from services.producers.stated import statement_candidates
from tests.integration.test_up_runtime import UpProcess, _gone, data_root
from tests.support.http import TLS

__all__ = ["data_root"]  # a fixture, used by name

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(240)]

TENANT = "dev"  # the tenant of the key `habitus up` prints
USERS = 4
#: one item every this many seconds: steady, and light enough for a two-core machine
PACE = 0.08
CHILDREN = ("producers", "stability_detector", "stability_detector_rpc", "profile_renderer",
            "profile_renderer_rpc", "gateway", "nats", "postgres", "redis")


def _item(n: int) -> dict[str, Any]:
    now = round(time.time(), 3)
    return {
        "event_id": new_event_id(),
        "type": "TurnRecorded",
        "user_id": f"chaos-{n % USERS}",
        "payload": {
            "session_id": f"session-{n}", "turn_id": "t1", "channel": "cli",
            "user_message": (f"I've decided to write notes about topic {n}. "
                             + ("Keep answers short." if n % 2 else "Reply in German.")),
            "assistant_message": "Noted.", "user_at": now, "assistant_at": now + 1,
            "tool_calls": [],
        },
    }


def expected_candidate_ids(accepted: list[dict[str, Any]]) -> set[str]:
    """The CandidateEmitted ids the producers derive from `accepted` (one session per item)."""
    ids: set[str] = set()
    payloads = [TurnRecorded.model_validate(item["payload"]) for item in accepted]
    read = StatementReader().read([p.user_message for p in payloads])
    for item, payload, statements in zip(accepted, payloads, read, strict=True):
        where = {"session_id": payload.session_id, "turn_id": payload.turn_id,
                 "observed_at": payload.user_at}
        _, candidates = observe_turn(SessionState.from_json(None), payload)
        candidates += statement_candidates(statements, **where)
        candidates += without_restated(reflection_candidates(payload.user_message, **where),
                                       [s.sentence for s in statements])
        ids.update(candidate.event_id(item["event_id"]) for candidate in candidates)
    return ids


class Load:
    """One client sending items one at a time; an item is done once it is stored."""

    def __init__(self, base_url: str, key: str) -> None:
        self.base_url = base_url
        self.key = key
        self.accepted: list[dict[str, Any]] = []
        self.retries = 0
        self.stopping = asyncio.Event()

    async def _send(self, client: httpx.AsyncClient, item: dict[str, Any]) -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError):
                response = await client.post("/v1/events", json=[item])
                status = response.json()["results"][0]["status"]
                if status in ("accepted", "duplicate"):
                    self.accepted.append(item)
                    return
                assert status not in ("rejected", "conflict"), response.text
            self.retries += 1
            await asyncio.sleep(0.2)

    async def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                     timeout=10, verify=TLS) as client:
            for n in itertools.count():
                if self.stopping.is_set():
                    return
                # An item once sent is retried until stored, even after stop: otherwise it could
                # be stored without the reference knowing.
                await self._send(client, _item(n))
                await asyncio.sleep(PACE)


async def _evidence(database_url: str) -> Counter[str]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT event_id, count(*) FROM learning.evidence WHERE tenant_id = %s "
            "GROUP BY event_id", (TENANT,))
        return Counter({str(row[0]): int(row[1]) for row in await cur.fetchall()})


async def _candidate_events(nats_url: str) -> Counter[str]:
    """Every CandidateEmitted of the tenant on HABITUS_EVENTS, as many as the consumer counts
    pending when it is created (a fetch that times out early must not hide some)."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe(user_filter(EVENT_ROOT, "CandidateEmitted", TENANT),
                                      stream=EVENTS)
        total = (await sub.consumer_info()).num_pending or 0
        ids: Counter[str] = Counter()
        deadline = time.monotonic() + 60
        while sum(ids.values()) < total:
            assert time.monotonic() < deadline, f"read {sum(ids.values())} of {total} events"
            try:
                msgs = await sub.fetch(min(500, total - sum(ids.values())), timeout=5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for msg in msgs:
                ids[str(json.loads(msg.data)["event_id"])] += 1
                await msg.ack()
        return ids
    finally:
        await nc.close()


async def _wait_restarted(up: UpProcess, name: str, old: int, after: int) -> None:
    await asyncio.to_thread(up.wait_line, rf"^  restarting {name} in ", 30.0, after)
    deadline = time.monotonic() + 60
    while up.child_pid(name) in (None, old):
        assert time.monotonic() < deadline, f"{name} was not restarted:\n{up.output}"
        await asyncio.sleep(0.2)
    await asyncio.to_thread(up.wait_readyz, 60.0)


async def test_sigkill_each_child_under_load_applies_every_event_exactly_once(
    data_root: Path
) -> None:
    up = UpProcess(data_root / "var", free_port())
    try:
        await asyncio.to_thread(up.wait_ready)
        runtime = up.runtime()
        key = (up.data_dir / "dev-api-key").read_text().strip()
        load = Load(up.base_url, key)
        sender = asyncio.create_task(load.run())
        try:
            await asyncio.sleep(2)
            for name in CHILDREN:
                old = up.child_pid(name)
                assert old is not None, up.children()
                before = len(up.lines)
                os.kill(old, signal.SIGKILL)
                await _wait_restarted(up, name, old, before)
                accepted_before = len(load.accepted)
                deadline = time.monotonic() + 20
                while len(load.accepted) < accepted_before + 3:  # the system takes load again
                    assert time.monotonic() < deadline, f"no ingest after killing {name}"
                    assert not sender.done(), sender
                    await asyncio.sleep(0.1)
        finally:
            load.stopping.set()
            await asyncio.wait_for(sender, 60)
        restarts = [line for line in up.lines if line.startswith("  restarting ")]
        assert [line.split()[1] for line in restarts] == list(CHILDREN), up.output

        expected = expected_candidate_ids(load.accepted)
        assert len(expected) >= len(load.accepted) > 50  # at least one candidate per item
        deadline = time.monotonic() + 60
        while set(evidence := await _evidence(runtime["database_url"])) != expected:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        missing = expected - set(evidence)
        extra = set(evidence) - expected
        doubled = {k: v for k, v in evidence.items() if v != 1}
        assert not missing and not extra and not doubled, (
            f"{len(missing)} missing, {len(extra)} unexpected, {len(doubled)} applied twice "
            f"of {len(expected)} (retries: {load.retries})")

        events = await _candidate_events(runtime["nats_url"])
        assert set(events) == expected
        assert all(count == 1 for count in events.values()), {
            k: v for k, v in events.items() if v != 1}
    finally:
        children = up.children() if up.proc.poll() is None else {}
        code = up.stop()
    assert code == 0, up.output
    assert all(_gone(pid) for pid in children.values())  # the servers were stopped too
