"""Sealing an event's payload with its user's key, and opening it.

On the wire and in the stream files a sealed event keeps its envelope readable (type, ids,
times: what routing, deduplication and erasure by subject need) and carries its payload as one
base64 blob, with the key id beside it:

    {"event_id": "...", "type": "TurnRecorded", "tenant_id": "acme", "user_id": "alice", ...,
     "payload": "q0Jx...", "sealed": {"kid": "k3f9a...", "alg": "A256GCM", "aad": "envelope"}}

The associated data is the envelope itself, every byte of the JSON up to `,"payload":`: an
envelope altered in any way (another owner, a key given twice, another time) does not open, and
a reader needs no parse of it to trust it. So a reader opens the payload from the bytes as
written (`open_event_json`), and only reads the owner out of the envelope when its memo of the
key id misses. Bodies sealed before (no `"aad"`; the associated data then was the owner, key id,
event id and type, `data_context`) still open, by the envelope's pattern or from the parsed
body (`open_body`).

Both hot paths, `seal_event_json` and `EnvelopeOpener`, run compiled where the C extension
was built (habitus.crypto.compiled). It answers None wherever its fast path does not apply,
and the Python below decides, so both open, refuse and fall back on the same bodies.

Events of the tenant itself (user ids beginning with `_`) and the erasure tombstone (which must
stay readable after the key is gone) are not sealed. Everything else a user's events say,
turns, e-mails, documents, traces, learned values, is.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final

import pybase64
from cryptography.exceptions import InvalidTag

from habitus.crypto import compiled
from habitus.crypto.aead import NONCE_BYTES, SealError, open_sealed, seal
from habitus.crypto.keyring import Keyring, data_context, is_key_id

#: the compiled opener and sealer (habitus.crypto.compiled), or None: tests set them
native_open = compiled.open_enveloped
native_seal = compiled.seal_enveloped

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
SEALED_END: Final = b'"alg":"A256GCM","aad":"envelope"}}'
#: how a body sealed before the envelope was the associated data ends
SEALED_END_V1: Final = b'"alg":"A256GCM"}}'


def seal_event_json(body: bytes, tenant_id: str, user_id: str, event_id: str,
                    event_type: str, keyring: Keyring) -> bytes:
    """The sealed form of an event's JSON as the envelope's model writes it (its payload the
    last field), for the publishing path: the payload's bytes are cut out and sealed, nothing
    parsed or encoded again. `,"payload":` cannot occur inside a JSON string (its quotes would
    be escaped), so the first one is the field's."""
    sealer = keyring.sealer(tenant_id, user_id)
    if native_seal is not None and sealer.compiled is not None:
        return native_seal(body, sealer.compiled, sealer.kid_bytes)
    mark = body.index(_FIELD)
    envelope = body[:mark]  # the associated data: what the reader authenticates as written
    blob = pybase64.b64encode(seal(sealer.cipher, body[mark + len(_FIELD):-1], envelope))
    return b"".join((envelope, _PAYLOAD_MARK, blob, _KID_MARK, sealer.kid_bytes, _KID_END))


_FIELD = b',"payload":'
_PAYLOAD_MARK = b',"payload":"'
_KID_MARK = b'","sealed":{"kid":"'
_KID_END = b'",' + SEALED_END
_KID_END_V1 = b'",' + SEALED_END_V1
_KID_MARK_LEN, _KID_END_LEN, _PAYLOAD_MARK_LEN = len(_KID_MARK), len(_KID_END), len(_PAYLOAD_MARK)
# The envelope as its model writes it, up to its sealed payload's first byte: every field in
# the model's order (`ENVELOPE_FIELDS`), ids and types plain tokens (habitus.ids, the
# envelope's patterns: no quotes, no backslashes), the rest numbers, null, or strings without
# escapes. Matched whole, it leaves no room for a key given twice (a JSON parser would take
# the second, while the first opened the payload), and no search for the payload's field.
_ENVELOPE = re.compile(
    rb'\{"event_id":"([^"\\]+)","type":"([^"\\]+)","schema_version":[0-9]+,'
    rb'"tenant_id":"([^"\\]+)","user_id":"([^"\\]+)","occurred_at":[-+.eE0-9]+,'
    rb'"producer":"[^"\\]*","causation_id":(?:null|"[^"\\]*"),'
    rb'"correlation_id":(?:null|"[^"\\]*"),"payload":"')


def open_event_json(data: bytes, keyring: Keyring) -> bytes | None:
    """The plain JSON of a sealed body as written (the envelope, then the opened payload), for
    a body read alone (a consumer's batch opens its bodies with one `EnvelopeOpener`). None
    when the body is no sealed body in a form this reads from its bytes (the general path,
    `open_body`, then opens it). Raises `Shredded` and `SealError` as `open_body` does."""
    if data.endswith(SEALED_END):
        return _open_enveloped(data, keyring)
    if data.endswith(SEALED_END_V1):
        return _open_v1(data, keyring)
    return None


def _open_enveloped(data: bytes, keyring: Keyring) -> bytes:
    """`open_event_json` for a body sealed with its envelope as the associated data."""
    return EnvelopeOpener(keyring)(data)


class EnvelopeOpener:
    """Opens bodies sealed with their envelope as the associated data, for one batch of
    deliveries: the hot path of every consumer, so written for the interpreter. The key comes
    from the keyring's memo by key id (`Keyring.kid_memo`) when its entry was read within the
    keys' ttl, as of when the opener was made, and the envelope names its owner: at the offset
    it had before (events of one type and id format place it alike), else anywhere in the
    envelope (the compiled opener accepts exactly the same); anything else asks
    `envelope_key`, which reads the owner out of the envelope. An erasure announced to this
    process clears the memo in place (`Keyring.forget`), so an opener made before it no longer
    finds the key.

    The payload is the body's last field and base64 holds no quote, so the last
    `,"payload":"` before the key id is the payload's: a second one earlier (a key given
    twice) is part of the envelope, which then does not open. A blob too short to hold a nonce
    and a tag does not open either (AES-GCM refuses it)."""

    __slots__ = ("_fresh_after", "_keyring", "_memo", "fast")

    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring
        memo = keyring.kid_memo()
        self._memo = memo.get
        self._fresh_after = keyring.memo_fresh_after()
        #: the compiled opener with this batch's memo and clock bound (a call goes straight to
        #: C): the plain JSON, None where this class's own path must decide, SealError when
        #: the body does not open. None where it was not built.
        self.fast: Callable[[bytes], bytes | None] | None = (
            None if native_open is None else partial(native_open, memo, self._fresh_after))

    def __call__(self, data: bytes) -> bytes:
        fast = self.fast
        if fast is not None:
            opened = fast(data)
            if opened is not None:
                return opened
        return self.decide(data)

    def decide(self, data: bytes) -> bytes:
        """This class's own path, for a body the compiled one answered None for (or where it
        was not built): a caller that already asked `fast` comes here, not to `__call__`."""
        kid_at = data.rfind(_KID_MARK)
        at = data.rfind(_PAYLOAD_MARK, 0, kid_at)
        if kid_at < 0 or at < 0:
            raise SealError("sealed, but holds no payload and key id")
        envelope = data[:at]
        kid = data[kid_at + _KID_MARK_LEN:-_KID_END_LEN]
        found = self._memo(kid)
        if (found is not None and found[0] >= self._fresh_after
                and (envelope.startswith(found[2], found[3]) or found[2] in envelope)):
            cipher = found[1]
        else:
            cipher = self._keyring.envelope_key(kid, envelope)
        # not validated: the decoder skips what is not base64, and what it leaves must still
        # open under the tag, so nothing unauthenticated gets through (0.25 µs a body less)
        try:
            blob = pybase64.b64decode(data[at + _PAYLOAD_MARK_LEN:kid_at])
        except binascii.Error:  # its padding is wrong
            raise SealError("a sealed payload must be base64") from None
        try:
            payload = cipher.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], envelope)
        except (InvalidTag, ValueError):  # ValueError: too short to hold a nonce
            raise SealError("does not open with this key for this envelope") from None
        return b'%s,"payload":%s}' % (envelope, payload)


def _open_v1(data: bytes, keyring: Keyring) -> bytes | None:
    """`open_event_json` for a body sealed before the envelope was the associated data: the
    owner and ids read from the envelope by its exact pattern (matched whole, it leaves no
    room for a key given twice); None when the envelope is not in that form."""
    envelope = _ENVELOPE.match(data)
    if envelope is None:
        return None
    start = envelope.end()
    kid_at = data.rfind(_KID_MARK, start)
    if kid_at < 0:
        return None  # not the form this writes: the general path decides
    event_id, event_type, tenant_id, user_id = envelope.groups()
    cipher, prefix = keyring.opener(tenant_id, user_id,
                                    data[kid_at + len(_KID_MARK):-len(_KID_END_V1)])
    try:
        blob = pybase64.b64decode(data[start:kid_at], validate=True)
    except binascii.Error:
        return None
    if len(blob) < NONCE_BYTES + 16:
        raise SealError("too short to be sealed")
    # the associated data as `data_context` builds it: ids and types are ASCII tokens, and
    # the pattern admits no escapes, so these are the bytes it would encode
    try:
        payload = cipher.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:],
                                 b"%s%s/%s" % (prefix, event_id, event_type))
    except InvalidTag:
        raise SealError("does not open with this key for this owner") from None
    return b"%s%s}" % (data[:start - 1], payload)


def is_sealed(body: Mapping[str, Any]) -> bool:
    return isinstance(body.get("sealed"), Mapping)


def open_body(body: Mapping[str, Any], keyring: Keyring) -> dict[str, Any]:
    """The event body with its payload opened. Raises `Shredded` when the user's key was
    destroyed, `SealError` (a ValueError) when the blob does not open, ValueError when the
    envelope is malformed."""
    if not is_sealed(body):
        return dict(body)
    sealed = body["sealed"]
    if sealed.get("aad") == "envelope":
        raise ValueError("sealed with its envelope as written: it opens from its bytes "
                         "(open_event), not from a parsed copy")
    kid = sealed.get("kid")
    if sealed.get("alg") != ALGORITHM or not isinstance(kid, str) or not is_key_id(kid):
        raise ValueError(f"sealed: unknown algorithm or key id ({dict(sealed)!r})")
    tenant_id, user_id = str(body["tenant_id"]), str(body["user_id"])
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


def open_event(data: bytes, keyring: Keyring) -> dict[str, Any]:
    """A message's body, parsed, with its payload opened (any body: one not sealed is only
    parsed). For readers that want the event as a document (the CLI, the gateway's duplicate
    check). Raises as `open_body` does, ValueError when the body is no JSON object."""
    plain = open_event_json(data, keyring)
    doc = json.loads(plain if plain is not None else data)
    if not isinstance(doc, dict):
        raise ValueError("an event must be a JSON object")
    return open_body(doc, keyring) if plain is None else doc
