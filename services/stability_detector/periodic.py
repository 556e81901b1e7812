"""Periodic rebuilds, one request per slot: each partition of the learning cache rebuilds its
own users.

A periodic rebuild looks for users with new evidence or a threshold crossing due. Were it one
request, it would land in one partition (its subject's), which would then rebuild every
partition's users, writing beside the runners that own them. So the scheduler asks once per
slot, each request on a subject stored under that slot (a reserved user of the `_system`
tenant chosen for it, `periodic_user`), and the request rebuilds the due users of its slot only
(`learning.users.slot`). Whatever the number of partitions, every slot's request reaches the
partition that owns the slot, and the work of a period splits as the users do.

Logs written before this carried one request for every user (`ALL_USERS`); such a request still
rebuilds every due user. They are only ever applied unpartitioned: a stream that holds them was
made before the partition tokens, and its projections are rebuilt whole.
"""

from __future__ import annotations

from functools import cache

from habitus.subjects import SLOTS, slot_of

SYSTEM_TENANT = "_system"
#: the single periodic request of logs written before periodic requests went per slot
ALL_USERS = "_all"


@cache
def periodic_user(slot: int) -> str:
    """The reserved user whose messages the streams store under `slot` (the first of `_all0`,
    `_all1`, ... that hashes there)."""
    if not 0 <= slot < SLOTS:
        raise ValueError(f"no slot {slot}")
    n = 0
    while slot_of(SYSTEM_TENANT, f"{ALL_USERS}{n}") != slot:
        n += 1
    return f"{ALL_USERS}{n}"


def periodic_slot(tenant_id: str, user_id: str) -> int | None:
    """The slot whose due users a periodic request rebuilds (None: every slot)."""
    if tenant_id == SYSTEM_TENANT and user_id == ALL_USERS:
        return None
    return slot_of(tenant_id, user_id)
