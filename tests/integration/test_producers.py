"""The producers service against real NATS and Postgres, fed through the gateway."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.bus import DLQ, EVENTS, RpcClient
from habitus.events import Event
from habitus.projection import dlq as dlqh
from habitus.service.migrations import migrate
from habitus.subjects import ingest_subject, parse_subject
from services.gateway.main import service as gateway
from services.producers.main import build as producers
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.services import running
from tests.support.streams import events_on, fetch_all

pytestmark = pytest.mark.asyncio
NOW = 1_790_000_000.0


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    settings = servers.settings()
    async with running(producers(), settings), \
            running(learning(LearningSettings(scheduler_enabled=False)), settings), \
            running(profile_renderer(), settings), \
            running(gateway, settings) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


class Agent:
    """An agent reporting for one user of a fresh tenant, over HTTP."""

    def __init__(self, base: str, key: str, tenant: str, nc: Any):
        self.base, self.key, self.tenant, self.nc = base, key, tenant, nc
        self.user = "alice"
        self.n = 0
        self.now = NOW

    async def post(self, *items: dict[str, Any]) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=self.base, timeout=15, verify=TLS) as client:
            response = await client.post("/v1/events", json=list(items),
                                         headers={"Authorization": f"Bearer {self.key}"})
        assert response.status_code == 200, response.text
        return list(response.json()["results"])

    def turn(self, message: str, *, after: float | None = 10.0, assistant: str = "x" * 100,
             at: float | None = None) -> dict[str, Any]:
        self.n += 1
        t = at if at is not None else self.now + self.n * 1000
        payload: dict[str, Any] = {
            "session_id": "s1", "turn_id": f"t{self.n}", "channel": "web",
            "user_message": message, "assistant_message": assistant,
            "user_at": t, "assistant_at": t + 5,
        }
        if after is not None:
            payload["previous_assistant_at"] = t - after
        return {"type": "TurnRecorded", "user_id": self.user, "payload": payload}

    def email(self, body: str, direction: str = "sent") -> dict[str, Any]:
        self.n += 1
        return {"type": "EmailObserved", "user_id": self.user, "payload": {
            "message_id": f"m{self.n}", "direction": direction, "from": "alice@acme.test",
            "to": ["bob@acme.test"], "subject": "hi", "body": body, "sent_at": self.now + self.n}}

    async def candidates(self, expect: int, timeout: float = 20.0) -> list[Event[Any]]:
        """The CandidateEmitted events of this user, once at least `expect` arrived."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            found = await self._read(
                f"habitus.v1.event.CandidateEmitted.{self.tenant}.{self.user}.>")
            if len(found) >= expect or asyncio.get_running_loop().time() > deadline:
                await asyncio.sleep(0.3)  # nothing more is on its way
                return await self._read(
                    f"habitus.v1.event.CandidateEmitted.{self.tenant}.{self.user}.>")
            await asyncio.sleep(0.1)

    async def _read(self, subject: str) -> list[Event[Any]]:
        return await events_on(self.nc, EVENTS, subject)


@pytest_asyncio.fixture
async def agent(stack: str, pool: Any, nc: Any) -> Agent:
    tenant = unique("tn")
    return Agent(stack, await create_key(pool, tenant), tenant, nc)


def facets(events: list[Event[Any]]) -> set[tuple[str, str, str, str]]:
    return {(e.payload.class_.value, e.payload.key, e.payload.value, e.payload.producer)
            for e in events}


async def test_a_correction_soon_after_the_reply_becomes_a_style_candidate(agent: Agent) -> None:
    [result] = await agent.post(agent.turn("shorter please", after=10))
    await asyncio.sleep(1.0)  # time for a second candidate, if one were (wrongly) made
    # a one-off said in so many words: the reader's reading (with its stance) is the one
    # evidence of those words, not a second one from the edit window
    [event] = await agent.candidates(1)
    p = event.payload
    assert (p.class_.value, p.key, p.value, p.cue_family.value, p.stance) == (
        "style", "verbosity", "terse", "explicit", "one_off")
    assert p.initial_confidence == pytest.approx(0.90)
    assert event.causation_id == result["event_id"]
    assert [r.model_dump() for r in p.evidence] == [
        {"type": "turn", "session_id": "s1", "turn_id": "t1"}]


async def test_a_sent_signature_becomes_identity_candidates_a_received_one_does_not(
    agent: Agent
) -> None:
    body = ("Hi Bob,\nsee you Thursday.\n\nThanks,\nAlice Johnson\nSenior Software Engineer\n"
            "Acme Corp\nSan Francisco, CA\nPST")
    await agent.post(agent.email(body, direction="received"), agent.email(body))
    found = facets(await agent.candidates(4))
    assert {("identity", "name", "Alice Johnson", "email_signature"),
            ("identity", "role", "software engineer", "email_signature"),
            ("identity", "timezone", "America/Los_Angeles", "email_signature"),
            ("identity", "employer", "Acme Corp", "email_signature")} <= found
    events = await agent.candidates(4)
    assert {r.model_dump()["message_id"] for e in events for r in e.payload.evidence} == {"m2"}


async def test_the_same_ingest_event_twice_yields_one_candidate(agent: Agent, nc: Any) -> None:
    item = agent.turn("shorter please", after=10)
    [result] = await agent.post(item)
    # The same event stored a second time under another message id (past the stream's
    # duplicate window): the producers see it twice, the candidate stays one.
    msg = await nc.jetstream().get_msg("HABITUS_INGEST", result["seq"])
    await nc.jetstream().publish(parse_subject(msg.subject).published, msg.data,
                                 headers={"Nats-Msg-Id": unique("again")})
    # and an agent re-sending its batch: no event_id given, the turn's natural key derives it
    again = await agent.post(item)
    assert again[0]["status"] == "duplicate"
    assert again[0]["event_id"] == result["event_id"]
    await asyncio.sleep(1.0)
    assert len(await agent.candidates(1)) == 1  # the statement, once


async def test_a_malformed_ingest_event_goes_to_the_dlq_and_the_next_still_produces(
    agent: Agent, nc: Any
) -> None:
    subject = ingest_subject("turn", agent.tenant, agent.user)
    bad = json.dumps({"type": "TurnRecorded", "event_id": "nope", "payload": {}}).encode()
    ack = await nc.jetstream().publish(subject, bad)
    await agent.post(agent.turn("shorter please", after=10))
    assert len(await agent.candidates(1)) == 1
    letters = await dlq_for(nc, agent.tenant)
    assert [m.headers[dlqh.ORIGINAL_SEQ] for m in letters] == [str(ack.seq)]
    assert letters[0].headers[dlqh.REASON] == "invalid_event"


async def dlq_for(nc: Any, tenant: str) -> list[Any]:
    return await fetch_all(nc, DLQ, f"habitus.v1.dlq.proj_producers_candidates.{tenant}.*",
                           wait=1.0)


@pytest.mark.slow
async def test_emails_and_turns_become_active_identity_and_style_facets(agent: Agent, nc: Any
                                                                        ) -> None:
    # rebuild_cache asks "as of now", so the evidence is from the last two hours
    agent.now = time.time() - 7200
    signature = "\n\nBest,\nAlice Johnson\nStaff Engineer\nAcme Corp\nPST"
    emails = [agent.email(f"Update {i}.{signature}") for i in range(5)]
    # ten corrections, each outside the previous one's 300 s cooldown: 10 Behavioral items
    corrections = [agent.turn("too long, shorter please", after=5, at=agent.now + 400 * i)
                   for i in range(1, 11)]
    await agent.post(*emails, *corrections)
    await agent.candidates(30)
    rpc = RpcClient(nc)
    await rpc.call("learning.rebuild_cache", agent.tenant, {"user_id": agent.user})
    listed = await rpc.call("learning.list_facets", agent.tenant, {"user_id": agent.user})
    active = {(f["class"], f["key"]): f["value"] for f in listed["facets"]
              if f["state"] == "active"}
    assert active[("identity", "name")] == "Alice Johnson"
    assert active[("identity", "timezone")] == "America/Los_Angeles"
    assert active[("identity", "employer")] == "Acme Corp"
    assert active[("style", "verbosity")] == "terse"


async def test_an_agents_confirmation_question_is_settled_by_the_users_next_answer(
        agent: Agent) -> None:
    """The question is read with the batch's user messages (ahead of the apply): "yes" sets
    the facet it proposes, "no" drops it, in the same batch as the question or the next."""
    asked = "Done. Should I remember that you prefer short answers?"
    for user, answer in (("ana", "yes please"), ("ben", "no")):
        agent.user = user
        await agent.post(agent.turn("can you fix the failing test", assistant=asked),
                         agent.turn(answer))
    agent.user = "cho"  # the question in one batch, the answer in the next
    await agent.post(agent.turn("can you fix the failing test", assistant=asked))
    await agent.post(agent.turn("yes"))
    for user, stance, answered in (("ana", "confirmed", "t2"), ("ben", "denied", "t4"),
                                   ("cho", "confirmed", "t6")):
        agent.user = user
        [event] = await agent.candidates(1)
        p = event.payload
        assert (p.class_.value, p.key, p.value, p.stance) == (
            "style", "verbosity", "terse", stance), user
        assert [r.model_dump()["turn_id"] for r in p.evidence] == [answered]
