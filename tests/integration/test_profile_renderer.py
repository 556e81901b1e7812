"""The profile renderer with the learning service and the gateway, on real servers: facets become
PROFILE.md versions (in Postgres and in the mirror), user edits survive, prompt.context."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.bus import EVENTS, EventPublisher, RpcClient, RpcError
from habitus.db.migrate import migrate
from habitus.events import CATALOG
from habitus.events.domain import CandidateEmitted, RebuildRequested, ToolRuleUpserted
from habitus.events.ingest import ProviderProfileSynced
from habitus.projection.wait import wait_applied
from services.gateway.main import service as gateway
from services.profile_renderer.main import ProfileSettings
from services.profile_renderer.main import build as profile_renderer
from services.profile_renderer.mirror import mirror_path
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running
from tests.support.streams import events_on

pytestmark = pytest.mark.asyncio
T0 = 1_700_000_000.0


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls, tmp_path_factory: Any) -> AsyncIterator[tuple[str, Path]]:
    migrate(servers.database)
    data_dir = tmp_path_factory.mktemp("profiles")
    settings = servers.settings(data_dir=data_dir)
    async with running(learning(LearningSettings(scheduler_enabled=False)), settings), \
            running(profile_renderer(ProfileSettings(mirror=True)), settings), \
            running(gateway, settings) as host:
        yield f"http://127.0.0.1:{host.bound_port}", data_dir


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


class Person:
    def __init__(self, nc: Any, pool: Any, base: str, key: str, tenant: str, data_dir: Path):
        self.nc, self.pool, self.base, self.key, self.tenant = nc, pool, base, key, tenant
        self.user = "alice"
        self.data_dir = data_dir
        self.publisher = EventPublisher(nc.jetstream())
        self.rpc = RpcClient(nc)
        self.n = 0

    async def publish(self, payload: Any, at: float = T0) -> int:
        event = CATALOG.new(payload, tenant_id=self.tenant, user_id=self.user,
                            producer="tests", occurred_at=at)
        return (await self.publisher.publish(event)).seq

    async def learn(self, key: str, value: str, facet_class: str = "style", times: int = 5
                    ) -> None:
        for _ in range(times):
            self.n += 1
            await self.publish(CandidateEmitted.model_validate({
                "class": facet_class, "key": key, "value": value, "cue_family": "explicit",
                "evidence": [], "initial_confidence": 0.9, "observed_at": T0,
                "producer": "tests"}))
        seq = await self.publish(RebuildRequested(as_of=T0))
        await wait_applied(self.pool, "learning", "learning.cache", seq)

    async def call(self, method: str, **params: Any) -> Any:
        return await self.rpc.call(method, self.tenant, {"user_id": self.user, **params})

    async def profile(self) -> dict[str, Any]:
        return dict(await self.call("profile.get"))

    async def settled(self, check: Callable[[str], bool]) -> dict[str, Any]:
        """The profile once the renderer caught up with what the check expects."""
        result: dict[str, Any] = {}

        async def ok() -> bool:
            nonlocal result
            result = await self.profile()
            return check(result["markdown"])

        await until(ok)
        return result

    @property
    def mirror(self) -> Path:
        return mirror_path(self.data_dir, self.tenant, self.user)


@pytest_asyncio.fixture
async def person(stack: tuple[str, Path], nc: Any, pool: Any) -> Person:
    base, data_dir = stack
    tenant = unique("tn")
    return Person(nc, pool, base, await create_key(pool, tenant), tenant, data_dir)


async def test_active_facets_become_a_profile_version_in_postgres_and_the_mirror(
    person: Person, nc: Any
) -> None:
    await person.learn("verbosity", "terse")
    doc = await person.settled(lambda md: "- **verbosity**: terse" in md)
    assert doc["version"] == 1
    assert doc["markdown"].startswith("# User Profile\n\n<!-- habitus:style:start -->\n"
                                      "## Style\n\n- **verbosity**: terse\n\n"
                                      "<!-- habitus:style:end -->\n")
    assert "## Goals\n\n*(no entries yet)*\n" in doc["markdown"]
    await until(lambda: _exists(person.mirror))
    assert person.mirror.read_text() == doc["markdown"]
    rendered = await events_on(
        nc, EVENTS, f"habitus.v1.event.ProfileRendered.{person.tenant}.{person.user}")
    assert [(e.payload.version, e.payload.sha256) for e in rendered] == [(1, doc["sha256"])]


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def test_pin_marks_and_forget_removes(person: Person) -> None:
    await person.learn("verbosity", "terse")
    await person.settled(lambda md: "- **verbosity**: terse\n" in md)
    await person.call("learning.pin_facet", **{"class": "style", "key": "verbosity"})
    await person.settled(lambda md: "- **verbosity**: terse *(pinned)*" in md)
    await person.call("learning.forget_facet", **{"class": "style", "key": "verbosity"})
    doc = await person.settled(lambda md: "verbosity" not in md)
    assert "## Style\n\n*(no entries yet)*" in doc["markdown"]


async def test_a_hand_edit_of_the_mirror_survives_the_next_render(person: Person) -> None:
    await person.learn("verbosity", "terse")
    first = await person.settled(lambda md: "terse" in md)
    await until(lambda: _exists(person.mirror))
    person.mirror.write_text(first["markdown"] + "\nMy own note: I read on mobile.\n")

    await person.learn("emoji", "skip")
    doc = await person.settled(lambda md: "- **emoji**: skip" in md and "mobile" in md)
    assert "My own note: I read on mobile." in doc["markdown"]
    await until(lambda: _file_has(person.mirror, "- **emoji**: skip"))
    assert "My own note: I read on mobile." in person.mirror.read_text()


async def _file_has(path: Path, text: str) -> bool:
    def check() -> bool:
        return path.exists() and text in path.read_text()

    return await asyncio.to_thread(check)


async def test_save_notes_keeps_them_across_renders_and_refuses_a_stale_base(person: Person
                                                                           ) -> None:
    await person.learn("verbosity", "terse")
    doc = await person.settled(lambda md: "terse" in md)
    edited = "Notes before.\n\n" + doc["markdown"].replace("terse", "chatty") + "\nAfter.\n"
    saved = await person.call("profile.save_notes", markdown=edited,
                              base_version=doc["version"])
    assert saved["ignored_blocks"] == ["style"]  # edits inside a managed block are ignored
    after = await person.profile()
    assert after["version"] == saved["version"] > doc["version"]
    assert "Notes before." in after["markdown"] and "After." in after["markdown"]
    assert "- **verbosity**: terse" in after["markdown"]

    with pytest.raises(RpcError) as err:
        await person.call("profile.save_notes", markdown="other", base_version=doc["version"])
    assert err.value.code == "conflict"

    await person.learn("emoji", "skip")  # a re-render after the save keeps the notes
    final = await person.settled(lambda md: "emoji" in md)
    assert "Notes before." in final["markdown"] and "After." in final["markdown"]


async def test_connected_accounts_come_from_provider_syncs(person: Person, nc: Any) -> None:
    await person.publish(ProviderProfileSynced.model_validate({
        "toolkit": "gmail", "connection_id": "c1", "fields": {"email": "a@b.c"}}))
    await person.settled(lambda md: "- gmail (a@b.c)" in md)
    await person.learn("verbosity", "terse")
    doc = await person.settled(lambda md: "terse" in md)
    assert "- gmail (a@b.c)" in doc["markdown"]  # a facet render leaves the block alone


async def test_prompt_context_sections_rules_and_forgotten_facets(person: Person) -> None:
    await person.learn("verbosity", "terse")
    await person.learn("timezone", "PST", facet_class="identity")
    await person.publish(ToolRuleUpserted(rule_id="r1", tool_name="send_email",
                                          rule="Never email Sarah.", priority="critical"))
    await person.call("learning.forget_facet", **{"class": "identity", "key": "timezone"})
    await person.settled(lambda md: "timezone" not in md and "terse" in md)

    async def rules_ready() -> bool:
        ctx = await person.call("prompt.context", tools=["send_email", "memory_recall"])
        return "Never email Sarah." in ctx["text"]

    await until(rules_ready)
    ctx = await person.call("prompt.context", tools=["send_email", "memory_recall"])
    assert [s["name"] for s in ctx["sections"]] == ["user_profile", "memory_access",
                                                    "tool_rules"]
    assert "- **style/verbosity**: terse" in ctx["text"]
    assert "timezone" not in ctx["text"]
    assert "- **[critical]** Never email Sarah." in ctx["text"]
    without = await person.call("prompt.context", tools=["web_search"])
    assert "Sarah" not in without["text"]
    assert [s["name"] for s in without["sections"]] == ["user_profile"]


async def test_profile_md_over_http(person: Person) -> None:
    await person.learn("verbosity", "terse")
    await person.settled(lambda md: "terse" in md)
    async with httpx.AsyncClient(base_url=person.base) as client:
        response = await client.get(f"/v1/users/{person.user}/profile.md",
                                    headers={"Authorization": f"Bearer {person.key}"})
        other = await client.get("/v1/users/alice/profile.md", headers={
            "Authorization": f"Bearer {await create_key(person.pool, unique('tn'))}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/markdown")
    assert "- **verbosity**: terse" in response.text
    assert "terse" not in other.text  # another tenant's alice is another person


async def test_a_save_based_on_a_version_a_render_replaced_keeps_both(person: Person) -> None:
    await person.learn("verbosity", "terse")
    v1 = await person.settled(lambda md: "terse" in md)
    await person.learn("emoji", "skip")  # a render lands between the read and the save
    await person.settled(lambda md: "emoji" in md)
    saved = await person.call("profile.save_notes", markdown=v1["markdown"] + "\nMy note.\n",
                              base_version=v1["version"])
    doc = await person.profile()
    assert doc["version"] == saved["version"]
    assert "My note." in doc["markdown"]  # the user's save
    assert "- **emoji**: skip" in doc["markdown"]  # and the render it raced with


async def test_prompt_context_cache_follows_the_changes(person: Person) -> None:
    await person.learn("verbosity", "terse")
    await person.settled(lambda md: "terse" in md)
    first = await person.call("prompt.context")
    assert first == await person.call("prompt.context")  # served from the cache
    await person.learn("emoji", "skip")
    await person.settled(lambda md: "emoji" in md)

    async def fresh() -> bool:
        return "style/emoji" in (await person.call("prompt.context"))["text"]

    await until(fresh, timeout=5)
