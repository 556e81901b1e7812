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
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Final

import pybase64

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
    blob = seal(key, plaintext, data_context(tenant_id, user_id, kid, str(body["event_id"]),
                                             str(body["type"])))
    return {**body, "payload": base64.b64encode(blob).decode(),
            "sealed": {"kid": kid, "alg": ALGORITHM}}


#: how every body `seal_event_json` writes ends: a reader tells a sealed body by it alone
SEALED_END: Final = b'"alg":"A256GCM"}}'


def seal_event_json(body: bytes, tenant_id: str, user_id: str, event_id: str,
                    event_type: str, keyring: Keyring) -> bytes:
    """The sealed form of an event's JSON as the envelope's model writes it (its payload the
    last field), for the publishing path: the payload's bytes are cut out and sealed, nothing
    parsed or encoded again. `,"payload":` cannot occur inside a JSON string (its quotes would
    be escaped), so the first one is the field's."""
    mark = body.index(_FIELD)
    sealer = keyring.sealer(tenant_id, user_id)
    context = sealer.context_prefix + f"{event_id}/{event_type}".encode()
    blob = pybase64.b64encode(seal(sealer.cipher, body[mark + len(_FIELD):-1], context))
    return b"".join((body[:mark], _PAYLOAD_MARK, blob, _KID_MARK, sealer.kid_bytes, _KID_END))


_FIELD = b',"payload":'
_PAYLOAD_MARK = b',"payload":"'
_KID_MARK = b'","sealed":{"kid":"'
_KID_END = b'",' + SEALED_END
# ids and types are plain tokens (habitus.ids, the envelope's patterns: no quotes, no
# backslashes), and the envelope's fields come in its model's order, so a byte search finds them
_HEAD = re.compile(rb'\{"event_id":"([^"\\]+)","type":"([^"\\]+)","schema_version":[0-9]+,'
                   rb'"tenant_id":"([^"\\]+)","user_id":"([^"\\]+)"')
#: a second of the keys `_HEAD` read, later in the envelope: it would win in a JSON parser
#: while the first was used to open the payload (the general path, which parses, then refuses
#: the body, decides). The envelope's other values are plain tokens or numbers, so the pattern
#: cannot meet a value's bytes.
_AGAIN = re.compile(rb'"(?:event_id|type|tenant_id|user_id)":')


def open_event_json(data: bytes, keyring: Keyring) -> bytes | None:
    """The plain JSON of a body `seal_event_json` wrote (the envelope, then the opened
    payload), for the reader's fast path: the owner and key id read from the bytes, nothing
    parsed here. None when the body is not in that exact form (the general path then opens
    it). Raises `Shredded` and `SealError` as `open_body` does."""
    if not data.endswith(SEALED_END):
        return None
    head = _HEAD.match(data)  # the envelope's first fields, from its first byte
    if head is None:
        return None
    # the envelope's other values are plain tokens and numbers: the first payload mark after
    # its head is the field's
    mark = data.find(_PAYLOAD_MARK, head.end())
    kid_at = data.rfind(_KID_MARK)
    if mark < 0 or kid_at < mark or _AGAIN.search(data, head.end(), mark) is not None:
        return None  # not the form this writes: the general path decides
    event_id, event_type, tenant_id, user_id = head.groups()
    kid = data[kid_at + len(_KID_MARK):-len(_KID_END)]
    try:
        blob = pybase64.b64decode(data[mark + len(_PAYLOAD_MARK):kid_at], validate=True)
    except binascii.Error:
        return None
    # `data_context` built from the bytes as they are: ids and types are ASCII tokens, and the
    # pattern above admits no escapes, so these are the bytes it would encode
    payload = open_sealed(keyring.key_of(tenant_id, user_id, kid), blob,
                          b"habitus/data/%s/%s/%s/%s/%s" % (tenant_id, user_id, kid, event_id,
                                                            event_type))
    return b"".join((data[:mark], _FIELD, payload, b"}"))


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
    plaintext = open_sealed(key, blob, data_context(tenant_id, user_id, kid,
                                                    str(body["event_id"]), str(body["type"])))
    opened = {k: v for k, v in body.items() if k != "sealed"}
    opened["payload"] = json.loads(plaintext)
    return opened
