"""Sealing an event's payload with its user's key, and opening it.

On the wire and in the stream files a sealed event keeps its envelope readable (type, ids,
times: what routing, deduplication and erasure by subject need) and carries its payload as one
base64 blob, with the key id beside it:

    {"type": "TurnRecorded", "tenant_id": "acme", "user_id": "alice", ...,
     "payload": "q0Jx...", "sealed": {"kid": "k3f9a...", "alg": "A256GCM"}}

Events of the tenant itself (user ids beginning with `_`) and the erasure tombstone (which must
stay readable after the key is gone) are not sealed. Everything else a user's events say,
turns, e-mails, documents, traces, learned values, is.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Final

from habitus.crypto.aead import open_sealed, seal
from habitus.crypto.keyring import Keyring, data_context

ALGORITHM: Final = "A256GCM"
#: event types never sealed: they must be readable after the user's key is destroyed
UNSEALED_TYPES: Final = frozenset({"UserErased"})


def sealable(event_type: str, user_id: str) -> bool:
    return not user_id.startswith("_") and event_type not in UNSEALED_TYPES


def seal_body(body: Mapping[str, Any], keyring: Keyring) -> dict[str, Any]:
    """The event body with its payload sealed (unchanged when it is not sealable)."""
    tenant_id, user_id = str(body["tenant_id"]), str(body["user_id"])
    if not sealable(str(body["type"]), user_id) or "sealed" in body:
        return dict(body)
    kid, key = keyring.current(tenant_id, user_id)
    plaintext = json.dumps(body["payload"], separators=(",", ":"),
                           ensure_ascii=False).encode()
    blob = seal(key, plaintext, data_context(tenant_id, user_id, kid))
    return {**body, "payload": base64.b64encode(blob).decode(),
            "sealed": {"kid": kid, "alg": ALGORITHM}}


def is_sealed(body: Mapping[str, Any]) -> bool:
    return isinstance(body.get("sealed"), Mapping)


def open_body(body: Mapping[str, Any], keyring: Keyring) -> dict[str, Any]:
    """The event body with its payload opened. Raises `Shredded` when the user's key was
    destroyed, `SealError` (a ValueError) when the blob does not open, ValueError when the
    envelope is malformed."""
    if not is_sealed(body):
        return dict(body)
    sealed = body["sealed"]
    if sealed.get("alg") != ALGORITHM or not isinstance(sealed.get("kid"), str):
        raise ValueError(f"sealed: unknown algorithm or key id ({dict(sealed)!r})")
    tenant_id, user_id, kid = str(body["tenant_id"]), str(body["user_id"]), sealed["kid"]
    key = keyring.key(tenant_id, user_id, kid)
    try:
        blob = base64.b64decode(str(body["payload"]), validate=True)
    except ValueError:
        raise ValueError("payload: a sealed payload must be base64") from None
    plaintext = open_sealed(key, blob, data_context(tenant_id, user_id, kid))
    opened = {k: v for k, v in body.items() if k != "sealed"}
    opened["payload"] = json.loads(plaintext)
    return opened
