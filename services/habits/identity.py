"""What makes two wordings the same habit, and the checksums that guard every change.

An approval is given to a wording, not to an id: it holds only while the normalised condition,
behavior and polarity are the ones the person approved. Checksums are SHA-256 over canonical
JSON, so the same state always has the same checksum, whichever process computes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Trimmed, inner whitespace collapsed to one space, lower-cased."""
    return _SPACE.sub(" ", text).strip().lower()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity(condition: str, behavior: str, polarity: int) -> str:
    """The approved identity: a hash of the normalised wording and its polarity."""
    return sha256(canonical_json([normalise(condition), normalise(behavior), int(polarity)]))


def checksum(state: Mapping[str, Any]) -> str:
    return sha256(canonical_json(dict(state)))
