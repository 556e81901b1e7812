"""Backpressure's rules as pure functions: the bound, shares, fair share, Retry-After, and which
RPC calls are charged to which budget."""

from __future__ import annotations

import pytest

from habitus.contract import METHODS
from habitus.service.projections import resolve
from services.gateway.access import budget_of
from services.gateway.backpressure import (
    CAUGHT_UP,
    PipelineLag,
    decide,
    end_to_end,
    fair_share,
    over_bound,
    retry_after,
    share_of,
)
from services.gateway.pipeline_lag import watched_projections

BEHIND = PipelineLag(60.0, "learning.cache")


def pushed(tenant: str, counts: dict[str, int], lag: PipelineLag = BEHIND,
           bound: float = 30.0, cap: int = 30) -> int | None:
    """The Retry-After the tenant gets, None when it passes."""
    push = decide(tenant, counts, lag, bound_seconds=bound, max_retry_after=cap)
    return None if push is None else push.retry_after


def test_the_bound_and_zero_disables() -> None:
    assert over_bound(PipelineLag(31.0, "p"), 30.0)
    assert not over_bound(PipelineLag(30.0, "p"), 30.0)  # at the bound is not past it
    assert not over_bound(CAUGHT_UP, 30.0)
    assert not over_bound(PipelineLag(10_000.0, "p"), 0.0)
    assert pushed("a", {"a": 1000}, bound=0.0) is None


def test_under_the_bound_nobody_is_pushed_back() -> None:
    assert pushed("a", {"a": 1000, "b": 1}, lag=PipelineLag(29.0, "p")) is None


def test_shares_and_fair_share() -> None:
    counts = {"a": 900, "b": 100, "c": 0}
    assert share_of("a", counts) == pytest.approx(0.9)
    assert share_of("b", counts) == pytest.approx(0.1)
    assert share_of("nobody", counts) == 0.0
    assert share_of("a", {}) == 0.0
    assert fair_share(4) == 0.25
    assert fair_share(0) == 1.0


def test_the_burster_is_pushed_back_and_the_small_tenant_passes() -> None:
    counts = {"burster": 5000, "small": 1}
    assert pushed("burster", counts) is not None
    assert pushed("small", counts) is None


def test_a_tenant_that_sent_nothing_in_the_window_passes() -> None:
    assert pushed("newcomer", {"burster": 5000}) is None


def test_a_sole_tenant_is_the_whole_backlog_and_is_pushed_back() -> None:
    push = decide("only", {"only": 10}, BEHIND, bound_seconds=30, max_retry_after=300)
    assert push is not None
    assert (push.share, push.fair_share, push.reason) == (1.0, 1.0, "sole_tenant")
    assert push.retry_after == 60  # its part of the backlog is all of it


def test_at_the_fair_share_is_pushed_back_under_it_passes() -> None:
    assert pushed("a", {"a": 50, "b": 50}) is not None
    assert pushed("b", {"a": 50, "b": 50}) is not None
    assert pushed("a", {"a": 49, "b": 51}) is None
    # thirds: exactly fair in integers, though 1/3 is no exact float
    assert pushed("a", {"a": 1, "b": 1, "c": 1}) is not None


def test_over_fair_share_among_many() -> None:
    counts = {"a": 30, "b": 25, "c": 25, "d": 20}  # fair share 25%
    assert pushed("a", counts) is not None
    assert pushed("b", counts) is not None
    assert pushed("d", counts) is None
    push = decide("a", counts, BEHIND, bound_seconds=30, max_retry_after=30)
    assert push is not None and push.reason == "over_fair_share"


@pytest.mark.parametrize(("share", "lag", "cap", "expected"), [
    (0.5, 60.0, 300, 30),     # its half of a minute's backlog
    (0.01, 60.0, 300, 1),     # ceil(0.6): at least one second
    (0.001, 1.0, 300, 1),
    (1.0, 3600.0, 30, 30),    # capped
    (0.9, 45.2, 300, 41),     # rounded up
    (0.0, 100.0, 300, 1),
])
def test_retry_after_is_the_tenants_part_of_the_backlog(share: float, lag: float, cap: int,
                                                        expected: int) -> None:
    assert retry_after(share, lag, cap) == expected


def test_the_refusal_names_the_reason_the_projection_and_the_lag() -> None:
    push = decide("a", {"a": 90, "b": 10},
                  PipelineLag(45.26, "learning.cache", ("producers.candidates", "learning.cache")),
                  bound_seconds=30, max_retry_after=30)
    assert push is not None
    assert push.message().startswith(
        "backpressure: the pipeline is 45s behind end to end (the largest part in learning.cache)")
    assert "90%" in push.message() and "fair share: 50%" in push.message()
    assert push.message().endswith(f"retry in {push.retry_after}s")
    assert push.details() == {"projection": "learning.cache", "lag_seconds": 45.26,
                              "path": ["producers.candidates", "learning.cache"],
                              "share": 0.9, "fair_share": 0.5}


def test_reads_and_writes_are_charged_to_their_own_budgets() -> None:
    assert budget_of("prompt.context") == "read"
    assert budget_of("profile.get") == "read"
    assert budget_of("learning.list_facets") == "read"
    assert budget_of("learning.pin_facet") == "write"
    assert budget_of("learning.forget_facet") == "write"
    assert budget_of("admin.erase_user") == "write"
    assert budget_of("echo.whoami") == "read"  # not in the table: nothing it can change
    for name, spec in METHODS.items():
        assert budget_of(name) == ("write" if spec.changes_state else "read"), name


def test_the_gateway_watches_every_projections_own_durable() -> None:
    watched = watched_projections()
    assert {w.projection for w in watched} >= {"learning.cache", "profile.render"}
    for w in watched:
        assert w.durable == resolve(w.projection).durable, w.projection
        assert w.subjects


def test_the_lag_is_the_slowest_chain_end_to_end_not_the_worst_stage() -> None:
    # a turn's sentence waits in each queue on its way to the prompt, the learning cache's
    # twice (the candidate, then the rebuild its scheduler requests): three stages each just
    # under a 2 s bound are 7.2 s end to end, and that is what a quiet tenant waits for
    upstream = {w.projection: w.upstream for w in watched_projections()}
    lags = {name: 0.0 for name in upstream}
    lags.update({"producers.candidates": 1.9, "learning.cache": 1.8, "profile.render": 1.7,
                 "habits.capture": 1.95})
    lag = end_to_end(lags, upstream)
    assert lag.path == ("producers.candidates", "learning.cache", "profile.render")
    assert lag.seconds == pytest.approx(1.9 + 2 * 1.8 + 1.7)
    # the stage adding the most: the learning cache's queue, crossed twice (3.6 of 7.2 s)
    assert lag.projection == "learning.cache"
    assert over_bound(lag, 2.0)
    # a stage alone on its chain is its own lag; the worst stage no longer decides
    lags = {name: 0.0 for name in upstream} | {"habits.capture": 3.0, "learning.cache": 1.0}
    assert end_to_end(lags, upstream) == PipelineLag(3.0, "habits.capture", ("habits.capture",))


def test_a_projection_reading_its_own_events_counts_its_queue_twice() -> None:
    upstream = {"a": (), "b": ("a", "b")}
    lag = end_to_end({"a": 1.0, "b": 2.0}, upstream)
    assert (lag.seconds, lag.path, lag.projection) == (5.0, ("a", "b"), "b")
    # a longer cycle is cut where it closes instead of looping
    assert end_to_end({"a": 1.0, "b": 1.0}, {"a": ("b",), "b": ("a",)}).seconds == 2.0


def test_caught_up_end_to_end() -> None:
    assert end_to_end({"a": 0.0, "b": 0.0}, {"b": ("a",)}) == CAUGHT_UP
    assert end_to_end({}, {}) == CAUGHT_UP
    push = decide("t", {"t": 5}, PipelineLag(6.0, "b", ("a", "b")), bound_seconds=2,
                  max_retry_after=30)
    assert push is not None
    assert push.details()["path"] == ["a", "b"]
    assert "6s behind end to end (the largest part in b)" in push.message()
