"""Identifiers: validated at construction so a bad id never reaches a subject or a query.

Tenant and user ids become NATS subject tokens and Postgres keys, so the alphabet is closed:
no dots, spaces or wildcards can leak into a subject.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Annotated

from pydantic import StringConstraints
from uuid6 import uuid7

ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# A ULID is 128 bits in 26 base-32 digits, so the first digit is at most 7.
_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")

# Namespace for ids derived from other ids (a candidate derived from an ingest event, ...).
_DERIVED_NS = uuid.UUID("6b1f0e2a-8f0c-4c55-9a43-3f1d7c0f5e11")
_DERIVED_NS_BYTES = _DERIVED_NS.bytes


def check_id(value: str, field: str = "id") -> str:
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise ValueError(f"{field} must match [A-Za-z0-9_-]{{1,64}}, got {value!r}")
    return value


def check_event_id(value: str) -> str:
    """Accept a canonical UUID (v7 by default, v5 when derived) or a ULID; normalise case."""
    if not isinstance(value, str):
        raise ValueError("event_id must be a string")
    lowered = value.lower()
    if _UUID_RE.fullmatch(lowered):
        return lowered
    upper = value.upper()
    if _ULID_RE.fullmatch(upper):
        return upper
    raise ValueError(f"event_id must be a UUID or a ULID, got {value!r}")


def new_event_id() -> str:
    """A UUIDv7: unique, and sortable by creation time, which keeps index inserts local."""
    return str(uuid7())


def derived_event_id(*parts: str) -> str:
    """A deterministic id from its causes, so re-processing the same input publishes the same id
    and the stream's duplicate window (and every projection) drops the second copy.

    It is `uuid.uuid5(_DERIVED_NS, json.dumps(parts))`, formatted without building a `UUID`
    (half the cost; the gateway derives one per ingested item). The ids are stored, so the
    two must never differ: a property test holds them equal."""
    digest = bytearray(hashlib.sha1(_DERIVED_NS_BYTES + json.dumps(parts).encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


TenantId = Annotated[str, StringConstraints(pattern=ID_RE.pattern)]
UserId = Annotated[str, StringConstraints(pattern=ID_RE.pattern)]

#: The user id of what belongs to a whole tenant (a tenant-scoped tool rule): its events ride on
#: the tenant's `_tenant` subject and every user of the tenant sees them.
TENANT_WIDE = "_tenant"
#: Ids beginning with "_" are Habitus's own (`_tenant`, `_all`, `_system`): a caller's user id
#: never does, so no user can read or erase what belongs to the tenant.
CALLER_USER_PATTERN = r"^[A-Za-z0-9-][A-Za-z0-9_-]{0,63}$"
CallerUserId = Annotated[str, StringConstraints(pattern=CALLER_USER_PATTERN)]


def is_reserved_user(user_id: str) -> bool:
    return user_id.startswith("_")
# Checked by pydantic-core's own regex engine (no Python call per event on the hot read path).
# Case is normalised where ids enter the system (`check_event_id` at the gateway), so ids on the
# bus are already canonical.
EVENT_ID_PATTERN = (
    r"^(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25})$"
)
EventId = Annotated[str, StringConstraints(pattern=EVENT_ID_PATTERN)]
