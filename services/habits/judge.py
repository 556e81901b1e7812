"""The selection judge's pure parts: what it is shown, and how its answer is read.

Retrieval finds habits whose condition resembles the request; the judge decides whether a
condition actually holds for the request now. It sees as little as will do: the redacted,
bounded request, a few bounded prior turns, and the candidates' conditions under aliases
`c1..cN`. Never a behavior (the judge must not pick a habit for what it would make the
assistant do) and never a habit id (ids are ours; a model that echoes one back has seen
something it should not have, or made something up).

Its answer is read failing closed: anything but a judgment for every alias, each exactly
once and spelled exactly as given, with a known reason that agrees with `applicable`, means
no guidance at all for this request. A wrong habit injected is worse than none. Within a
well-formed answer, low confidence only means "not selected"; it does not discredit the
other judgments.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from services.habits.identity import canonical_json
from services.habits.redaction import redact

REASONS: tuple[str, ...] = (
    "current_applicability",
    "context_only_applicability",
    "meta_discussion",
    "mere_mention",
    "quoted_text",
    "negated",
    "generic_wording",
    "hypothetical_or_future",
    "not_currently_relevant",
)
APPLICABLE_REASON = "current_applicability"
JUDGE_SCHEMA_VERSION = 3
MAX_SELECTED = 3
MIN_JUDGE_CONFIDENCE_BP = 5000
MAX_CONFIDENCE_BP = 10_000
MAX_REQUEST_CHARS = 500
MAX_PAYLOAD_CHARS = 12_000
MAX_CONTEXT_TURNS = 4
MAX_CONTEXT_TURN_CHARS = 300
MAX_CONTEXT_CHARS = 1_200
#: a condition longer than this is left out of the payload, never cut: a truncated condition
#: could hold where the whole one does not
MAX_CONDITION_CHARS = 1_000

_OUTPUT_KEYS = frozenset({"judgments", "schema_version"})
_JUDGMENT_KEYS = frozenset({"applicable", "confidence_bp", "id", "reason"})

JUDGE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "judgments": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "applicable": {"type": "boolean"},
                    "confidence_bp": {
                        "type": "integer", "minimum": 0, "maximum": MAX_CONFIDENCE_BP,
                    },
                    "reason": {"type": "string", "enum": list(REASONS)},
                },
                "required": ["id", "applicable", "confidence_bp", "reason"],
                "additionalProperties": False,
            },
        },
        "schema_version": {"type": "integer", "enum": [JUDGE_SCHEMA_VERSION]},
    },
    "required": ["judgments", "schema_version"],
    "additionalProperties": False,
}


class Aliases:
    """Candidate habit ids and the aliases the judge knows them by, `c1..cN` in order."""

    def __init__(self, habit_ids: Sequence[str]) -> None:
        ids = tuple(habit_ids)
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate habit id among judge candidates")
        self._ids = ids
        self._aliases = tuple(f"c{i}" for i in range(1, len(ids) + 1))
        self._by_id = dict(zip(ids, self._aliases, strict=True))
        self._by_alias = dict(zip(self._aliases, ids, strict=True))

    @property
    def aliases(self) -> tuple[str, ...]:
        return self._aliases

    @property
    def habit_ids(self) -> tuple[str, ...]:
        return self._ids

    def alias(self, habit_id: str) -> str:
        return self._by_id[habit_id]

    def habit_id(self, alias: str) -> str:
        return self._by_alias[alias]

    def position(self, alias: str) -> int:
        return self._aliases.index(alias)

    def __contains__(self, alias: object) -> bool:
        return alias in self._by_alias

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._aliases)


def bounded(text: str, limit: int) -> str:
    """`text` redacted and cut to `limit` characters. Cutting can complete a match (a digit
    run cut to phone length), so it is redacted again until it stays put."""
    out = redact(text)[:limit]
    for _ in range(4):
        again = redact(out)[:limit]
        if again == out:
            break
        out = again
    return out


def _context(turns: Sequence[str]) -> list[str]:
    """The most recent prior turns, each bounded, oldest first, within MAX_CONTEXT_CHARS."""
    kept = [bounded(t, MAX_CONTEXT_TURN_CHARS) for t in turns[-MAX_CONTEXT_TURNS:]]
    while kept and sum(len(t) for t in kept) > MAX_CONTEXT_CHARS:
        kept.pop(0)
    return kept


def judge_payload(
    request: str,
    context: Sequence[str],
    candidates: Sequence[tuple[str, str]],
    aliases: Aliases,
) -> tuple[dict[str, Any], Aliases]:
    """The judge's input and the aliases it actually uses.

    `candidates` are (habit id, condition) in retrieval order, all known to `aliases`.
    Conditions over MAX_CONDITION_CHARS are left out; then candidates are dropped from the
    end until the payload's canonical JSON fits MAX_PAYLOAD_CHARS. The returned aliases are
    renumbered over what was kept (the same as `aliases` when nothing was dropped), and
    are the ones to read the answer with.
    """
    for habit_id, _ in candidates:
        aliases.alias(habit_id)  # KeyError: a candidate the caller did not alias
    payload: dict[str, Any] = {
        "schema_version": JUDGE_SCHEMA_VERSION,
        "request": bounded(request, MAX_REQUEST_CHARS),
        "context": _context(context),
        "conditions": [],
    }
    size = len(canonical_json(payload))
    kept: list[tuple[str, str]] = []
    for habit_id, condition in candidates:
        text = redact(" ".join(condition.split()))
        if not text or len(text) > MAX_CONDITION_CHARS:
            continue
        entry = {"id": f"c{len(kept) + 1}", "condition": text}
        grown = size + len(canonical_json(entry)) + (1 if kept else 0)
        if grown > MAX_PAYLOAD_CHARS:
            break
        size = grown
        kept.append((habit_id, text))
    used = Aliases([habit_id for habit_id, _ in kept])
    payload["conditions"] = [
        {"id": alias, "condition": text} for alias, (_, text) in zip(used, kept, strict=True)
    ]
    return payload, used


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_judgment(data: Any, aliases: Aliases) -> list[str] | None:
    """The habit ids to inject, best first and at most MAX_SELECTED, or None when the answer
    is not exactly what was asked for (see the module docstring)."""
    if not isinstance(data, dict) or set(data) != _OUTPUT_KEYS:
        return None
    if not _is_int(data["schema_version"]) or data["schema_version"] != JUDGE_SCHEMA_VERSION:
        return None
    judgments = data["judgments"]
    if not isinstance(judgments, list):
        return None
    seen: set[str] = set()
    chosen: list[tuple[int, int, str]] = []
    for judgment in judgments:
        if not isinstance(judgment, dict) or set(judgment) != _JUDGMENT_KEYS:
            return None
        alias, applicable = judgment["id"], judgment["applicable"]
        confidence, reason = judgment["confidence_bp"], judgment["reason"]
        if not isinstance(alias, str) or alias not in aliases or alias in seen:
            return None
        if not isinstance(reason, str) or reason not in REASONS:
            return None
        if not isinstance(applicable, bool) or applicable != (reason == APPLICABLE_REASON):
            return None
        if not _is_int(confidence) or not 0 <= confidence <= MAX_CONFIDENCE_BP:
            return None
        seen.add(alias)
        if applicable and confidence >= MIN_JUDGE_CONFIDENCE_BP:
            chosen.append((-confidence, aliases.position(alias), alias))
    if len(seen) != len(aliases):
        return None
    chosen.sort()
    return [aliases.habit_id(alias) for _, _, alias in chosen[:MAX_SELECTED]]
