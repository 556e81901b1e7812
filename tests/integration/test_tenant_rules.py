"""Tenant-wide tool rules in `prompt.context`, on real servers (NATS, Postgres, Redis).

A tenant-scoped rule's events ride on the reserved user `TENANT_WIDE`: the profile renderer
stores the rule under it, and every user of that tenant, and no user of another, gets it in
their prompt context. A user's own rule never reaches another user. The cache turns away every
user's earlier entry as soon as the tenant rule's batch commits: a caller that waited for the
event to be applied sees it on its very next read, with no polling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from habitus.bus import EventPublisher, RpcClient
from habitus.events import CATALOG
from habitus.events.domain import ToolRuleDeleted, ToolRuleUpserted
from habitus.ids import TENANT_WIDE
from habitus.projection.wait import wait_applied
from habitus.service.migrations import migrate
from services.profile_renderer.main import ProfileSettings
from services.profile_renderer.main import build as profile_renderer
from services.profile_renderer.projection import RenderProjection
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running

pytestmark = pytest.mark.asyncio
T0 = 1_700_000_000.0
TOOLS = ["send_email", "shell"]


@pytest_asyncio.fixture(scope="module")
async def renderer(servers: ServerUrls, tmp_path_factory: Any) -> AsyncIterator[None]:
    migrate(servers.database)
    settings = servers.settings(data_dir=tmp_path_factory.mktemp("tenant-rules"))
    async with running(profile_renderer(ProfileSettings()), settings):
        yield


class Tenant:
    def __init__(self, nc: Any, pool: Any):
        self.id = unique("tn")
        self.pool = pool
        self.publisher = EventPublisher(nc.jetstream())
        self.rpc = RpcClient(nc)

    async def publish(self, user_id: str, payload: Any, at: float = T0) -> int:
        """Publish and wait until `profile.render` applied it."""
        event = CATALOG.new(payload, tenant_id=self.id, user_id=user_id, producer="tests",
                            occurred_at=at)
        seq = (await self.publisher.publish(event)).seq
        await wait_applied(self.pool, "profile", RenderProjection.name, seq)
        return seq

    async def tenant_rule(self, rule_id: str, text: str, tool: str = "send_email",
                          **fields: Any) -> int:
        return await self.publish(TENANT_WIDE, ToolRuleUpserted(
            rule_id=rule_id, tool_name=tool, rule=text, priority="critical", scope="tenant",
            **fields))

    async def context(self, user_id: str, tools: list[str] | None = TOOLS) -> str:
        result = await self.rpc.call("prompt.context", self.id,
                                     {"user_id": user_id, "tools": tools})
        return str(result["text"])


@pytest_asyncio.fixture
async def tenant(renderer: None, nc: Any, pool: Any) -> Tenant:
    return Tenant(nc, pool)


async def test_a_tenant_rule_reaches_every_user_of_the_tenant_and_no_other_tenant(
        tenant: Tenant, nc: Any, pool: Any) -> None:
    other = Tenant(nc, pool)
    await tenant.tenant_rule("t1", "Never email outside example.com.")
    for user in ("alice", "bob"):
        assert "- **[critical]** Never email outside example.com.\n" in await tenant.context(user)
    assert "outside example.com" not in await other.context("alice")
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT user_id, scope, updated_at FROM profile.tool_rules WHERE tenant_id = %s",
            (tenant.id,))
        assert await cur.fetchall() == [(TENANT_WIDE, "tenant", T0)]  # occurred_at stands in


async def test_cached_contexts_show_a_tenant_rule_on_the_next_read(tenant: Tenant) -> None:
    before = {user: await tenant.context(user) for user in ("alice", "bob")}
    assert before == {user: await tenant.context(user) for user in ("alice", "bob")}  # cached
    assert all("Never run sudo" not in text for text in before.values())

    await tenant.tenant_rule("t2", "Never run sudo.", tool="shell")

    for user in ("alice", "bob"):  # no polling: the applied event is in the very next read
        assert "### `shell`\n- **[critical]** Never run sudo.\n" in await tenant.context(user)


async def test_a_user_rule_never_shows_for_another_user(tenant: Tenant) -> None:
    await tenant.context("bob")  # cached before alice's rule
    await tenant.publish("alice", ToolRuleUpserted(
        rule_id="own", tool_name="send_email", rule="Sign as Al.", priority="high"))
    assert "- **[high]** Sign as Al.\n" in await tenant.context("alice")
    assert "Sign as Al." not in await tenant.context("bob")
    assert "Sign as Al." not in await tenant.context("carol")


async def test_deleting_a_tenant_rule_removes_it_for_every_user(tenant: Tenant) -> None:
    await tenant.tenant_rule("t3", "Never email Sarah.")
    await tenant.publish("alice", ToolRuleUpserted(
        rule_id="own", tool_name="send_email", rule="Sign as Al.", priority="high"))
    for user in ("alice", "bob"):
        assert "Never email Sarah." in await tenant.context(user)  # and now cached

    await tenant.publish(TENANT_WIDE, ToolRuleDeleted(rule_id="t3", tool_name="send_email"))

    assert "Never email Sarah." not in await tenant.context("bob")
    alice = await tenant.context("alice")
    assert "Never email Sarah." not in alice and "Sign as Al." in alice


async def test_tenant_and_user_rules_share_one_selection_newest_first(tenant: Tenant) -> None:
    await tenant.tenant_rule("old", "Old tenant rule.", updated_at=T0 + 10)
    await tenant.publish("alice", ToolRuleUpserted(
        rule_id="mine", tool_name="send_email", rule="My newer rule.", priority="critical",
        updated_at=T0 + 20))
    await tenant.tenant_rule("every", "Be polite to every tool.", tool="*",
                             updated_at=T0 + 30)
    text = await tenant.context("alice", tools=["send_email"])
    assert text.index("Be polite") < text.index("My newer rule.") < text.index("Old tenant")
    assert "### `*`\n" in text
    assert "My newer rule." not in await tenant.context("bob", tools=["send_email"])


async def test_erasing_a_user_keeps_the_tenant_rules(tenant: Tenant, pool: Any) -> None:
    await tenant.tenant_rule("t4", "Never email the board.")
    await tenant.publish("alice", ToolRuleUpserted(
        rule_id="own", tool_name="send_email", rule="Sign as Al.", priority="high"))
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await RenderProjection().erase_user(cur, tenant.id, "alice")
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT user_id, rule_id FROM profile.tool_rules "
                                 "WHERE tenant_id = %s", (tenant.id,))
        assert await cur.fetchall() == [(TENANT_WIDE, "t4")]
