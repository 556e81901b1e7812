"""Analyze batches (services/habits/batching.py): the digest's vectors, the limits, and
properties over random queues."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.habits.batching import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    batches,
    check_limits,
)


def one(_: int) -> int:
    return 1


def test_digest_vectors() -> None:
    assert batches([1, 2, 3], one, max_records=2) == [[1, 2], [3]]
    assert batches([1, 2, 3, 4, 5, 6], one, max_records=2) == [[1, 2], [3, 4], [5, 6]]
    assert batches([], one) == []


def test_defaults() -> None:
    assert (MAX_BATCH_RECORDS, MAX_BATCH_BYTES) == (200, 80_000)
    out = batches(list(range(450)), one)
    assert [len(b) for b in out] == [200, 200, 50]


def test_bytes_bound_and_an_oversized_item_alone() -> None:
    sizes = [30_000, 30_000, 30_000, 100_000, 10, 79_990, 1]
    out = batches(sizes, lambda s: s)
    assert out == [[30_000, 30_000], [30_000], [100_000], [10, 79_990], [1]]


def test_check_limits() -> None:
    check_limits(1, 65_537)
    check_limits(500, 2_000_000)
    for records in (0, 501, True):
        with pytest.raises(ValueError, match="max_records"):
            check_limits(records, 80_000)
    for size in (65_536, 2_000_001):
        with pytest.raises(ValueError, match="max_bytes"):
            check_limits(200, size)


def test_nonsense_arguments() -> None:
    with pytest.raises(ValueError):
        batches([1], one, max_records=0)
    with pytest.raises(ValueError):
        batches([1], lambda _: -1)


@given(
    st.lists(st.integers(min_value=0, max_value=120), max_size=60),
    st.integers(min_value=1, max_value=7),
    st.integers(min_value=1, max_value=150),
)
def test_batches_keep_order_and_limits(sizes: list[int], records: int, limit: int) -> None:
    out = batches(sizes, lambda s: s, max_records=records, max_bytes=limit)
    assert [s for b in out for s in b] == sizes
    for batch in out:
        assert 1 <= len(batch) <= records
        assert sum(batch) <= limit or len(batch) == 1
    # greedy: a batch closed early could not have taken the next item
    for batch, following in itertools.pairwise(out):
        assert len(batch) == records or sum(batch) + following[0] > limit
