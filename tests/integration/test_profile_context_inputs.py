"""`store.context_inputs`, the one statement a `prompt.context` miss reads: what it returns is
what the rows hold (pinned facets without stability, a NaN stability, evidence lists), the
user's and the tenant's rules and never another user's, and the checkpoint it is stamped at."""

from __future__ import annotations

import math
from typing import Any

import pytest

from habitus.ids import TENANT_WIDE
from habitus.projection.checkpoints import CheckpointStore
from habitus.prompt import ProfileFacet, ProvisionalFacet, ToolRule
from habitus.service.migrations import migrate
from services.profile_renderer import store
from tests.conftest import ServerUrls
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio


async def test_one_statement_reads_what_the_transaction_read(servers: ServerUrls,
                                                            pool: Any) -> None:
    migrate(servers.database)
    tenant, projection = unique("tn"), unique("profile.render.test")
    facets = [ProfileFacet("style", "verbosity", "terse", True, None, "pinned"),
              ProfileFacet("tooling", "package_manager", "uv", False, 0.8125, "learned"),
              ProfileFacet("style", "emoji", "skip", False, math.nan, "learned")]
    unsure = [ProvisionalFacet("identity", "language", "es", 0.41, ("2 chat turns",))]
    async with pool.connection() as conn, conn.cursor() as cur:
        await store.replace_facets(cur, tenant, "ana", facets)
        await store.replace_provisional(cur, tenant, "ana", unsure)
        await store.upsert_rule(cur, tenant, "ana", ToolRule(
            "r1", "send_email", "Never email Sarah.", "critical", 1700000000.25), "user")
        await store.upsert_rule(cur, tenant, TENANT_WIDE, ToolRule(
            "r2", "*", "Quote prices in EUR.", "high", 1700000001.5), "tenant")
        await store.upsert_rule(cur, tenant, "bob", ToolRule(
            "r3", "send_email", "Bob's own rule.", "critical", 1700000002.0), "user")
        await store.add_version(cur, tenant, "ana", 1, "# User Profile\n\nMy note.\n",
                                "notes", unique("ev"), ())
        recorder = CheckpointStore(store.SCHEMA)
        claim = await recorder.claim(cur, projection)
        await recorder.commit(cur, projection, claim.epoch, 42)

    got = await store.context_inputs(pool, projection, tenant, "ana", unconfirmed=True)

    assert got.stamp == (42, 42)  # one partition: the user's and the tenant's are the same
    by_key = {f.key: f for f in got.facets}
    assert by_key["verbosity"] == facets[0]
    assert by_key["package_manager"] == facets[1]
    assert math.isnan(by_key["emoji"].stability or 0.0)
    assert got.document == (1, "# User Profile\n\nMy note.\n")
    assert sorted(r.rule_id for r in got.rules) == ["r1", "r2"]  # never bob's
    assert {r.rule_id: r.updated_at for r in got.rules} == {"r1": 1700000000.25,
                                                           "r2": 1700000001.5}
    assert got.provisional == unsure
    without = await store.context_inputs(pool, projection, tenant, "ana", unconfirmed=False)
    assert without.provisional == []
    # a user with nothing, a projection never claimed
    empty = await store.context_inputs(pool, unique("never"), tenant, "carl", unconfirmed=True)
    assert (empty.stamp, empty.facets, empty.document, empty.rules, empty.provisional) == (
        (0, 0), [], None, [r for r in got.rules if r.rule_id == "r2"], [])
    # the connection went back to the pool as it came: transactional
    async with pool.connection() as conn:
        assert conn.autocommit is False
