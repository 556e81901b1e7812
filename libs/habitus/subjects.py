"""Subject builders and parsers: the one place that knows how subjects are spelled.

Publishers write `habitus.v1.<family>.<name>.<tenant>.<user>`. The ingest and event streams
store each message with two more tokens, appended by the stream itself (a subject transform,
`habitus.bus.streams`): the *user slot* and the *tenant slot*, NATS's own deterministic
partition of `<tenant><user>` and of `<tenant>` into `SLOTS` buckets (FNV-1a, what the server's
`partition()` computes; `slot_of` is the same function, checked against the server in the
suite). So a stored subject is `habitus.v1.event.CacheRebuilt.acme.alice.13.4`, a consumer can
take one partition of the users (or of the tenants) with a subject filter, and publishers never
need to know. The number of slots is part of the wire format, fixed for good: a projection's
partitions are unions of slots (`habitus.projection.partitions`), so their number can change
without a stored subject changing.

Every subject keeps `<tenant>.<user>` in fixed places, so an operator can erase a user by
purging their subjects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from habitus.ids import check_id

PREFIX = "habitus"
#: buckets of the stored partition tokens: the most partitions any projection can have
SLOTS = 16
VERSION = "v1"
INGEST_ROOT = f"{PREFIX}.{VERSION}.ingest"
EVENT_ROOT = f"{PREFIX}.{VERSION}.event"
DLQ_ROOT = f"{PREFIX}.{VERSION}.dlq"
RPC_ROOT = f"{PREFIX}.rpc"


def _token(value: str, field: str) -> str:
    if not value or any(c in value for c in ". *>\t\r\n"):
        raise ValueError(f"{field} {value!r} cannot be a subject token")
    return value


def ingest_subject(kind: str, tenant_id: str, user_id: str) -> str:
    return (
        f"{INGEST_ROOT}.{_token(kind, 'kind')}."
        f"{check_id(tenant_id, 'tenant_id')}.{check_id(user_id, 'user_id')}"
    )


def event_subject(event_type: str, tenant_id: str, user_id: str) -> str:
    return (
        f"{EVENT_ROOT}.{_token(event_type, 'type')}."
        f"{check_id(tenant_id, 'tenant_id')}.{check_id(user_id, 'user_id')}"
    )


def dlq_subject(consumer: str, tenant_id: str, user_id: str) -> str:
    return (
        f"{DLQ_ROOT}.{_token(consumer, 'consumer')}."
        f"{_safe_id(tenant_id)}.{_safe_id(user_id)}"
    )


_METHOD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)*")


def rpc_subject(method: str) -> str:
    if not _METHOD_RE.fullmatch(method):
        raise ValueError(f"rpc method {method!r} must be dotted words of [A-Za-z0-9_]")
    return f"{RPC_ROOT}.{method}"


def _safe_id(value: str) -> str:
    """A DLQ subject must be buildable even for the event whose ids were the problem."""
    try:
        return check_id(value)
    except ValueError:
        return "_invalid"


@dataclass(frozen=True, slots=True)
class ParsedSubject:
    family: str  # "ingest" | "event" | "dlq"
    name: str  # ingest kind, event type or consumer name
    tenant_id: str
    user_id: str
    #: the stored partition tokens (None: a subject as published, or stored before them)
    user_slot: int | None = None
    tenant_slot: int | None = None

    @property
    def published(self) -> str:
        """The subject as its publisher wrote it (without the stored partition tokens)."""
        return f"{PREFIX}.{VERSION}.{self.family}.{self.name}.{self.tenant_id}.{self.user_id}"


def parse_subject(subject: str) -> ParsedSubject:
    """A subject as published (6 tokens) or as stored with its two partition tokens (8)."""
    parts = subject.split(".")
    if len(parts) not in (6, 8) or parts[0] != PREFIX or parts[1] != VERSION:
        raise ValueError(f"not a habitus v1 subject: {subject!r}")
    family = parts[2]
    if family not in ("ingest", "event", "dlq"):
        raise ValueError(f"unknown subject family {family!r} in {subject!r}")
    if len(parts) == 8:
        if not (parts[6].isdigit() and parts[7].isdigit()):
            raise ValueError(f"partition tokens must be numbers in {subject!r}")
        return ParsedSubject(family, parts[3], parts[4], parts[5], int(parts[6]),
                             int(parts[7]))
    return ParsedSubject(family, parts[3], parts[4], parts[5])


def rpc_method(subject: str) -> str:
    if not subject.startswith(RPC_ROOT + "."):
        raise ValueError(f"not an rpc subject: {subject!r}")
    return subject[len(RPC_ROOT) + 1 :]


def published_filter(root: str, name: str, tenant_id: str = "*", user_id: str = "*") -> str:
    """A filter on subjects as published (and as the DLQ stores them): e.g. every event type
    of one user, `published_filter(EVENT_ROOT, "*", t, u)`."""
    return f"{root}.{name}.{tenant_id}.{user_id}"


def user_filter(root: str, name: str, tenant_id: str = "*", user_id: str = "*") -> str:
    """A filter on subjects as the ingest and event streams store them (with their partition
    tokens): e.g. every event type of one user, `user_filter(EVENT_ROOT, "*", t, u)`."""
    return f"{root}.{name}.{tenant_id}.{user_id}.*.*"


def slot_filter(root: str, name: str, *, user_slot: int | str = "*",
                tenant_slot: int | str = "*") -> str:
    """A filter on stored subjects of one user slot or one tenant slot (a partition's part)."""
    return f"{root}.{name}.*.*.{user_slot}.{tenant_slot}"


def _fnv1a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def slot_of(tenant_id: str, user_id: str) -> int:
    """The user slot the streams store a user's messages under: NATS's `partition(SLOTS, ...)`
    of the tenant and user tokens (FNV-1a over their bytes, joined as they are)."""
    return _fnv1a((tenant_id + user_id).encode()) % SLOTS


def tenant_slot_of(tenant_id: str) -> int:
    """The tenant slot the streams store a tenant's messages under."""
    return _fnv1a(tenant_id.encode()) % SLOTS


def partition_transform(root: str) -> tuple[str, str]:
    """(source, destination) of the stream subject transform that appends the user and
    tenant slots to every subject under `root` (`<root>.<name>.<tenant>.<user>`)."""
    return (f"{root}.*.*.*",
            f"{root}.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}.{{{{wildcard(3)}}}}"
            f".{{{{partition({SLOTS},2,3)}}}}.{{{{partition({SLOTS},2)}}}}")
