"""The profile renderer with the learning service and the gateway, on real servers: facets become
PROFILE.md versions (in Postgres and in the mirror), user edits survive, prompt.context."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from redis.asyncio import Redis

from habitus.auth.keys import create_key
from habitus.bus import EVENTS, EventPublisher, RpcClient, RpcError
from habitus.context_cache import READ_CREDITS, context_keys, field_for, read_context
from habitus.crypto.columns import COLUMNS, PREFIX
from habitus.events import CATALOG
from habitus.events.domain import (
    CacheRebuilt,
    CandidateEmitted,
    RebuildRequested,
    ToolRuleUpserted,
)
from habitus.events.ingest import ProviderProfileSynced
from habitus.projection.wait import wait_applied
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.profile_renderer.main import ProfileSettings
from services.profile_renderer.main import build as profile_renderer
from services.profile_renderer.mirror import mirror_path
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.services import running
from tests.support.statements import CountingCursor
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
        nc, EVENTS, f"habitus.v1.event.ProfileRendered.{person.tenant}.{person.user}.>")
    assert [(e.payload.version, e.payload.sha256) for e in rendered] == [(1, doc["sha256"])]


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def test_pin_marks_and_forget_removes(person: Person) -> None:
    await person.learn("verbosity", "terse")
    await person.settled(lambda md: "- **verbosity**: terse\n" in md)
    await person.call("learning.pin_facet", **{"class": "style", "key": "verbosity"})
    await person.settled(lambda md: "- **verbosity**: terse *(set by the user)*" in md)
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


async def test_a_mirror_that_cannot_be_written_does_not_stop_the_others(person: Person
                                                                        ) -> None:
    """A user whose PROFILE.md cannot be written (here a folder stands in its place) keeps
    their profile in Postgres; the users rendered with or after them get their files."""
    blocked = person.mirror
    blocked.mkdir(parents=True)  # the file's place is taken
    await person.learn("verbosity", "terse")
    await person.settled(lambda md: "terse" in md)
    person.user = "bob"
    await person.learn("emoji", "skip")
    doc = await person.settled(lambda md: "- **emoji**: skip" in md)
    await until(lambda: _exists(person.mirror))
    assert person.mirror.read_text() == doc["markdown"]
    assert blocked.is_dir()


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
    async with httpx.AsyncClient(base_url=person.base, verify=TLS) as client:
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


async def test_a_changed_users_read_contexts_are_rebuilt_before_the_next_read(
        person: Person, servers: ServerUrls) -> None:
    """An agent reads its user's context on every turn, and those users' turns keep changing
    it: after each change the entries read lately are built again, so the next read is a
    cache hit (what the gateway serves), not a build queued behind the renderer's batches. A
    read pays for `READ_CREDITS` rebuilds ahead: an entry not read again stops being built,
    and a variant nobody asked for is never built. Entries are read here as the gateway reads
    them (which gives rebuilds) or peeked at raw (which does not)."""
    await person.learn("verbosity", "terse")
    await person.settled(lambda md: "terse" in md)
    read, peeked, never = (field_for(["send_email"], 600, False), field_for(None, 300, False),
                           field_for(None, None, False))
    redis = Redis.from_url(servers.redis)
    entries = context_keys(person.tenant, person.user)[1]

    async def peek(field: str) -> str | None:
        raw = await redis.hget(entries, field)
        return None if raw is None else str(json.loads(raw)["text"])

    async def change(key: str, value: str) -> None:
        """A change of the user's facets, once PROFILE.md shows it and `read` (read as the
        gateway reads it) was built again with it; the same round builds `peeked`, if at all."""
        await person.learn(key, value)
        await person.settled(lambda md: value in md)

        async def rebuilt() -> bool:
            hit = await read_context(redis, person.tenant, person.user, read)
            return hit is not None and f"style/{key}" in hit["text"]
        await until(rebuilt, timeout=10)

    async def missed(field: str, **params: Any) -> None:
        """A miss that built and stored the variant (a put can be turned away by the render
        batch still finishing; the read is then made again)."""
        async def stored() -> bool:
            await person.call("prompt.context", **params)
            return await peek(field) is not None
        await until(stored, timeout=10)

    try:
        await missed(read, tools=["send_email"], budget_chars=600)
        await missed(peeked, budget_chars=300)
        await change("emoji", "skip")
        hit = await read_context(redis, person.tenant, person.user, read)
        await redis.hdel(entries, read)  # the next call builds it again from Postgres
        assert hit == {k: v for k, v in (await person.call(
            "prompt.context", tools=["send_email"], budget_chars=600)).items()
            if k != "steered_by"}  # a rebuilt entry is what a build gives now
        # `peeked` was read once, by its miss: it is built again after the next changes until
        # that read's rebuilds are spent (the first change spent one), and never after
        shown = []
        for key, value in (("tone", "casual"), ("format", "tables"), ("code_style", "typed"),
                           ("length", "short")):
            await change(key, value)  # `peeked` is put in the same transaction as `read`
            shown.append(f"style/{key}" in (await peek(peeked) or ""))
        assert shown[-1] is False and sum(shown) < READ_CREDITS
        assert shown == sorted(shown, reverse=True), shown  # built, then not any more
        assert await peek(never) is None
    finally:
        await redis.aclose()


# -- what the user set, what is not yet sure ---------------------------------------------------


def rebuilt(active: list[dict[str, Any]], provisional: list[dict[str, Any]]) -> CacheRebuilt:
    """A `CacheRebuilt` as the learning cache publishes it, carrying these lists."""
    return CacheRebuilt.model_validate({
        "as_of": T0, "added": len(active), "evicted": 0, "kept": 0, "total_size": len(active),
        "active": [{"stability": 3.0, **f} for f in active],
        "provisional": [{"stability": 1.0, "evidence": [], **f} for f in provisional]})


UNSURE_ROWS = {
    "verbosity": "- **style/verbosity**: terse \u2014 2 chat turns",
    "role": "- **identity/role**: engineer \u2014 1 email signature",
    "editor": "- **tooling/editor**: Vim",
    "language": "- **style/language**: German \u2014 1 email signature, 2 chat turns",
}
UNSURE = [
    {"class": "style", "key": "verbosity", "value": "terse", "stability": 1.4,
     "evidence": ["2 chat turns"]},
    {"class": "identity", "key": "role", "value": "engineer", "stability": 1.3,
     "evidence": ["1 email signature"]},
    {"class": "tooling", "key": "editor", "value": "vim", "stability": 1.2},
    {"class": "style", "key": "language", "value": "de", "stability": 1.1,
     "evidence": ["1 email signature", "2 chat turns"]},
]


async def test_only_what_the_user_set_is_marked_and_not_yet_sure_facets_get_their_block(
        person: Person) -> None:
    await person.publish(rebuilt(
        [{"class": "style", "key": "preamble", "value": "skip", "origin": "set_by_user"},
         {"class": "style", "key": "tone", "value": "dry", "origin": "stated"},
         {"class": "identity", "key": "name", "value": "Alice", "origin": "provider"}],
        UNSURE))
    doc = await person.settled(lambda md: UNSURE_ROWS["language"] in md)
    md = doc["markdown"]
    assert "## Style\n\n- **preamble**: skip *(set by the user)*\n- **tone**: dry\n\n" in md
    assert "- **name**: Alice\n" in md and "pinned" not in md
    assert ("<!-- habitus:goals:end -->\n\n<!-- habitus:not-yet-sure:start -->\n"
            "## Not yet sure\n\n"
            "*Move a line into your profile above to confirm it, or delete it to forget it.*"
            "\n\n" + "\n".join(UNSURE_ROWS.values()) + "\n\n"
            "<!-- habitus:not-yet-sure:end -->\n\n<!-- habitus:connected-accounts:start -->"
            ) in md
    context = await person.call("prompt.context")
    assert "- **style/preamble**: skip *(set by the user)*\n" in context["text"]
    assert "- **style/tone**: dry\n" in context["text"]
    assert "engineer" not in context["text"]  # a guess is no part of the profile

    await person.publish(rebuilt([], UNSURE[1:2]))  # each rebuild states the whole list
    doc = await person.settled(lambda md: UNSURE_ROWS["language"] not in md)
    assert UNSURE_ROWS["role"] in doc["markdown"] and "verbosity" not in doc["markdown"]
    await person.publish(rebuilt([], []))
    doc = await person.settled(lambda md: "role" not in md)
    assert "## Not yet sure\n\n*(no entries yet)*\n" in doc["markdown"]


async def _commands_on(nc: Any, person: Person, event_type: str) -> list[Any]:
    return await events_on(
        nc, EVENTS, f"habitus.v1.event.{event_type}.{person.tenant}.{person.user}.>")


async def test_saving_settles_the_lines_deleted_or_moved_out_of_not_yet_sure(
        person: Person, nc: Any) -> None:
    await person.publish(rebuilt([], UNSURE))
    doc = await person.settled(lambda md: UNSURE_ROWS["language"] in md)
    md = doc["markdown"]
    edited = (md.replace(UNSURE_ROWS["verbosity"] + "\n", "")  # deleted: forget it
              .replace(UNSURE_ROWS["role"] + "\n", "")  # moved into the notes: confirm it
              .replace(UNSURE_ROWS["editor"] + "\n", "")  # moved into its block: confirm it
              .replace("## Tooling\n\n*(no entries yet)*\n",
                       f"## Tooling\n\n*(no entries yet)*\n{UNSURE_ROWS['editor']}\n")
              .replace("# User Profile\n\n", f"# User Profile\n\nAbout me:\n"
                                             f"{UNSURE_ROWS['role']}\n\n"))
    saved = await person.call("profile.save_notes", markdown=edited,
                              base_version=doc["version"])
    assert saved["forgotten"] == [{"class": "style", "key": "verbosity", "value": "terse"}]
    assert saved["confirmed"] == [{"class": "identity", "key": "role", "value": "engineer"},
                                  {"class": "tooling", "key": "editor", "value": "vim"}]
    assert saved["ignored_blocks"] == []  # the block edits were taken, as commands

    forgotten = await _commands_on(nc, person, "FacetForgotten")
    assert [(e.payload.class_.value, e.payload.key, e.producer) for e in forgotten] == [
        ("style", "verbosity", "profile.rpc")]
    updated = await _commands_on(nc, person, "FacetUpdated")
    assert [(e.payload.class_.value, e.payload.key, e.payload.value) for e in updated] == [
        ("identity", "role", "engineer"), ("tooling", "editor", "vim")]
    # answered once PROFILE.md shows the outcome: confirmed facets are the user's settings
    after = (await person.profile())["markdown"]
    assert "## Identity\n\n- **role**: engineer *(set by the user)*\n" in after
    assert "## Tooling\n\n- **editor**: vim *(set by the user)*\n" in after
    assert f"About me:\n{UNSURE_ROWS['role']}\n" in after  # the user's own text is kept
    assert "style/verbosity" not in after
    facet = await person.call("learning.get_facet", **{"class": "identity", "key": "role"})
    assert facet["value"] == "engineer" and facet["state"] == "active"
    context = await person.call("prompt.context")
    assert "- **identity/role**: engineer *(set by the user)*\n" in context["text"]


async def test_a_save_that_loses_the_compare_and_swap_settles_nothing(person: Person,
                                                                      nc: Any) -> None:
    await person.publish(rebuilt([], UNSURE))
    doc = await person.settled(lambda md: UNSURE_ROWS["language"] in md)
    await person.call("profile.save_notes", markdown=doc["markdown"] + "\nA note.\n",
                      base_version=doc["version"])
    stale = doc["markdown"].replace(UNSURE_ROWS["verbosity"] + "\n", "")
    with pytest.raises(RpcError) as err:
        await person.call("profile.save_notes", markdown=stale, base_version=doc["version"])
    assert err.value.code == "conflict"
    assert await _commands_on(nc, person, "FacetForgotten") == []
    # a line the user kept, and one a render added after the version they edited, stay
    latest = await person.profile()
    assert UNSURE_ROWS["verbosity"] in latest["markdown"]
    await person.publish(rebuilt([], [*UNSURE, {"class": "identity", "key": "team",
                                                "value": "billing", "stability": 1.0}]))
    await person.settled(lambda md: "**identity/team**: billing" in md)
    edited = latest["markdown"].replace(UNSURE_ROWS["editor"] + "\n", "")
    saved = await person.call("profile.save_notes", markdown=edited,
                              base_version=latest["version"])
    assert saved["forgotten"] == [{"class": "tooling", "key": "editor", "value": "vim"}]
    assert saved["confirmed"] == []


async def test_prompt_context_asks_about_unconfirmed_facets_only_when_asked(
        person: Person) -> None:
    await person.publish(rebuilt([{"class": "style", "key": "tone", "value": "dry"}],
                                 UNSURE[:2]))
    await person.settled(lambda md: UNSURE_ROWS["role"] in md)
    plain = await person.call("prompt.context")
    asked = await person.call("prompt.context", unconfirmed=True)
    assert [s["name"] for s in plain["sections"]] == ["user_profile"]
    assert [s["name"] for s in asked["sections"]] == ["user_profile", "unconfirmed"]
    assert asked["sections"][0] == plain["sections"][0]
    assert asked["sections"][1]["content"] == (
        "## Not yet confirmed\n\n"
        "These may be true of the user but are not confirmed. Do not act on them; if one"
        " matters to the answer, ask the question given once, and take the user's yes or no"
        " as the answer.\n\n"
        '- you prefer short answers \u2014 ask: "Should I remember that you prefer short'
        ' answers?"\n'
        '- you work as an engineer \u2014 ask: "Should I remember that you work as an'
        ' engineer?"\n')
    assert "Not yet confirmed" not in plain["text"] and "engineer" not in plain["text"]
    # each variant has its own cache entry: neither is ever served for the other
    assert await person.call("prompt.context") == plain
    assert await person.call("prompt.context", unconfirmed=True) == asked
    assert await person.call("prompt.context", unconfirmed=False) == plain
    await person.publish(rebuilt([{"class": "style", "key": "tone", "value": "dry"}], []))

    async def settled() -> bool:
        ctx = await person.call("prompt.context", unconfirmed=True)
        return [s["name"] for s in ctx["sections"]] == ["user_profile"]

    await until(settled)


# -- what Postgres keeps of the person's text ---------------------------------------------------


async def _raw(person: Person, sql: str) -> list[tuple[Any, ...]]:
    async with person.pool.connection() as conn:
        cur = await conn.execute(sql, (person.tenant, person.user))
        return list(await cur.fetchall())


async def test_postgres_keeps_only_ciphertext_and_every_answer_is_text(person: Person) -> None:
    """A facet, a not-yet-sure facet and its evidence, an account's address, a rule and the
    user's own notes: each is sealed in its column (unreadable once the user's key is
    destroyed), and PROFILE.md, its sha256 and prompt.context are what they always were."""
    assert COLUMNS.keyring is not None  # the suite runs with encryption on
    secrets = ("Quokkaville", "axolotl", "Bartholomew", "zed@quokka.example", "Persephone",
               "Marmalade")
    await person.publish(ProviderProfileSynced.model_validate({
        "toolkit": "gmail", "connection_id": "c1", "fields": {"email": "zed@quokka.example"}}))
    await person.publish(ToolRuleUpserted(rule_id="r1", tool_name="send_email",
                                          rule="Never email Persephone.", priority="critical"))
    await person.publish(rebuilt(
        [{"class": "identity", "key": "hometown", "value": "Quokkaville"}],
        [{"class": "identity", "key": "pet", "value": "axolotl", "stability": 1.2,
          "evidence": ["told about Bartholomew"]}]))
    doc = await person.settled(lambda md: "axolotl" in md and "zed@quokka" in md)
    saved = await person.call("profile.save_notes", base_version=doc["version"],
                              markdown=doc["markdown"] + "\nMarmalade is my secret.\n")

    profile = await person.profile()
    assert profile["version"] == saved["version"]
    for text in ("- **hometown**: Quokkaville", "axolotl", "Bartholomew",
                 "- gmail (zed@quokka.example)", "Marmalade is my secret."):
        assert text in profile["markdown"]
    assert profile["sha256"] == hashlib.sha256(profile["markdown"].encode()).hexdigest()

    async def rule_ready() -> bool:
        ctx = await person.call("prompt.context", tools=["send_email"], unconfirmed=True)
        return "Never email Persephone." in ctx["text"]

    await until(rule_ready)
    ctx = (await person.call("prompt.context", tools=["send_email"], unconfirmed=True))["text"]
    for text in ("- **identity/hometown**: Quokkaville", "axolotl", "Marmalade is my secret.",
                 "- **[critical]** Never email Persephone."):
        assert text in ctx

    where = "WHERE tenant_id = %s AND user_id = %s"
    cells = [
        *(c for row in await _raw(person, f"SELECT key, value FROM profile.facets {where}")
          for c in row),
        *(c for k, v, evidence in await _raw(
            person, f"SELECT key, value, evidence FROM profile.provisional_facets {where}")
          for c in (k, v, *evidence)),
        *(r[0] for r in await _raw(person, f"SELECT label FROM profile.accounts {where}")),
        *(r[0] for r in await _raw(person, f"SELECT rule FROM profile.tool_rules {where}")),
    ]
    documents = await _raw(person, "SELECT version, markdown, sha256 FROM profile.documents "
                                   f"{where} ORDER BY version")
    assert len(cells) == 7 and len(documents) == saved["version"]
    for cell in [*cells, *(d[1] for d in documents)]:
        assert cell.startswith(PREFIX), cell
        assert not any(s in cell for s in secrets), cell
    assert documents[-1][2] == profile["sha256"]  # the hash of the text, not of its seal


async def test_a_run_of_rebuilt_caches_renders_each_in_statements_that_do_not_grow(
        stack: tuple[str, Path], pool: Any) -> None:
    """A run of `CacheRebuilt` events (one user twice) is rendered in as many statements for
    12 users as for 3, and gives what applying each event alone gives: the same versions, the
    same texts, the same events, and each user's tables holding their last lists."""
    from habitus.projection import ApplyContext, Delivered
    from services.profile_renderer import store
    from services.profile_renderer.projection import RenderProjection

    def run_for(tenant: str, size: int) -> list[Any]:
        events = [CATALOG.new(rebuilt(
            [{"class": "style", "key": "verbosity", "value": ("terse", "detailed")[i % 2]},
             {"class": "tooling", "key": "editor", "value": f"editor{i}"}],
            [{"class": "style", "key": "tone", "value": "plain", "stability": 1.2 + i / 100}]),
            tenant_id=tenant, user_id=f"u{i}", producer="tests", occurred_at=T0 + i)
            for i in range(size)]
        events.insert(size // 2, CATALOG.new(rebuilt(  # the first user again, changed
            [{"class": "style", "key": "verbosity", "value": "detailed"}], []),
            tenant_id=tenant, user_id="u0", producer="tests", occurred_at=T0 + 50))
        return events

    async def apply(events: list[Any], *, together: bool) -> tuple[int, list[Any]]:
        projection, ctx, statements = RenderProjection(), ApplyContext(), 0
        batches = [events] if together else [[e] for e in events]
        for n, batch in enumerate(batches):
            async with pool.connection() as conn:
                cur = CountingCursor(conn)
                await projection.apply_batch(
                    cur, [Delivered(e, 1 + n + k, "", 1) for k, e in enumerate(batch)], ctx)
                await conn.commit()
                statements += cur.statements
        return statements, ctx.emitted

    async def state(tenant: str, users: list[str]) -> dict[str, Any]:
        async with pool.connection() as conn, conn.cursor() as cur:
            return {u: (await store.latest(cur, tenant, u), await store.load_facets(cur, tenant, u),
                        await store.load_provisional(cur, tenant, u)) for u in users}

    costs = {}
    for size in (3, 12):
        together, alone = unique("tn"), unique("tn")
        users = [f"u{i}" for i in range(size)]
        costs[size], emitted = await apply(run_for(together, size), together=True)
        _, emitted_alone = await apply(run_for(alone, size), together=False)
        assert [(e.user_id, e.payload.version, e.payload.sha256) for e in emitted] == [
            (e.user_id, e.payload.version, e.payload.sha256) for e in emitted_alone]
        assert len(emitted) == size + 1
        got, expected = await state(together, users), await state(alone, users)
        for u in users:
            doc, facets, unsure = got[u]
            doc_alone, facets_alone, unsure_alone = expected[u]
            assert doc is not None and doc_alone is not None
            assert (doc.version, doc.markdown) == (doc_alone.version, doc_alone.markdown)
            assert sorted(facets, key=repr) == sorted(facets_alone, key=repr)
            assert unsure == unsure_alone
        first_doc, first_facets, first_unsure = got["u0"]
        assert first_doc is not None and first_doc.version == 2
        assert [f.value for f in first_facets] == ["detailed"] and first_unsure == []
    assert costs[3] == costs[12], costs
