"""Which asked-for variants of a user's context are built again after a change: the latest
asked within the window, at most the limit, and nothing that cannot be read."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from habitus.context_cache import field_for
from services.profile_renderer.contexts import Variant, latest_variants

tools = st.none() | st.lists(st.sampled_from(["send_email", "calendar", "shell", "git"]),
                             max_size=4)
budgets = st.none() | st.integers(min_value=1, max_value=100_000)


@given(tools, budgets, st.booleans(), st.floats(min_value=0, max_value=2e9))
def test_a_recorded_variant_reads_back_to_the_field_the_miss_was_cached_under(
        asked: list[str] | None, budget: int | None, unconfirmed: bool, at: float) -> None:
    variant = Variant.of(asked, budget, unconfirmed)
    assert variant.field == field_for(asked, budget, unconfirmed)
    assert Variant.read(variant.recorded(at)) == (at, variant)


def test_the_latest_asked_within_the_window_come_first_up_to_the_limit() -> None:
    a, b, c = (Variant.of(["git"], n, False) for n in (100, 200, 300))
    recorded = [a.recorded(1_000.0), b.recorded(1_500.0), c.recorded(1_200.0)]
    assert latest_variants(recorded, window=600, limit=8, now=1_550.0) == [b, c, a]
    assert latest_variants(recorded, window=600, limit=2, now=1_550.0) == [b, c]
    assert latest_variants(recorded, window=400, limit=8, now=1_550.0) == [b, c]


def test_a_record_another_version_wrote_is_passed_over_not_an_error() -> None:
    good = Variant.of(None, None, True)
    recorded = [b"not json", json.dumps({"at": 5, "tools": "git", "budget_chars": None,
                                         "unconfirmed": False}),
                json.dumps({"at": 5, "tools": None, "budget_chars": True,
                            "unconfirmed": False}),
                json.dumps({"tools": None}), good.recorded(6.0)]
    assert latest_variants(recorded, window=10, limit=8, now=10.0) == [good]
