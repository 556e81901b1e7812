"""The tenants' routing policies, as `traces.policies` and `traces.defaults` keep them.

They are written under the user of their event, which the service always publishes as the
tenant's `_tenant`, and read from there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor
from psycopg.types.json import Jsonb

from habitus.ids import TENANT_WIDE

POLICIES = "traces.policies"
DEFAULTS = "traces.defaults"
CONFIGURATIONS = "traces.configurations"
ADVICE = "traces.advice"


@dataclass(frozen=True, slots=True)
class StoredPolicy:
    policy: str
    version: int
    parameters: dict[str, Any]


async def save_policy(cur: AsyncCursor[Any], tenant_id: str, user_id: str, policy: str,
                      version: int, parameters: dict[str, Any], at: float) -> None:
    """A newer version replaces an older one; an older one arriving late changes nothing."""
    await cur.execute(
        f"""INSERT INTO {POLICIES} (tenant_id, user_id, policy, version, parameters,
                                    updated_at)
            VALUES (%s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id, policy) DO UPDATE SET
              version = EXCLUDED.version, parameters = EXCLUDED.parameters,
              updated_at = EXCLUDED.updated_at
            WHERE {POLICIES}.version < EXCLUDED.version""",
        (tenant_id, user_id, policy, version, Jsonb(parameters), at))


async def save_default(cur: AsyncCursor[Any], tenant_id: str, user_id: str, policy: str,
                       version: int, at: float) -> None:
    await cur.execute(
        f"""INSERT INTO {DEFAULTS} (tenant_id, user_id, policy, version, updated_at)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET policy = EXCLUDED.policy,
              version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
            WHERE {DEFAULTS}.version < EXCLUDED.version""",
        (tenant_id, user_id, policy, version, at))


async def load_policy(cur: AsyncCursor[Any], tenant_id: str, policy: str
                      ) -> StoredPolicy | None:
    await cur.execute(f"SELECT policy, version, parameters FROM {POLICIES} "
                      "WHERE tenant_id = %s AND user_id = %s AND policy = %s",
                      (tenant_id, TENANT_WIDE, policy))
    row = await cur.fetchone()
    return None if row is None else StoredPolicy(row[0], int(row[1]), dict(row[2]))


async def load_default(cur: AsyncCursor[Any], tenant_id: str) -> tuple[str, int] | None:
    await cur.execute(f"SELECT policy, version FROM {DEFAULTS} WHERE tenant_id = %s "
                      "AND user_id = %s", (tenant_id, TENANT_WIDE))
    row = await cur.fetchone()
    return None if row is None else (row[0], int(row[1]))


async def save_configuration(cur: AsyncCursor[Any], tenant_id: str, user_id: str, version: int,
                             params: dict[str, Any], at: float) -> None:
    """The tenant's configuration from now on; an older version arriving late changes
    nothing."""
    await cur.execute(
        f"""INSERT INTO {CONFIGURATIONS} (tenant_id, user_id, version, params, applied_at)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET version = EXCLUDED.version,
              params = EXCLUDED.params, applied_at = EXCLUDED.applied_at
            WHERE {CONFIGURATIONS}.version < EXCLUDED.version""",
        (tenant_id, user_id, version, Jsonb(params), at))


async def load_configuration(cur: AsyncCursor[Any], tenant_id: str
                             ) -> tuple[int, dict[str, Any]]:
    """(version, settings) of the tenant's configuration; (0, {}) when none was applied."""
    await cur.execute(f"SELECT version, params FROM {CONFIGURATIONS} WHERE tenant_id = %s "
                      "AND user_id = %s", (tenant_id, TENANT_WIDE))
    row = await cur.fetchone()
    return (0, {}) if row is None else (int(row[0]), dict(row[1]))


async def save_advice(cur: AsyncCursor[Any], tenant_id: str, user_id: str, digest: str,
                      at: float) -> None:
    """The advice last issued; the later in stream order wins."""
    await cur.execute(
        f"""INSERT INTO {ADVICE} (tenant_id, user_id, digest, issued_at) VALUES (%s, %s, %s, %s)
            ON CONFLICT (tenant_id, user_id) DO UPDATE SET digest = EXCLUDED.digest,
              issued_at = EXCLUDED.issued_at""", (tenant_id, user_id, digest, at))


async def load_advice(cur: AsyncCursor[Any], tenant_id: str) -> str | None:
    """The digest of the advice last issued to the tenant."""
    await cur.execute(f"SELECT digest FROM {ADVICE} WHERE tenant_id = %s AND user_id = %s",
                      (tenant_id, TENANT_WIDE))
    row = await cur.fetchone()
    return None if row is None else str(row[0])
