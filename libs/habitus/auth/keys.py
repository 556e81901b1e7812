"""Key material and the key store.

Keys are 32 random bytes (URL-safe base64) behind a readable prefix, so a plain SHA-256 is the
right hash: there is nothing to brute-force that a slow hash would protect, and lookups stay one
indexed read. Bootstrap keys from the environment are stored the same way.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from habitus.auth.roles import TENANT_ADMIN, Role, check_role
from habitus.ids import check_id

KEY_PREFIX = "hab_"
TABLE = "gateway.api_keys"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: str
    is_admin: bool
    key_prefix: str
    #: the key's identity (rate limits, audit): prefixes can be shared by chosen keys
    key_hash: str
    #: what the key may change (habitus.auth.roles); a platform admin key is a tenant-admin of
    #: whichever tenant it acts for
    role: Role = TENANT_ADMIN


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_prefix(key: str) -> str:
    return key[:12]


async def store_key(
    pool: AsyncConnectionPool, tenant_id: str, key: str, *, is_admin: bool = False,
    label: str = "", role: str = TENANT_ADMIN,
) -> bool:
    """Idempotent: an existing key keeps its tenant and role. Returns True if the key was
    new."""
    check_id(tenant_id, "tenant_id")
    check_role(role)
    if len(key) < 8:
        raise ValueError("an API key must have at least 8 characters")
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"""INSERT INTO {TABLE} (key_hash, key_prefix, tenant_id, is_admin, label, role)
                VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (key_hash) DO NOTHING""",
            (hash_key(key), key_prefix(key), tenant_id, is_admin, label, role),
        )
        await conn.commit()
        return cur.rowcount == 1


async def create_key(pool: AsyncConnectionPool, tenant_id: str, *, is_admin: bool = False,
                     label: str = "", role: str = TENANT_ADMIN) -> str:
    """A new key. The role defaults to tenant-admin for the system's own callers (the demo,
    bootstrap); `habitus keys create` asks for it and defaults to agent."""
    key = generate_key()
    await store_key(pool, tenant_id, key, is_admin=is_admin, label=label, role=role)
    return key


async def lookup(pool: AsyncConnectionPool, key: str) -> Principal | None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"SELECT tenant_id, is_admin, key_prefix, role FROM {TABLE} "
            "WHERE key_hash = %s AND revoked_at IS NULL",
            (hash_key(key),),
        )
        row: Any = await cur.fetchone()
    if row is None:
        return None
    role = TENANT_ADMIN if row[1] else check_role(row[3])
    return Principal(row[0], bool(row[1]), row[2], hash_key(key), role)


class AmbiguousKey(ValueError):
    pass


async def revoke(pool: AsyncConnectionPool, key_prefix_or_key: str) -> list[tuple[str, str]]:
    """Revoke a key given whole, or by its printed prefix when exactly one live key has it
    (chosen keys, like bootstrap ones, can share a prefix). The (key hash, tenant) revoked, for
    the announcement every gateway follows (habitus.auth.revocation); empty when none was."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"SELECT key_hash FROM {TABLE} WHERE revoked_at IS NULL AND "
            "(key_hash = %s OR key_prefix = %s)",
            (hash_key(key_prefix_or_key), key_prefix_or_key),
        )
        hashes = [r[0] for r in await cur.fetchall()]
        if len(hashes) > 1:
            raise AmbiguousKey(f"{len(hashes)} keys start with {key_prefix_or_key!r}; "
                               "give the whole key")
        if not hashes:
            return []
        cur = await conn.execute(
            f"UPDATE {TABLE} SET revoked_at = now() WHERE key_hash = %s "
            "RETURNING key_hash, tenant_id", (hashes[0],))
        revoked = [(str(r[0]), str(r[1])) for r in await cur.fetchall()]
        await conn.commit()
        return revoked


async def list_keys(pool: AsyncConnectionPool, tenant_id: str | None = None
                    ) -> list[dict[str, Any]]:
    query = (f"SELECT key_prefix, tenant_id, is_admin, role, label, created_at, revoked_at "
             f"FROM {TABLE}")
    params: tuple[Any, ...] = ()
    if tenant_id:
        query += " WHERE tenant_id = %s"
        params = (tenant_id,)
    async with pool.connection() as conn:
        cur = await conn.execute(query + " ORDER BY created_at", params)
        cols = [c.name for c in cur.description or []]
        return [dict(zip(cols, row, strict=True)) for row in await cur.fetchall()]
