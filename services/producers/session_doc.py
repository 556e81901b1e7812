"""A session's stored document read back into its heuristic state and pending question.

Every turn the producers apply reads its session's document (a batch of a busy deployment
holds mostly distinct sessions), and reading it item by item in Python, forgiving whatever is
malformed, cost about 30 µs a ten-turn session and grew with the session. A document this
service wrote is well-formed, so it is read first by one strict pydantic-core validation,
straight from the stored text; only a document that fails it (written by an older version, or
damaged) takes the forgiving path, which drops what is malformed and keeps the rest. Both give
the same answer for every document (tests/unit/test_producers_session_doc.py).
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import ConfigDict, TypeAdapter
from pydantic_core import from_json
from typing_extensions import TypedDict

from services.producers.heuristics import MAX_TURNS, SessionState
from services.producers.stated import Proposal


class _Stored(TypedDict, total=False):
    """The document's shape as `SessionState.to_json` and the projection write it; strict, so
    a bool is no count and a float no length, as the forgiving reading has it."""

    __pydantic_config__ = ConfigDict(strict=True)  # type: ignore[misc]

    turns: list[tuple[str, int, int]]
    fired: list[str]
    cooldowns: dict[str, float]
    corrections: dict[str, int]
    proposal: tuple[str, str, str] | None


_STRICT: Final = TypeAdapter(_Stored)


def read_session(text: str | None) -> tuple[SessionState, Proposal | None]:
    """The state and pending confirmation question a stored document holds; a new session's
    (None) are empty."""
    if text is None:
        return SessionState(), None
    try:
        doc = _STRICT.validate_json(text)
    except ValueError:  # pydantic's ValidationError is one
        return read_forgiving(text)
    return SessionState(turns=doc.get("turns", [])[-MAX_TURNS:], fired=set(doc.get("fired", ())),
                        cooldowns=doc.get("cooldowns", {}),
                        corrections=doc.get("corrections", {})), doc.get("proposal")


def read_forgiving(text: str) -> tuple[SessionState, Proposal | None]:
    """Whatever of the document is well-formed: a corrupt state costs some candidates, never
    the consumer."""
    try:
        doc = from_json(text)
    except ValueError:
        doc = None
    return SessionState.from_json(doc), stored_proposal(doc)


def stored_proposal(doc: Any) -> Proposal | None:
    """The confirmation question pending in a session, as stored with its state."""
    raw = doc.get("proposal") if isinstance(doc, dict) else None
    if isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, str) for x in raw):
        return (raw[0], raw[1], raw[2])
    return None
