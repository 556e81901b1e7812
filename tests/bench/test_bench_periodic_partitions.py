"""Periodic rebuilds over a million users: each partition's work follows its own due users.

A simulated deployment: 1,000,000 users in 200 tenants of Zipf-distributed sizes (the largest
tenant alone about a sixth of all users), 10 % of them due for a periodic rebuild (a threshold
crossing) and 2 % with new evidence, in `learning.users` as the learning cache keeps them. A
periodic rebuild is requested per slot (services/stability_detector/periodic.py) and reads that
slot's due users (`store.due_users`, an index range per slot); a partition of the learning cache
gets the requests of its slots.

Figures, for 4, 8 and 16 partitions: the due users each partition rebuilds, the ratio of the most
to the least loaded partition (the issue's line: <= 1.5), and the time each partition's reads
take per due user (work proportional to the due users, not to every user). Beside them, for
contrast, what keying the partitions on the tenant would give with this mix.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

import pytest

from habitus.projection.partitions import layout
from habitus.service.migrations import migrate
from habitus.subjects import SLOTS, tenant_slot_of
from services.stability_detector import store
from tests.conftest import ServerUrls

pytestmark = pytest.mark.asyncio
USERS = 1_000_000
TENANTS = 200
AS_OF = 1_800_000_000.0


def tenant_sizes(rng: random.Random) -> list[int]:
    weights = [1 / (rank ** 1.1) for rank in range(1, TENANTS + 1)]
    total = sum(weights)
    sizes = [max(1, int(USERS * w / total)) for w in weights]
    sizes[0] += USERS - sum(sizes)
    return sizes


async def test_periodic_work_per_partition_follows_its_due_users(
        servers: ServerUrls, pool: Any, record: Any) -> None:
    migrate(servers.database, only=["learning"])
    rng = random.Random(11)
    sizes = tenant_sizes(rng)
    prefix = f"pp{rng.randrange(10**6)}"
    tenants = [f"{prefix}t{i}" for i in range(TENANTS)]
    due_by_tenant: Counter[str] = Counter()
    async with pool.connection() as conn:
        started = time.perf_counter()
        async with conn.cursor().copy(
                f"COPY {store.USERS} (tenant_id, user_id, dirty, next_due_at) FROM STDIN") as cp:
            for tenant, size in zip(tenants, sizes, strict=True):
                for n in range(size):
                    roll = rng.random()
                    due = roll < 0.10
                    dirty = 0.10 <= roll < 0.12
                    if due or dirty:
                        due_by_tenant[tenant] += 1
                    await cp.write_row((tenant, f"user-{n}", dirty,
                                        AS_OF - 60 if due else AS_OF + 86_400))
        await conn.commit()
        loaded = time.perf_counter() - started
        await conn.execute(f"ANALYZE {store.USERS}")
        await conn.commit()
        try:
            per_slot: dict[int, tuple[int, float]] = {}
            async with conn.cursor() as cur:
                for slot in range(SLOTS):
                    t = time.perf_counter()
                    found = await store.due_users(cur, AS_OF, slot)
                    mine = sum(1 for tenant, _ in found if tenant.startswith(prefix))
                    per_slot[slot] = (mine, time.perf_counter() - t)
                await cur.execute(
                    f"EXPLAIN (FORMAT JSON) SELECT tenant_id, user_id FROM {store.USERS} "
                    "WHERE slot = 3 AND next_due_at <= %s", (AS_OF,))
                plan = str((await cur.fetchone() or [""])[0])
        finally:
            await conn.execute(f"DELETE FROM {store.USERS} WHERE tenant_id LIKE %s",
                               (prefix + "%",))
            await conn.commit()

    figures: dict[str, Any] = {}
    for count in (4, 8, 16):
        due = [sum(per_slot[s][0] for s in p.slots) for p in layout(count)]
        took = [sum(per_slot[s][1] for s in p.slots) for p in layout(count)]
        by_tenant = [sum(n for t, n in due_by_tenant.items()
                         if p.covers(tenant_slot_of(t))) for p in layout(count)]
        figures[f"p{count}"] = {
            "due_users": due, "ratio": round(max(due) / min(due), 3),
            "us_per_due_user": [round(1e6 * s / max(1, d), 2) for s, d in zip(took, due,
                                                                              strict=True)],
            "if_keyed_by_tenant_ratio": round(max(by_tenant) / max(1, min(by_tenant)), 2),
        }
    assert sum(n for n, _ in per_slot.values()) == sum(due_by_tenant.values())
    record("periodic_partitions", users=USERS, tenants=TENANTS,
           largest_tenant_share=round(sizes[0] / USERS, 3),
           due_users=sum(due_by_tenant.values()), load_seconds=round(loaded, 1),
           index_scan="Index" in plan and "Seq Scan" not in plan, **figures)
