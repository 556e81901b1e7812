"""`store.context_inputs`, the one statement a `prompt.context` miss reads: what it returns is
what the rows hold (pinned facets without stability, a NaN stability, evidence lists), the
user's and the tenant's rules and never another user's, and the checkpoint it is stamped at."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest

from habitus.crypto.columns import COLUMNS, PREFIX
from habitus.crypto.keyring import Shredded
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


def _sealed(value: str, *plaintexts: str) -> bool:
    """The raw column value is ciphertext: sealed, and none of the text shows through."""
    return value.startswith(PREFIX) and not any(p in value for p in plaintexts)


async def test_the_person_s_text_is_sealed_in_every_column_and_read_back_as_text(
        servers: ServerUrls, pool: Any) -> None:
    """What Postgres keeps of a person's text (heap, WAL, backups) is ciphertext under their
    key; every read of the store opens it, and the tenant's own rules stay plain."""
    assert COLUMNS.keyring is not None  # the suite runs with encryption on
    migrate(servers.database)
    tenant, projection = unique("tn"), unique("profile.render.test")
    facets = [ProfileFacet("identity", "hometown", "Quokkaville", False, 2.5, "stated")]
    unsure = [ProvisionalFacet("identity", "pet", "axolotl", 0.7,
                               ("told about Bartholomew", "2 chat turns"))]
    markdown = "# User Profile\n\nMarmalade is my secret.\n"
    async with pool.connection() as conn, conn.cursor() as cur:
        await store.replace_facets(cur, tenant, "ana", facets)
        await store.replace_provisional(cur, tenant, "ana", unsure)
        await store.upsert_account(cur, tenant, "ana", "slack", "c2", "ana@zeta.example")
        await store.upsert_account(cur, tenant, "ana", "gmail", "c1", "ana@quokka.example")
        await store.upsert_rule(cur, tenant, "ana", ToolRule(
            "r1", "send_email", "Never email Persephone.", "critical", 1.0), "user")
        await store.upsert_rule(cur, tenant, TENANT_WIDE, ToolRule(
            "r2", "*", "Quote prices in EUR.", "high", 2.0), "tenant")
        digest = await store.add_version(cur, tenant, "ana", 1, markdown, "notes",
                                         unique("ev"), ())

        await cur.execute("SELECT key, value FROM profile.facets WHERE tenant_id = %s",
                          (tenant,))
        [(key, value)] = await cur.fetchall()
        assert _sealed(key, "hometown") and _sealed(value, "Quokkaville")
        await cur.execute("SELECT key, value, evidence FROM profile.provisional_facets "
                          "WHERE tenant_id = %s", (tenant,))
        [(key, value, evidence)] = await cur.fetchall()
        assert _sealed(key, "pet") and _sealed(value, "axolotl")
        assert len(evidence) == 2 and all(_sealed(e, "Bartholomew", "chat") for e in evidence)
        await cur.execute("SELECT label FROM profile.accounts WHERE tenant_id = %s", (tenant,))
        assert all(_sealed(label, "ana@", "example") for (label,) in await cur.fetchall())
        await cur.execute("SELECT user_id, rule FROM profile.tool_rules WHERE tenant_id = %s "
                          "ORDER BY rule_id", (tenant,))
        [(_, own), tenant_rule] = await cur.fetchall()
        assert _sealed(own, "Persephone")
        assert tenant_rule == (TENANT_WIDE, "Quote prices in EUR.")  # the tenant's, not a person's
        await cur.execute("SELECT markdown, sha256 FROM profile.documents WHERE tenant_id = %s",
                          (tenant,))
        [(sealed_md, stored_sha)] = await cur.fetchall()
        assert _sealed(sealed_md, "Marmalade", "User Profile")
        assert stored_sha == digest == hashlib.sha256(markdown.encode()).hexdigest()

        assert await store.load_facets(cur, tenant, "ana") == facets
        assert await store.load_provisional(cur, tenant, "ana") == unsure
        assert await store.load_accounts(cur, tenant, "ana") == [  # sorted after opening
            ("gmail", "ana@quokka.example"), ("slack", "ana@zeta.example")]
        latest = await store.latest(cur, tenant, "ana")
        assert latest is not None and (latest.markdown, latest.sha256) == (markdown, digest)
        assert await store.version_of(cur, tenant, "ana", 1) == latest
        recorder = CheckpointStore(store.SCHEMA)
        claim = await recorder.claim(cur, projection)
        await recorder.commit(cur, projection, claim.epoch, 7)

    got = await store.context_inputs(pool, projection, tenant, "ana", unconfirmed=True)
    assert got.facets == facets and got.provisional == unsure
    assert got.document == (1, markdown)
    assert {r.rule_id: r.rule for r in got.rules} == {"r1": "Never email Persephone.",
                                                      "r2": "Quote prices in EUR."}


async def test_rows_written_before_sealing_read_as_they_are(servers: ServerUrls,
                                                            pool: Any) -> None:
    """No migration of the rows already there: a value without the seal's prefix is text."""
    migrate(servers.database)
    tenant = unique("tn")
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(
            "INSERT INTO profile.facets (tenant_id, user_id, class, key, value, pinned, "
            "stability) VALUES (%s, 'ana', 'style', 'tone', 'dry', false, 1.5)", (tenant,))
        await cur.execute(
            "INSERT INTO profile.provisional_facets (tenant_id, user_id, class, key, value, "
            "stability, evidence) VALUES (%s, 'ana', 'tooling', 'editor', 'vim', 0.5, "
            "ARRAY['1 commit'])", (tenant,))
        await cur.execute(
            "INSERT INTO profile.documents (tenant_id, user_id, version, markdown, sha256, "
            "origin, cause_event_id) VALUES (%s, 'ana', 1, 'Old text.', %s, 'render', 'e1')",
            (tenant, store.sha256("Old text.")))
        assert await store.load_facets(cur, tenant, "ana") == [
            ProfileFacet("style", "tone", "dry", False, 1.5, "learned")]
        assert await store.load_provisional(cur, tenant, "ana") == [
            ProvisionalFacet("tooling", "editor", "vim", 0.5, ("1 commit",))]
        latest = await store.latest(cur, tenant, "ana")
        assert latest is not None and latest.markdown == "Old text."


async def test_the_mirror_skips_a_user_whose_keys_are_gone(servers: ServerUrls,
                                                           pool: Any) -> None:
    """A batch's mirror pass reads many users at once: one erased meanwhile (keys destroyed,
    rows not yet deleted) is left out, the others are still due."""
    assert COLUMNS.keyring is not None
    migrate(servers.database)
    tenant = unique("tn")
    async with pool.connection() as conn, conn.cursor() as cur:
        for user in ("ana", "zoe"):
            await store.add_version(cur, tenant, user, 1, f"# {user}'s notes\n", "notes",
                                    unique("ev"), ())
        await conn.commit()
        COLUMNS.keyring.destroy(tenant, "zoe")
        with pytest.raises(Shredded):
            await store.latest(cur, tenant, "zoe")
        due = await store.mirrors_due(cur, [(tenant, "ana"), (tenant, "zoe")])
    assert [(d.user_id, d.document.markdown) for d in due] == [("ana", "# ana's notes\n")]
