"""Turning POSTed items into events: pure, so every rejection rule is unit-tested without I/O.

The tenant never comes from the item: it comes from the API key. An item may repeat it, but a
different one is rejected rather than silently rewritten.

Validation is strict (no coercion: `true` or `"1764460800"` is not a number; an int is still
fine for a float), because a coerced value is a guess about what the agent meant, and a wrong
guess becomes a learned belief. Text that cannot be stored, times before 2000 or too far in the
future, and an answer timed before its message are refused here too, each naming the field.
"""

from __future__ import annotations

import functools
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from habitus.events import CATALOG, Catalog, Event, EventValidationError, FieldError
from habitus.events.ingest import (
    NATURAL_KEYS,
    TIMESTAMP,
    TurnRecorded,
    natural_event_id,
    natural_event_id_of_item,
)
from habitus.ids import check_event_id, is_reserved_user, new_event_id
from services.gateway.body import format_path, unstorable

ITEM_KEYS = frozenset(
    {
        "type",
        "user_id",
        "payload",
        "event_id",
        "occurred_at",
        "schema_version",
        "causation_id",
        "correlation_id",
        "producer",
        "tenant_id",
    }
)
MAX_REPORTED = 10
#: No time before 2000-01-01T00:00:00Z is accepted: nothing Habitus learns from happened then,
#: and the times that land there are slips (0, -0, an unset clock, a day count for seconds).
EARLIEST_TIME = 946_684_800.0
EARLIEST_TIME_TEXT = "2000-01-01T00:00:00Z"
#: Times of one payload that must not run backwards: (earlier, later, why), the later one named
#: in the error. Checked here, at the edge, rather than in the models, so events already in the
#: log still decode wherever they are replayed.
ORDERED_TIMES: dict[type[BaseModel], tuple[tuple[str, str, str], ...]] = {
    TurnRecorded: (
        ("user_at", "assistant_at", "an answer cannot be sent before the message it answers"),
        ("previous_assistant_at", "user_at",
         "the previous answer must come before this message"),
    ),
}
#: the event id an item without one is validated with when its type derives one from its
#: natural key (replaced before the event leaves `build_event`)
_UNDERIVED = "00000000-0000-0000-0000-000000000000"
# How unstorable text (see `services.gateway.body.unstorable`) can appear in a JSON body's
# bytes: a NUL or surrogate escape, a surrogate encoded in the bytes (json.loads decodes them
# with surrogatepass), or a NUL byte (invalid in JSON text; every UTF-16 or UTF-32 body has one).
_MAY_BE_UNSTORABLE = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]|\x00")


def may_hold_unstorable(raw: bytes) -> bool:
    """Could a string or key of this JSON body be unstorable? False only when none can be, so
    the per-item walk is skipped (a C-speed scan of the bytes instead of a Python walk of every
    value); true also for some bodies that hold none (an escaped backslash before `u0000`, a
    valid surrogate pair), which the walk then clears."""
    return _MAY_BE_UNSTORABLE.search(raw) is not None


@dataclass
class ItemOutcome:
    index: int
    type: str | None
    event: Event[Any] | None = None
    errors: list[FieldError] = field(default_factory=list)
    too_large: bool = False
    #: why it was rejected, a bounded category for `habitus_gateway_ingest_rejected_total`
    reason: str = "invalid_payload"

    @property
    def ok(self) -> bool:
        return self.event is not None


def _encoded_size(item: dict[str, Any]) -> int:
    return len(json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode())


def build_event(
    item: Any,
    *,
    index: int,
    tenant_id: str,
    now: float,
    max_item_bytes: int | None,
    max_clock_skew: float | None = None,
    default_producer: str = "gateway",
    catalog: Catalog = CATALOG,
    text_checked: bool = False,
) -> ItemOutcome:
    """One item → an event or its errors. `max_item_bytes=None` means the caller already knows
    the item fits (its whole body is under the limit), so it is not re-encoded to measure it.
    `max_clock_skew`: how many seconds after `now` a reported time may be (None: no limit).
    `text_checked=True` means the caller knows no string of the item is unstorable (its body
    passed `may_hold_unstorable`), so the item is not walked for them.

    Without an event_id the item gets one derived from its type's natural key (see
    `habitus.events.ingest.NATURAL_KEYS`), so a client's retry is the same event."""
    if not isinstance(item, dict):
        return ItemOutcome(index, None, errors=[FieldError("item", "must be a JSON object")],
                           reason="not_object")
    bad_text = [] if text_checked else [FieldError(path, reason)
                                        for path, reason in unstorable(item)]
    if bad_text:
        # Nothing of this item is echoed back: it may not even be encodable in the answer.
        return ItemOutcome(index, None, errors=bad_text[:MAX_REPORTED], reason="unstorable_text")
    type_name = item.get("type") if isinstance(item.get("type"), str) else None
    size = 0 if max_item_bytes is None else _encoded_size(item)
    if max_item_bytes is not None and size > max_item_bytes:
        return ItemOutcome(
            index, type_name, too_large=True, reason="too_large",
            errors=[FieldError("item", f"is {size} bytes; the limit is {max_item_bytes}")],
        )
    unknown = [] if ITEM_KEYS.issuperset(item) else sorted(set(item) - ITEM_KEYS)
    if unknown:
        return ItemOutcome(
            index, type_name, errors=[FieldError(k, "unknown field") for k in unknown],
            reason="unknown_field")
    if "type" not in item:
        return ItemOutcome(index, None, errors=[FieldError("type", "field required")],
                           reason="type")
    if type_name is None or type_name not in catalog:
        return ItemOutcome(index, type_name, errors=[FieldError(
            "type", f"unknown event type {item.get('type')!r}; ingest types are "
            + ", ".join(catalog.ingest_types()))], reason="type")
    spec = catalog.spec(type_name)
    if spec.stream != "ingest" or spec.internal:
        return ItemOutcome(index, type_name, errors=[FieldError(
            "type", f"{type_name} is published by Habitus itself, not ingested")], reason="type")
    if "tenant_id" in item and item["tenant_id"] != tenant_id:
        return ItemOutcome(index, type_name, errors=[FieldError(
            "tenant_id", "does not match the tenant of the API key")], reason="tenant_id")
    if "user_id" not in item:
        return ItemOutcome(index, type_name, errors=[FieldError("user_id", "field required")],
                           reason="user_id")
    if isinstance(item["user_id"], str) and is_reserved_user(item["user_id"]):
        return ItemOutcome(index, type_name, errors=[FieldError(
            "user_id", "ids beginning with '_' are reserved for Habitus")], reason="user_id")
    body = dict(item)
    body["tenant_id"] = tenant_id
    given_id = "event_id" in body
    if given_id:
        try:
            body["event_id"] = check_event_id(body["event_id"])
        except ValueError as exc:
            return ItemOutcome(index, type_name, errors=[FieldError("event_id", str(exc))],
                               reason="event_id")
    else:
        # A type with a natural key gets its derived id (from the payload as sent where it can
        # be, else from the validated one below); no fresh id is drawn for it.
        derived = natural_event_id_of_item(spec.payload, body.get("payload"), tenant_id,
                                           body["user_id"])
        body["event_id"] = derived or (_UNDERIVED if spec.payload in NATURAL_KEYS
                                       else new_event_id())
    body.setdefault("occurred_at", now)
    body.setdefault("producer", default_producer)
    body.setdefault("schema_version", 1)
    try:
        event = catalog.decode(body, strict=True)
    except EventValidationError as exc:
        return ItemOutcome(index, type_name, errors=exc.errors)
    wrong_times, reason = time_errors(event, now, max_clock_skew)
    if wrong_times:
        return ItemOutcome(index, type_name, errors=wrong_times, reason=reason)
    if not given_id and event.event_id == _UNDERIVED:
        # never published under the placeholder
        derived = natural_event_id(event.payload, event.tenant_id, event.user_id)
        event = event.model_copy(update={"event_id": derived or new_event_id()})
    return ItemOutcome(index, type_name, event=event)


def _times(event: Event[Any]) -> list[tuple[tuple[str, ...], float]]:
    """(field path, value) of every time in the event: the envelope's occurred_at and every
    field of the payload marked `Timestamp`, at any depth (the path as segments: formatted only
    for an error)."""
    found: list[tuple[tuple[str, ...], float]] = [(("occurred_at",), event.occurred_at)]
    todo: list[tuple[tuple[str, ...], BaseModel]] = [(("payload",), event.payload)]
    while todo:
        path, model = todo.pop()
        stamps, nested = _fields_of(type(model))
        for name, alias in stamps:
            value = getattr(model, name)
            if value is not None:
                found.append(((*path, alias), float(value)))
        for name, alias in nested:
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                todo.append(((*path, alias), value))
            elif isinstance(value, list | tuple):
                todo.extend(((*path, alias, str(i)), v) for i, v in enumerate(value)
                            if isinstance(v, BaseModel))
    return found


def time_errors(event: Event[Any], now: float, max_clock_skew: float | None
                ) -> tuple[list[FieldError], str]:
    """What is wrong with the event's times, and the metric reason: a time before
    `EARLIEST_TIME` (0, -0 and seconds-vs-milliseconds slips land there), a time more than
    `max_clock_skew` after `now`, or two times of one payload out of their order (an answer
    before the message it answers)."""
    times = _times(event)
    early = [FieldError(format_path(path), f"is before {EARLIEST_TIME_TEXT} (epoch "
                                           f"{EARLIEST_TIME:.0f}), the earliest time accepted; "
                                           "times are epoch seconds")
             for path, value in times if value < EARLIEST_TIME]
    if early:
        return early, "too_early"
    if max_clock_skew is not None:
        limit = now + max_clock_skew
        future = [FieldError(format_path(path), f"is {value - now:.0f}s in the future; clocks "
                                                f"may differ by at most {max_clock_skew:g}s")
                  for path, value in times if value > limit]
        if future:
            return future, "clock_skew"
    disordered = [FieldError(f"payload.{later}", f"is {before_value - later_value:g}s before "
                                                 f"payload.{earlier}; {why}")
                  for earlier, later, why in ORDERED_TIMES.get(type(event.payload), ())
                  if (before_value := getattr(event.payload, earlier)) is not None
                  and (later_value := getattr(event.payload, later)) is not None
                  and later_value < before_value]
    return disordered, "time_order"


@functools.cache
def _fields_of(model: type[BaseModel]) -> tuple[tuple[tuple[str, str], ...],
                                                tuple[tuple[str, str], ...]]:
    """A model's timestamp fields and the fields that may hold models, as (name, wire name)."""
    stamps, nested = [], []
    for name, info in model.model_fields.items():
        wire = info.alias or name
        if TIMESTAMP in info.metadata or _marked(info.annotation):
            stamps.append((name, wire))
        elif _holds_model(info.annotation):
            nested.append((name, wire))
    return tuple(stamps), tuple(nested)


def _marked(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        return TIMESTAMP in typing.get_args(annotation)[1:]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_marked(a) for a in typing.get_args(annotation))
    return False


def _holds_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_model(a) for a in typing.get_args(annotation))
