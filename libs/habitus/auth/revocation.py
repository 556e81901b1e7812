"""Revocation at once: a revoked key is announced on the bus, and every gateway replica that
hears it forgets the key before its cache would have.

The key table stays the truth (a gateway that missed the announcement, being disconnected,
refuses the key when its cache entry expires, `HABITUS_KEY_CACHE_SECONDS`); the announcement
is what makes "revoked" mean "refused everywhere within a second" while the cache still spares
every call a query. It is a core NATS message, not a stored event: it carries only the key's
hash, and a gateway that starts later reads the table anyway.
"""

from __future__ import annotations

import json
from typing import Any, Final

from habitus.subjects import PREFIX, VERSION

#: where revocations are announced; every gateway replica subscribes (no queue group)
KEYS_REVOKED: Final = f"{PREFIX}.{VERSION}.control.keys.revoked"


def announcement(key_hash: str, tenant_id: str) -> bytes:
    return json.dumps({"key_hash": key_hash, "tenant_id": tenant_id}).encode()


def read_announcement(data: bytes) -> str | None:
    """The revoked key's hash, or None for a message that is not one (ignored, logged)."""
    try:
        found: Any = json.loads(data)
    except ValueError:
        return None
    digest = found.get("key_hash") if isinstance(found, dict) else None
    return digest if isinstance(digest, str) and len(digest) == 64 else None


async def announce(nc: Any, revoked: list[tuple[str, str]]) -> None:
    """Announce each (key hash, tenant) revoked and flush, so the announcement has left when
    this returns."""
    for key_hash, tenant_id in revoked:
        await nc.publish(KEYS_REVOKED, announcement(key_hash, tenant_id))
    await nc.flush(timeout=5)
