"""The gateway's edge limits are settings with defaults, and nonsense values are refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from habitus.config import Settings


def test_defaults() -> None:
    s = Settings()
    assert s.max_json_depth == 64
    assert s.max_clock_skew_seconds == 300.0
    assert s.retry_after_seconds == 5


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_json_depth", 1), ("max_json_depth", 10_000), ("max_clock_skew_seconds", -1),
     ("key_cache_seconds", -1), ("key_last_known_max", -1), ("retry_after_seconds", 0)],
)
def test_invalid_values_are_refused(name: str, value: object) -> None:
    with pytest.raises(ValidationError):
        Settings(**{name: value})  # type: ignore[arg-type]


def test_environment_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_MAX_JSON_DEPTH", "16")
    monkeypatch.setenv("HABITUS_MAX_CLOCK_SKEW_SECONDS", "60")
    s = Settings()
    assert (s.max_json_depth, s.max_clock_skew_seconds) == (16, 60.0)
