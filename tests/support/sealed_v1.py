"""Bodies sealed in the form written before the envelope became the associated data (no
`"aad"` in `sealed`; the associated data the owner, key id, event id and type): streams hold
them from then, so readers must still open them. This writes one as that writer did, for the
tests that hold readers to it."""

from __future__ import annotations

import pybase64

from habitus.crypto.aead import seal
from habitus.crypto.keyring import Keyring, data_context


def seal_event_json_v1(body: bytes, tenant_id: str, user_id: str, event_id: str,
                       event_type: str, keyring: Keyring) -> bytes:
    """`body` (an event's JSON as the envelope's model writes it, its payload last) sealed in
    the earlier form."""
    field = b',"payload":'
    mark = body.index(field)
    kid, key = keyring.current(tenant_id, user_id)
    blob = pybase64.b64encode(seal(key, body[mark + len(field):-1],
                                   data_context(tenant_id, user_id, kid, event_id, event_type)))
    return b"".join((body[:mark], b',"payload":"', blob, b'","sealed":{"kid":"', kid.encode(),
                     b'","alg":"A256GCM"}}'))
