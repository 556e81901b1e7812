"""Commands answer only once every view they change shows it, and never succeed silently.

The learning commands (`update_facet`, `pin_facet`, `unpin_facet`, `forget_facet`,
`reset_cache`) change the facet cache, which the profile renderer turns into PROFILE.md and
`prompt.context`. A caller that gets the answer and reads the prompt next must see the change,
with the prompt cache warm and the projections busy with other users' evidence; and a command
whose event the projection had to dead-letter answers with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from habitus.bus import EventPublisher, RpcClient, RpcError
from habitus.events import CATALOG
from habitus.events.domain import CandidateEmitted, ToolRuleUpserted
from habitus.service.migrations import migrate
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[None]:
    migrate(servers.database)
    settings = servers.settings()
    async with running(learning(LearningSettings(scheduler_enabled=False)), settings), \
            running(profile_renderer(), settings):
        yield


def rule(tenant: str, user: str, n: int) -> Any:
    return CATALOG.new(ToolRuleUpserted(rule_id=f"r{n}", tool_name="send_email",
                                        rule=f"rule {n}", priority="critical"),
                       tenant_id=tenant, user_id=user, producer="tests")


def candidate(tenant: str, user: str, n: int) -> Any:
    return CATALOG.new(CandidateEmitted.model_validate({
        "class": "tooling", "key": f"tool-{n % 7}", "value": f"v{n}", "cue_family": "explicit",
        "evidence": [{"type": "turn", "session_id": "s", "turn_id": f"t{n}"}],
        "initial_confidence": 0.9, "observed_at": 1_700_000_000.0 + n, "producer": "tests",
    }), tenant_id=tenant, user_id=user, producer="tests", occurred_at=1_700_000_000.0 + n)


@contextlib.asynccontextmanager
async def background_load(nc: Any) -> AsyncIterator[list[int]]:
    """Other users' evidence and tool rules, steadily, so that both the learning cache and the
    profile renderer always have batches in flight: about 500 of each a second, paced, so the
    projections stay busy without falling behind (a saturated renderer would only measure how
    far behind it is, and a command then times out, as it should)."""
    publisher = EventPublisher(nc.jetstream())
    tenant = unique("load")
    sent = [0]
    stop = asyncio.Event()

    async def pump() -> None:
        n = 0
        while not stop.is_set():
            await publisher.publish_many(
                [candidate(tenant, f"u{i % 25}", n + i) for i in range(50)]
                + [rule(tenant, f"u{i % 25}", n + i) for i in range(50)])
            n += 100
            sent[0] = n
            await asyncio.sleep(0.1)

    task = asyncio.create_task(pump())
    try:
        yield sent
    finally:
        stop.set()
        await task


async def test_each_command_is_in_the_prompt_and_profile_when_it_answers(
        stack: None, nc: Any) -> None:
    rpc = RpcClient(nc, timeout=30)
    tenant, user = unique("tn"), "u1"

    async def call(method: str, **params: Any) -> Any:
        return await rpc.call(method, tenant, {"user_id": user, **params})

    async def prompt() -> str:
        return str((await call("prompt.context"))["text"])

    async def profile() -> str:
        return str((await call("profile.get"))["markdown"])

    async with background_load(nc) as sent:
        for round_ in range(6):
            key = f"tone-{round_}"
            ref = {"class": "style", "key": key}
            await prompt()  # warm the cache with the state before the command
            await call("learning.update_facet", **ref, value=f"formal-{round_}")
            assert f"**style/{key}**: formal-{round_} *(set by the user)*" in await prompt()
            assert f"- **{key}**: formal-{round_} *(set by the user)*" in await profile()

            await call("learning.unpin_facet", **ref)  # no evidence: the facet goes
            assert key not in await prompt()

            await call("learning.update_facet", **ref, value=f"casual-{round_}")
            await prompt()
            await call("learning.pin_facet", **ref)
            assert f"**style/{key}**: casual-{round_} *(set by the user)*" in await prompt()

            await prompt()
            await call("learning.forget_facet", **ref)
            assert key not in await prompt()
            assert key not in await profile()

        await call("learning.update_facet", **{"class": "style", "key": "verbosity"},
                   value="terse")
        await prompt()
        await call("learning.reset_cache")
        assert "verbosity" in await prompt()  # pinned facets survive a reset of the learned
    assert sent[0] >= 200  # the load really ran alongside


async def test_a_command_whose_event_was_dead_lettered_answers_the_reason(
        stack: None, nc: Any) -> None:
    rpc = RpcClient(nc, timeout=30)
    tenant = unique("tn")
    ref = {"user_id": "u1", "class": "style", "key": "tone"}
    await rpc.call("learning.update_facet", tenant, {**ref, "value": "formal"})

    # A NUL byte passes the parameter model (it is a string) but Postgres cannot store it.
    with pytest.raises(RpcError) as caught:
        await rpc.call("learning.update_facet", tenant, {**ref, "value": "for\x00mal"})

    assert caught.value.code == "invalid_argument"
    assert "DataError" in caught.value.message
    facet = await rpc.call("learning.get_facet", tenant, ref)
    assert facet["value"] == "formal"
