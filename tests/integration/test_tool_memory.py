"""Tool memory on real servers: rules captured from turns sent through the gateway, the
`memory.*` controllers over HTTP, and the rules pinned into `prompt.context`.

The stack is the gateway, tool memory and the profile renderer (the one that serves
`prompt.context`), in-process on the embedded servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import pytest_asyncio
from alembic import command

from habitus.auth.keys import create_key
from habitus.crypto.columns import COLUMNS
from habitus.db.migrate import alembic_config
from habitus.db.urls import conninfo
from habitus.projection.replay import replay
from habitus.service.migrations import migrate
from habitus.service.projections import resolve
from services.gateway.main import service as gateway
from services.profile_renderer.main import build as profile_renderer
from services.tool_memory import store
from services.tool_memory.main import build as tool_memory
from services.tool_memory.settings import ToolMemorySettings
from tests.conftest import ServerUrls
from tests.support.factories import turn_item, unique
from tests.support.http import TLS
from tests.support.own_servers import own_nc, own_pool, own_servers  # noqa: F401
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
MIGRATIONS = Path(__file__).resolve().parents[2] / "services" / "tool_memory" / "migrations"
SARAH = "Never email Sarah at sarah@example.com."


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    settings = servers.settings()
    async with running(tool_memory(ToolMemorySettings(semantic_recall=True)), settings), \
            running(profile_renderer(), settings), running(gateway, settings) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


class Client:
    def __init__(self, base: str, key: str):
        self.base, self.key = base, key

    async def post(self, path: str, body: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=30, verify=TLS) as client:
            return await client.post(path, json=body,
                                      headers={"Authorization": f"Bearer {self.key}"})

    async def rpc(self, method: str, **params: Any) -> Any:
        response = await self.post(f"/v1/rpc/{method}", params)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    async def refused(self, method: str, **params: Any) -> tuple[int, str]:
        response = await self.post(f"/v1/rpc/{method}", params)
        return response.status_code, response.json()["error"]["message"]

    async def turn(self, user: str, message: str, tools: list[tuple[str, bool]]) -> None:
        item = turn_item(user, message)
        item["payload"]["tool_calls"] = [
            {"tool_name": name, "ok": ok, "output_summary": None if ok else "timed out"}
            for name, ok in tools]
        response = await self.post("/v1/events", [item])
        assert response.status_code in (200, 202), response.text


@pytest_asyncio.fixture
async def acme(stack: str, pool: Any) -> Client:
    return Client(stack, await create_key(pool, unique("acme")))


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def test_never_email_sarah_is_captured_and_pinned_into_the_prompt(acme: Client) -> None:
    user = unique("dana")
    await acme.turn(user, SARAH, [("send_email", True)])

    async def captured() -> list[dict[str, Any]]:
        return list((await acme.rpc("memory.tool_rule_list", user_id=user))["rules"])

    rules = await until(captured)
    assert len(rules) == 1
    rule = rules[0]
    assert (rule["tool_name"], rule["priority"], rule["source"], rule["tags"]) == (
        "send_email", "critical", "user_explicit", ["user-edict"])
    assert "sarah@example.com" in rule["rule"]

    context = await until(lambda: _context_with(acme, user, ["send_email"], "Never email"))
    assert f"- **[critical]** {SARAH}" in context
    assert "Never email" not in await _context(acme, user, ["web_search"])

    # The same edict in a later turn updates the rule; it never makes a second one.
    await acme.turn(user, SARAH, [("send_email", True)])

    async def updated() -> list[dict[str, Any]]:
        again = (await acme.rpc("memory.tool_rule_list", user_id=user))["rules"]
        return list(again) if again and again[0]["updated_at"] > rule["updated_at"] else []

    again = await until(updated)
    assert len(again) == 1
    assert again[0]["id"] == rule["id"] and again[0]["created_at"] == rule["created_at"]


async def test_repeated_failures_become_normal_guidance_to_recall(acme: Client) -> None:
    user = unique("dana")
    await acme.turn(user, "Deploy it please.", [("shell", False), ("shell", False),
                                                 ("shell", True)])
    rules = await until(lambda: _rules(acme, user))
    assert [(r["tool_name"], r["priority"], r["tags"]) for r in rules] == [
        ("shell", "normal", ["repeated-failure"])]
    assert "2" in rules[0]["rule"] and "timed out" in rules[0]["rule"]
    recalled = await acme.rpc("memory.tool_rules_recall", user_id=user, tool_name="shell",
                              query="the deploy command keeps timing out")
    assert [m["rule"]["id"] for m in recalled["matches"]] == [rules[0]["id"]]
    assert "repeated-failure" not in await _context(acme, user, ["shell"])  # normal: recall only


async def test_controllers_round_trip_upsert_sort_and_delete(acme: Client) -> None:
    user = unique("sam")
    first = await acme.rpc("memory.tool_rule_put", user_id=user, tool_name=" Send_Email ",
                           rule="Always CC the account manager.", priority="high",
                           tags=["policy"])
    assert first["tool_name"] == "send_email" and first["source"] == "programmatic"
    got = await acme.rpc("memory.tool_rule_get", user_id=user, tool_name="send_email",
                         id=first["id"])
    assert got == first

    again = await acme.rpc("memory.tool_rule_put", user_id=user, tool_name="send_email",
                           rule="Always CC the account manager and the team lead.",
                           priority="high", id=first["id"])
    assert again["created_at"] == first["created_at"]
    assert again["updated_at"] > first["updated_at"]

    critical = await acme.rpc("memory.tool_rule_put", user_id=user, tool_name="send_email",
                              rule="Never send attachments over 10 MB.", priority="critical")
    normal = await acme.rpc("memory.tool_rule_put", user_id=user, tool_name="send_email",
                            rule="Keep subject lines under 60 characters.")
    listed = (await acme.rpc("memory.tool_rule_list", user_id=user))["rules"]
    assert [r["id"] for r in listed] == [critical["id"], first["id"], normal["id"]]
    only = await acme.rpc("memory.tool_rule_list", user_id=user, priority="normal")
    assert [r["id"] for r in only["rules"]] == [normal["id"]]

    assert (await acme.rpc("memory.tool_rule_delete", user_id=user, tool_name="send_email",
                           id=first["id"])) == {"deleted": True}
    assert (await acme.rpc("memory.tool_rule_delete", user_id=user, tool_name="send_email",
                           id=first["id"])) == {"deleted": False}
    status, message = await acme.refused("memory.tool_rule_get", user_id=user,
                                         tool_name="send_email", id=first["id"])
    assert status == 404 and first["id"] in message
    assert "CC the account manager" not in await _context(acme, user, ["send_email"])


async def test_the_prompt_block_is_the_same_bytes_and_capped_at_30(acme: Client) -> None:
    user = unique("lee")
    for n in range(35):
        await acme.rpc("memory.tool_rule_put", user_id=user, tool_name="shell",
                       rule=f"Rule number {n:02d}: never touch /etc/{n}.", priority="critical")
    block = await acme.rpc("memory.tool_rules_for_prompt", user_id=user, tools=["shell"])
    assert len(block["rules"]) == 30
    assert block["rendered"].count("- **[critical]**") == 30
    assert "Rule number 34" in block["rendered"] and "Rule number 04" not in block["rendered"]
    context = await acme.rpc("prompt.context", user_id=user, tools=["shell"])
    section = next(s for s in context["sections"] if s["name"] == "tool_rules")
    assert section["content"] == block["rendered"]


async def test_tool_names_match_whatever_their_case(acme: Client) -> None:
    user = unique("kai")
    await acme.turn(user, "Never email Bob.", [("SendEmail", True)])
    rules = await until(lambda: _rules(acme, user))
    assert rules[0]["tool_name"] == "sendemail"
    context = await until(lambda: _context_with(acme, user, ["SendEmail"], "Never email Bob"))
    block = await acme.rpc("memory.tool_rules_for_prompt", user_id=user, tools=["SendEmail"])
    assert block["rendered"] and block["rendered"] in context


async def test_a_user_rule_and_a_tenant_rule_sharing_an_id_stay_two(stack: str,
                                                                   pool: Any) -> None:
    acme = Client(stack, await create_key(pool, unique("acme")))
    user = unique("mo")
    await acme.rpc("memory.tool_rule_put", scope="tenant", tool_name="shell", id="same-id",
                   rule="Never run rm -rf.", priority="critical")
    await acme.rpc("memory.tool_rule_put", user_id=user, tool_name="shell", id="same-id",
                   rule="Never restart prod.", priority="critical")
    block = await acme.rpc("memory.tool_rules_for_prompt", user_id=user, tools=["shell"])
    assert sorted((r["scope"], r["rule"]) for r in block["rules"]) == [
        ("tenant", "Never run rm -rf."), ("user", "Never restart prod.")]


async def test_tenant_rules_reach_every_user_of_the_tenant_and_no_other(
        stack: str, pool: Any) -> None:
    acme = Client(stack, await create_key(pool, unique("acme")))
    other = Client(stack, await create_key(pool, unique("other")))
    rule = await acme.rpc("memory.tool_rule_put", scope="tenant", tool_name="send_email",
                          rule="Never email addresses outside example.com.",
                          priority="critical", source="programmatic")
    assert rule["scope"] == "tenant"
    for user in (unique("a"), unique("b")):
        assert "outside example.com" in await _context(acme, user, ["send_email"])
        listed = (await acme.rpc("memory.tool_rule_list", user_id=user))["rules"]
        assert [r["id"] for r in listed] == [rule["id"]]
    assert "outside example.com" not in await _context(other, unique("c"), ["send_email"])
    assert (await other.rpc("memory.tool_rule_list"))["rules"] == []
    assert [r["id"] for r in (await acme.rpc("memory.tool_rule_list"))["rules"]] == [rule["id"]]
    # A user's rule stays the user's.
    mine = unique("mine")
    await acme.rpc("memory.tool_rule_put", user_id=mine, tool_name="send_email",
                   rule="Sign as Dana.", priority="high")
    assert "Sign as Dana" in await _context(acme, mine, ["send_email"])
    assert "Sign as Dana" not in await _context(acme, unique("theirs"), ["send_email"])


@pytest.mark.parametrize(("params", "field"), [
    ({"tool_name": "  ", "rule": "x"}, "tool_name"),
    ({"tool_name": "shell", "rule": "   "}, "rule"),
    ({"tool_name": "shell", "rule": "x" * 4001}, "rule"),
    ({"tool_name": "shell", "rule": "x", "priority": "urgent"}, "priority"),
    ({"tool_name": "shell", "rule": "x", "source": "gossip"}, "source"),
    ({"tool_name": "shell", "rule": "x", "scope": "galaxy"}, "scope"),
    ({"tool_name": "shell", "rule": "x", "user_id": None}, "user_id"),
    ({"tool_name": "shell", "rule": "x", "user_id": "_tenant"}, "user_id"),
])
async def test_bad_rules_are_refused_naming_the_field_and_nothing_is_stored(
        acme: Client, params: dict[str, Any], field: str) -> None:
    user = unique("u")
    body = {"user_id": user, **params}
    if body.get("user_id") is None:
        body.pop("user_id")
    status, message = await acme.refused("memory.tool_rule_put", **body)
    assert status == 400 and field in message
    assert (await acme.rpc("memory.tool_rule_list", user_id=user))["rules"] == []


async def test_a_replay_of_the_rules_rebuilds_the_same_rows(acme: Client, nc: Any,
                                                            pool: Any) -> None:
    user = unique("rae")
    await acme.turn(user, SARAH + " Don't run shell commands with sudo.",
                    [("send_email", True), ("shell", True)])
    before = await until(lambda: _rules(acme, user, at_least=2))
    result = await replay(resolve("tools.rules"), nc, pool, timeout=60)
    assert result.projection == "tools.rules"

    async def rebuilt() -> list[dict[str, Any]]:
        rows = await _rules(acme, user)
        return rows if rows == before else []

    assert await until(rebuilt) == before


async def test_a_users_rules_are_sealed_at_rest_and_still_listed_pinned_and_recalled(
        stack: str, pool: Any) -> None:
    tenant = unique("acme")
    client = Client(stack, await create_key(pool, tenant))
    user = unique("dana")
    await client.turn(user, SARAH, [("send_email", True)])
    guidance = await client.rpc(
        "memory.tool_rule_put", user_id=user, tool_name="shell", tags=["sarah-ops"],
        rule="When Sarah's deploy times out, retry it on the staging cluster.")
    shared = await client.rpc("memory.tool_rule_put", scope="tenant", tool_name="shell",
                              rule="Never run rm -rf on the shared volume.",
                              priority="critical")
    rules = await until(lambda: _rules(client, user, at_least=3))

    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT user_id, rule_id, rule, tags FROM tools.rules WHERE tenant_id = %s",
            (tenant,))
        raw = {(r[0], r[1]): (r[2], list(r[3])) for r in await cur.fetchall()}
    mine = {rule_id: v for (owner, rule_id), v in raw.items() if owner == user}
    assert len(mine) == 2
    for rule, tags in mine.values():  # her words hold nothing readable on disk
        assert rule.startswith("hc1:") and "sarah" not in rule.lower(), rule
        assert all(t.startswith("hc1:") and "sarah" not in t for t in tags), tags
    assert {k: COLUMNS.open(tenant, user, v[0]) for k, v in mine.items()} == {
        r["id"]: r["rule"] for r in rules if r["scope"] == "user"}
    assert COLUMNS.open_all(tenant, user, mine[guidance["id"]][1]) == ["sarah-ops"]
    # the tenant's own rule is no person's: plain
    assert raw[("_tenant", shared["id"])] == ("Never run rm -rf on the shared volume.", [])

    # the API, the prompt and recall read the text as it was said
    assert SARAH in [r["rule"] for r in rules]
    assert guidance in rules
    context = await until(lambda: _context_with(client, user, ["send_email"], "Never email"))
    assert f"- **[critical]** {SARAH}" in context
    recalled = await client.rpc("memory.tool_rules_recall", user_id=user, tool_name="shell",
                                query="the deploy keeps timing out")
    [match] = recalled["matches"]
    assert match["rule"]["id"] == guidance["id"] and match["score"] is not None
    assert match["rule"]["rule"] == guidance["rule"]


async def _rules(client: Client, user: str, at_least: int = 1) -> list[dict[str, Any]]:
    rules = (await client.rpc("memory.tool_rule_list", user_id=user))["rules"]
    return list(rules) if len(rules) >= at_least else []


async def _context(client: Client, user: str, tools: list[str]) -> str:
    return str((await client.rpc("prompt.context", user_id=user, tools=tools))["text"])


async def _context_with(client: Client, user: str, tools: list[str], needle: str) -> str:
    text = await _context(client, user, tools)
    return text if needle in text else ""


async def _context_without(client: Client, user: str, tools: list[str], needle: str) -> bool:
    return needle not in await _context(client, user, tools)


async def test_the_users_words_lift_the_rule_they_made(acme: Client) -> None:
    """"You can email Sarah again" removes "Never email Sarah" (the prompt stops pinning it),
    and nothing else: a lift naming someone no rule is about lifts nothing, and the user's
    other rules stay. Said again afterwards, the edict is a new rule."""
    user = unique("dana")
    await acme.turn(user, SARAH, [("send_email", True)])
    await acme.turn(user, "Never call Sarah on her mobile.", [("phone_call", True)])
    await acme.turn(user, "Don't run shell commands with sudo.", [("shell", True)])

    async def rules(n: int) -> list[dict[str, Any]]:
        found = list((await acme.rpc("memory.tool_rule_list", user_id=user))["rules"])
        return found if len(found) == n else []

    before = await until(lambda: rules(3))
    sarah = next(r for r in before if r["tool_name"] == "send_email")
    await until(lambda: _context_with(acme, user, ["send_email"], "Never email"))

    await acme.turn(user, "You can email Tom again.", [])
    await acme.turn(user, "Thanks, that's sorted. You can email Sarah again.", [])
    after = await until(lambda: rules(2))
    assert sorted(r["tool_name"] for r in after) == ["phone_call", "shell"]
    # the renderer applies the deletion after tool memory's own view does: the prompt follows
    await until(lambda: _context_without(acme, user, ["send_email"], "Never email"))

    await acme.turn(user, SARAH, [("send_email", True)])
    again = await until(lambda: rules(3))
    back = next(r for r in again if r["tool_name"] == "send_email")
    assert back["id"] == sarah["id"] and back["created_at"] > sarah["created_at"]

    # a lift takes back what was said before its turn, never the rule said beside it
    await acme.turn(user, "Forget what I said about emailing Sarah. Never email Sarah before "
                          "9am.", [("send_email", True)])

    async def replaced() -> list[dict[str, Any]]:
        found = await rules(3)
        return found if any("before 9am" in r["rule"] for r in found) else []

    now = await until(replaced)
    assert [r["rule"] for r in now if r["tool_name"] == "send_email"] == [
        "Never email Sarah before 9am."]


async def test_edicts_captured_before_capture_kept_texts_can_be_lifted(
        fresh_database: str) -> None:
    """Revision 0005 fills the tool and text of what capture made before it from the rules
    view: an old edict can be lifted, an old repeated failure cannot, and a rule since deleted
    (no text to fill) is not among them."""
    config = alembic_config(fresh_database, "tools", MIGRATIONS)
    command.upgrade(config, "0004")
    sealed = COLUMNS.seal("t", "u1", SARAH)
    with psycopg.connect(conninfo(fresh_database)) as conn:
        conn.execute(
            f"""INSERT INTO {store.CAPTURED} (tenant_id, user_id, rule_id, created_at) VALUES
                ('t', 'u1', 'edict', 1), ('t', 'u1', 'failure', 2), ('t', 'u1', 'gone', 3)""")
        conn.execute(
            f"""INSERT INTO {store.RULES} (tenant_id, user_id, rule_id, tool_name, rule,
                  priority, source, tags, scope, created_at, updated_at, causation) VALUES
                ('t', 'u1', 'edict', 'send_email', %s, 'critical', 'user_explicit', '{{}}',
                 'user', 1, 1, NULL),
                ('t', 'u1', 'failure', 'browser', 'browser failed twice', 'normal',
                 'post_turn', '{{}}', 'user', 2, 2, NULL)""", (sealed,))
    command.upgrade(config, "head")
    async with await psycopg.AsyncConnection.connect(conninfo(fresh_database)) as conn:
        found = await store.liftable(conn.cursor(), [("t", "u1")])
    assert found == {("t", "u1"): {"edict": ("send_email", SARAH)}}

