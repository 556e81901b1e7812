"""Telling every process that a user's keys were destroyed.

Erasure destroys the keys in the store and drops them from the erasing process's keyring; the
other processes would keep sealing with (and opening by) their cached copy until it expired.
So the erasure announces it on the bus, and every process with a keyring forgets the user on
hearing it (`habitus.service.host` subscribes). Core NATS: the key store is the truth, and a
process that missed it drops the key within the keyring's TTL anyway.
"""

from __future__ import annotations

import json
from typing import Any, Final

#: every process subscribes (no queue group)
KEYS_DESTROYED: Final = "habitus.v1.control.datakeys.destroyed"


def destroyed(tenant_id: str, user_id: str) -> bytes:
    return json.dumps({"tenant_id": tenant_id, "user_id": user_id}).encode()


def read_destroyed(data: bytes) -> tuple[str, str] | None:
    try:
        found: Any = json.loads(data)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    tenant_id, user_id = found.get("tenant_id"), found.get("user_id")
    if isinstance(tenant_id, str) and isinstance(user_id, str):
        return tenant_id, user_id
    return None
