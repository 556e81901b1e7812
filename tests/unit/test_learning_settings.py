"""The learning scheduler's defaults: new evidence shows within seconds (issue: "every change
took 60-85 s to show")."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from habitus.contract.learning import CacheStats, FacetList
from services.stability_detector.settings import LearningSettings


def test_the_default_debounce_is_seconds_with_a_maximum_wait_and_a_short_tick() -> None:
    s = LearningSettings()
    assert s.debounce_seconds <= 2
    assert s.debounce_seconds < s.max_wait_seconds
    # a user is seen at most one tick after settling: p99 <= 3 x debounce leaves room for the
    # rebuild and the renderer only if the tick is a small part of it
    assert s.scheduler_tick_seconds <= s.debounce_seconds / 3


def test_scheduler_times_must_be_positive() -> None:
    for name in ("debounce_seconds", "max_wait_seconds", "scheduler_tick_seconds"):
        with pytest.raises(ValidationError):
            LearningSettings.model_validate({name: 0})


def test_list_facets_and_cache_stats_say_when_evidence_is_pending() -> None:
    listed = FacetList.model_validate({"user_id": "u", "as_of": None, "facets": [],
                                       "pending_since": 12.5})
    assert listed.pending_since == 12.5
    stats = CacheStats.model_validate({
        "user_id": "u", "total": 0, "active": 0, "provisional": 0, "candidate": 0,
        "pinned": 0, "forgotten": 0, "by_class": {}, "pending_since": None})
    assert stats.pending_since is None
    with pytest.raises(ValidationError):  # required: a handler cannot leave it out
        FacetList.model_validate({"user_id": "u", "as_of": None, "facets": []})
