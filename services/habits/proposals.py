"""Validation of the habits a model proposed from one Analyze batch.

The model read observation text that anyone could have influenced, so its output is checked
as untrusted input: the exact shape the schema asks for, evidence that cites only aliases of
the batch it was shown, and wording that is a general way of working. A habit has to hold
across projects and over time, so wording that names a file, a version, an id or a project
is rejected: it describes one piece of work, and it would leak that work into every other
context the habit guides. Sensitive text is rejected outright rather than redacted, since a
habit whose meaning rested on a secret is no habit.

Each proposal gets the first reason that applies, in this order (stable labels, used by the
quarantine and metrics):

- `invalid_item`: not an object with exactly the schema's keys and types;
- `unknown_ref`: evidence cites an alias that was not in the batch;
- `empty_wording`, `wording_too_long`: a field empty, or over MAX_WORDING_CHARS, once
  stripped and whitespace-collapsed;
- `sensitive`: `redaction.contains_sensitive` finds something (checked before the `names_*`
  reasons, so a home path is reported as sensitive, the graver of the two);
- `names_a_path`, `names_a_version`, `names_an_id`, `names_a_project`.

A malformed output as a whole (not an object, other keys, another schema version, habits not
a list) is one `malformed_output` rejection: nothing of it applies. `Rejected.item` is the
model's raw item and may hold the very text that was refused: redact it before storing it.
Validation never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.habits.redaction import contains_sensitive

PROPOSAL_SCHEMA_VERSION = 1
MAX_WORDING_CHARS = 300
MAX_CONFIDENCE_BP = 10_000

_ITEM_KEYS = frozenset({"condition", "behavior", "polarity", "evidence", "confidence_bp",
                        "contradicts"})
_OUTPUT_KEYS = frozenset({"schema_version", "habits"})

_HABIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "condition": {"type": "string"},
        "behavior": {"type": "string"},
        "polarity": {"type": "integer", "enum": [-1, 1]},
        "evidence": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "confidence_bp": {"type": "integer", "minimum": 0, "maximum": MAX_CONFIDENCE_BP},
        "contradicts": {"type": "boolean"},
    },
    "required": ["condition", "behavior", "polarity", "evidence", "confidence_bp",
                 "contradicts"],
    "additionalProperties": False,
}

#: usable as an OpenAI `json_schema` response format with `strict: true`
ANALYZE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "schema_version": {"type": "integer", "enum": [PROPOSAL_SCHEMA_VERSION]},
        "habits": {"type": "array", "items": _HABIT_SCHEMA},
    },
    "required": ["schema_version", "habits"],
    "additionalProperties": False,
}

_FILE_EXTENSIONS = (
    "py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|md|mdx|rst|txt|yaml|yml|toml|ini|cfg|conf"
    "|sh|bash|zsh|ps1|bat|rs|go|java|kt|kts|rb|php|c|h|cc|cpp|hpp|cs|swift|scala|sql|html|htm"
    "|css|scss|sass|less|vue|svelte|csv|tsv|xml|lock|env|log|pdf|doc|docx|xls|xlsx|ppt|pptx"
    "|png|jpe?g|gif|svg|zip|tar|gz|tgz|wasm|dll|exe|so|dylib|proto|tf|gradle|dockerfile"
)
_PATH = re.compile(
    r"(?<![\w.])/[\w.-]+/"  # /x/y
    r"|(?<![\w])[A-Za-z]:[\\/]"  # C:\ or C:/
    r"|(?<![\w.])\.\.?[\\/]"  # ./ or ../
    r"|(?<![\w])~[\\/]"  # ~/
    r"|(?<![\w.])\.(?:env|gitignore|bashrc|zshrc|profile|npmrc|editorconfig|dockerignore)\b"
    # a file name with a known extension; "Node.js"-style names (capitalised, .js) are tools
    r"|\b(?![A-Z][a-z]+\.js\b)[\w-]+\.(?:" + _FILE_EXTENSIONS + r")\b",
    re.IGNORECASE,
)
_VERSION = re.compile(
    r"(?<![\w.])v\d+(?:\.\d+)+\b"  # v2.0, v1.2.3
    r"|(?<![\w.])\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?(?![\w.]*\d)",  # 1.2.3
    re.IGNORECASE,
)
_HEX_ID = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{12,}(?![0-9A-Za-z])", re.IGNORECASE)
_SCOPED_PACKAGE = re.compile(r"(?<![\w@])@[\w.-]+/[\w.-]+")
_SLASH_PAIR = re.compile(r"(?<![\w./-])([A-Za-z][\w.-]*)/([A-Za-z][\w.-]*)(?![\w/])")
#: slash pairs in ordinary prose, which are not `owner/repo`
_PROSE_PAIRS = frozenset(
    {
        "and/or", "either/or", "input/output", "yes/no", "on/off", "read/write", "true/false",
        "pros/cons", "he/she", "his/her", "him/her", "client/server", "before/after",
        "frontend/backend", "front/back", "dev/prod", "start/end", "open/close", "and/if",
        "w/o", "i/o", "n/a", "a/b", "do/don't", "when/do", "s/he", "am/pm", "if/when",
        "question/answer", "problem/solution", "plan/do", "draft/final", "done/not",
    }
)


@dataclass(frozen=True)
class RefInfo:
    """One observation of the batch as the model saw it."""

    #: what the model cites: "r1", "r2", ...
    alias: str
    seq: int
    event_id: str
    #: its UTC day, 'YYYY-MM-DD'
    day: str


@dataclass(frozen=True)
class Proposal:
    condition: str
    behavior: str
    polarity: int
    #: the cited observations, each once, in the batch's order
    refs: tuple[RefInfo, ...]
    confidence_bp: int
    contradicts: bool


@dataclass(frozen=True)
class Rejected:
    reason: str
    item: Any


class _Reject(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _wording(value: str) -> str:
    """Stored as written, but on one line: stripped and with whitespace runs collapsed."""
    return " ".join(value.split())


def names_a_project(text: str, project_names: Sequence[str]) -> bool:
    """Whether `text` names one of `project_names` (a whole word, any case) or has the shape
    of a repository (`owner/repo`) or a scoped package (`@scope/pkg`)."""
    if _SCOPED_PACKAGE.search(text):
        return True
    for match in _SLASH_PAIR.finditer(text):
        if match.group(0).lower() not in _PROSE_PAIRS:
            return True
    lowered = text.lower()
    for name in project_names:
        name = name.strip().lower()
        if name and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", lowered):
            return True
    return False


def _check_shape(item: Any) -> None:
    if not isinstance(item, dict) or set(item) != _ITEM_KEYS:
        raise _Reject("invalid_item")
    evidence = item["evidence"]
    if not (
        isinstance(item["condition"], str)
        and isinstance(item["behavior"], str)
        and _is_int(item["polarity"])
        and item["polarity"] in (-1, 1)
        and isinstance(evidence, list)
        and evidence
        and all(isinstance(e, str) for e in evidence)
        and _is_int(item["confidence_bp"])
        and 0 <= item["confidence_bp"] <= MAX_CONFIDENCE_BP
        and isinstance(item["contradicts"], bool)
    ):
        raise _Reject("invalid_item")


def _check_text(text: str, project_names: Sequence[str]) -> None:
    if not text:
        raise _Reject("empty_wording")
    if len(text) > MAX_WORDING_CHARS:
        raise _Reject("wording_too_long")
    if contains_sensitive(text):
        raise _Reject("sensitive")
    if _PATH.search(text):
        raise _Reject("names_a_path")
    if _VERSION.search(text):
        raise _Reject("names_a_version")
    if _HEX_ID.search(text):
        raise _Reject("names_an_id")
    if names_a_project(text, project_names):
        raise _Reject("names_a_project")


def _proposal(
    item: Any, refs: Mapping[str, RefInfo], order: Mapping[str, int],
    project_names: Sequence[str],
) -> Proposal:
    _check_shape(item)
    cited = set(item["evidence"])
    if not cited <= set(refs):
        raise _Reject("unknown_ref")
    condition, behavior = _wording(item["condition"]), _wording(item["behavior"])
    for text in (condition, behavior):
        if not text:
            raise _Reject("empty_wording")
    for text in (condition, behavior):
        _check_text(text, project_names)
    return Proposal(
        condition=condition,
        behavior=behavior,
        polarity=item["polarity"],
        refs=tuple(refs[a] for a in sorted(cited, key=order.__getitem__)),
        confidence_bp=item["confidence_bp"],
        contradicts=item["contradicts"],
    )


def validate_output(
    data: Any, refs: Mapping[str, RefInfo], project_names: Sequence[str] = ()
) -> tuple[list[Proposal], list[Rejected]]:
    """The valid proposals of one output, in its order, and what was rejected, with why."""
    if (
        not isinstance(data, dict)
        or set(data) != _OUTPUT_KEYS
        or not _is_int(data["schema_version"])
        or data["schema_version"] != PROPOSAL_SCHEMA_VERSION
        or not isinstance(data["habits"], list)
    ):
        return [], [Rejected("malformed_output", data)]
    order = {alias: i for i, alias in enumerate(refs)}
    valid: list[Proposal] = []
    rejected: list[Rejected] = []
    for item in data["habits"]:
        try:
            valid.append(_proposal(item, refs, order, project_names))
        except _Reject as r:
            rejected.append(Rejected(r.reason, item))
    return valid, rejected
