"""`habitus extractor reextract --since` reads the forms an operator types."""

from __future__ import annotations

import pytest

from habitus.cli.extractor import parse_since

NOW = 1_764_547_200.0  # 2025-12-01T00:00:00Z


@pytest.mark.parametrize(("text", "expected"), [
    ("1764460800", 1_764_460_800.0),
    ("1764460800.5", 1_764_460_800.5),
    ("2025-11-30", 1_764_460_800.0),
    ("2025-11-30T12:00:00", 1_764_504_000.0),
    ("2025-11-30T13:00:00+01:00", 1_764_504_000.0),
    ("7d", NOW - 7 * 86400),
    ("12h", NOW - 12 * 3600),
    ("30m", NOW - 1800),
    ("2w", NOW - 14 * 86400),
    (" 90s ", NOW - 90),
])
def test_since_forms(text: str, expected: float) -> None:
    assert parse_since(text, now=NOW) == expected


@pytest.mark.parametrize("text", ["last tuesday", "7 days", "-3d", "", "2025-13-01"])
def test_anything_else_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="epoch seconds, an ISO date"):
        parse_since(text, now=NOW)
