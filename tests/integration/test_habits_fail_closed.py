"""The habits service failing closed on real servers: without a working sentence encoder no
habit is created or activated and nothing is selected; without an LLM endpoint Analyze says
why it cannot run and nothing is selected, while declarations and review still work.

Each test has a stack of its own, up only while it runs (two habits services up at once would
share the calls out between them): one whose encoder fails for every text but the few a test
fixes (the stack's embedder answers fixed vectors itself), one with no LLM endpoint at all."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.llm import LlmSettings
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.habits.embedding import Unavailable
from services.habits.main import build as habits
from services.habits.settings import HabitsSettings
from services.profile_renderer.main import build as profile_renderer
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.habits_model import JUDGE, judgments
from tests.support.habits_stack import ENCODER, Client, Mixed, Stack, habits_stack, observed
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest_asyncio.fixture
async def broken(servers: ServerUrls) -> AsyncIterator[Stack]:
    """The encoder fails (except for the texts a test fixes)."""
    async with habits_stack(servers, embedder=Unavailable("the encoder files are missing")) as s:
        yield s


@asynccontextmanager
async def without_llm(servers: ServerUrls) -> AsyncIterator[str]:
    """The gateway, the habits service with no LLM endpoint and the real encoder, and the
    profile renderer; yields the gateway's base URL."""
    migrate(servers.database)
    config = HabitsSettings(schedule_seconds=3600.0, llm=LlmSettings(base_url=None, model=None))
    assert config.llm.disabled_reason() is not None
    s = servers.settings()
    async with running(habits(config, embedder=Mixed(ENCODER)), s), \
            running(profile_renderer(), s), running(gateway, s) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


@pytest_asyncio.fixture
async def no_llm(servers: ServerUrls) -> AsyncIterator[str]:
    async with without_llm(servers) as base:
        yield base


async def _client(base: str, pool: Any) -> Client:
    tenant = unique("acme")
    return Client(base, await create_key(pool, tenant), tenant)


def has_habits_section(context: dict[str, Any]) -> bool:
    return "habits" in {s["name"] for s in context["sections"]}


async def test_without_the_encoder_nothing_is_created_activated_or_selected(
        broken: Stack, pool: Any) -> None:
    acme = await _client(broken.base, pool)
    user = unique("dana")
    response = await acme.call("habits.declare", user_id=user,
                               when="When I ask for a status report",
                               do="Start with a one-line summary")
    assert response.status_code == 503, response.text
    assert response.headers.get("Retry-After", "").isdigit(), response.headers
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert "nothing is activated" in error["message"]
    assert "the encoder files are missing" in error["message"]
    assert await acme.habits(user) == []  # not even a candidate
    assert await acme.rpc("habits.list_review", user_id=user) == {
        "items": [], "pending_duplicates": 0}

    # a user with a habit the embedder has a (fixed) vector for: selection needs the
    # request's vector too, and there is none
    other = unique("eli")
    broken.embedder.fix({"When I ask for meeting notes": [1.0, 0.0, 0.0],
                         "Put the action items first": [0.0, 1.0, 0.0]})
    kept = await acme.declare(other, "When I ask for meeting notes",
                              "Put the action items first")
    assert kept["outcome"] == "accepted_active"
    status, message = await acme.refused("habits.declare", user_id=other,
                                         when="When I ask for a changelog",
                                         do="Group the entries by type")
    assert status == 503 and "duplicate checks cannot run" in message
    assert [h["habit_id"] for h in await acme.habits(other)] == [kept["habit"]["habit_id"]]

    marker = unique("wk")
    broken.model.script(marker, JUDGE, lambda p: judgments(p, lambda _: True))
    request = f"Can you write up the meeting notes from this morning? {marker}"
    chosen = await acme.rpc("habits.select", user_id=other, request=request)
    assert chosen["habits"] == [] and chosen["section"] == "" and chosen["steered_by"] == []
    assert chosen["reason"].startswith("unavailable"), chosen
    assert "the encoder files are missing" in chosen["reason"]
    context = await acme.rpc("prompt.context", user_id=other, request=request)
    assert not has_habits_section(context) and context.get("steered_by", []) == []
    assert broken.model.calls(marker, JUDGE) == []  # the judge was never asked


async def test_without_an_llm_endpoint_analyze_says_why_and_nothing_is_selected(
        no_llm: str, pool: Any) -> None:
    acme = await _client(no_llm, pool)
    user = unique("finn")
    said = ["Give me the status report, one line of summary first",
            "Again: the status report starts with a one-line summary",
            "Status report please, summary line on top"]
    await acme.send(*(acme.turn(user, s) for s in said))
    await observed(pool, acme.tenant, user, 3)

    analysis = await acme.rpc("habits.analyze", user_id=user)
    assert "no LLM endpoint" in (analysis["error"] or ""), analysis
    assert "HABITUS_LLM_BASE_URL" in analysis["error"]
    assert analysis["batches"] == 0 and analysis["records"] == 0
    assert analysis["remaining"] == 3  # nothing read: the next run with a model reads them
    assert await acme.habits(user) == []
    # and a listing says why it is empty (what `habitus habits list` prints)
    listed = await acme.rpc("habits.list", user_id=user)
    assert listed == {"habits": [], "proposals_off": "HABITUS_LLM_BASE_URL is unset"}

    # declaring and review still work; the judge is mandatory, so nothing is selected
    declared = await acme.declare(user, "When I ask for a status report",
                                  "Start with a one-line summary")
    assert declared["outcome"] == "accepted_active"
    request = "Can you give me the status report for this week?"
    chosen = await acme.rpc("habits.select", user_id=user, request=request)
    assert chosen["habits"] == [] and chosen["section"] == "" and chosen["steered_by"] == []
    assert chosen["reason"].startswith("unavailable") and "no LLM endpoint" in chosen["reason"]
    context = await acme.rpc("prompt.context", user_id=user, request=request)
    assert not has_habits_section(context) and context.get("steered_by", []) == []
