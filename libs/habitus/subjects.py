"""Subject builders and parsers: the one place that knows how subjects are spelled.

Every subject ends in `<tenant>.<user>` so consumers can partition by user with a subject filter
and an operator can erase a user by purging their subjects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from habitus.ids import check_id

PREFIX = "habitus"
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


def parse_subject(subject: str) -> ParsedSubject:
    parts = subject.split(".")
    if len(parts) != 6 or parts[0] != PREFIX or parts[1] != VERSION:
        raise ValueError(f"not a habitus v1 subject: {subject!r}")
    family = parts[2]
    if family not in ("ingest", "event", "dlq"):
        raise ValueError(f"unknown subject family {family!r} in {subject!r}")
    return ParsedSubject(family, parts[3], parts[4], parts[5])


def rpc_method(subject: str) -> str:
    if not subject.startswith(RPC_ROOT + "."):
        raise ValueError(f"not an rpc subject: {subject!r}")
    return subject[len(RPC_ROOT) + 1 :]


def user_filter(root: str, name: str, tenant_id: str = "*", user_id: str = "*") -> str:
    """A subject filter: e.g. all event types of one user, `user_filter(EVENT_ROOT, "*", t, u)`."""
    return f"{root}.{name}.{tenant_id}.{user_id}"
