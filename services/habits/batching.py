"""Cutting an Analyze queue into batches a model call can take.

Each batch is committed on its own, so a failure part-way keeps the batches before it; a
batch is therefore bounded in records (the model's attention) and bytes (its context). The
greedy split keeps the queue's order, which the read watermark relies on: a batch's last
record is the watermark once it commits. A single record over the byte limit still has to
be read, so it goes alone rather than stalling the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

MAX_BATCH_RECORDS = 200
MAX_BATCH_BYTES = 80_000
RECORDS_RANGE = (1, 500)
BYTES_RANGE = (65_537, 2_000_000)


def check_limits(max_records: int, max_bytes: int) -> None:
    """Raise ValueError naming the configured limit that is out of its allowed range."""
    for name, value, (low, high) in (
        ("max_records", max_records, RECORDS_RANGE),
        ("max_bytes", max_bytes, BYTES_RANGE),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be an integer in {low}..{high}, not {value!r}")


def batches(
    items: Sequence[T],
    size: Callable[[T], int],
    max_records: int = MAX_BATCH_RECORDS,
    max_bytes: int = MAX_BATCH_BYTES,
) -> list[list[T]]:
    """`items` in order, cut greedily into batches of at most `max_records` items and
    `max_bytes` total size (an item bigger than `max_bytes` alone)."""
    if max_records < 1 or max_bytes < 1:
        raise ValueError("max_records and max_bytes must be positive")
    out: list[list[T]] = []
    current: list[T] = []
    used = 0
    for item in items:
        weight = size(item)
        if weight < 0:
            raise ValueError("an item's size cannot be negative")
        if current and (len(current) >= max_records or used + weight > max_bytes):
            out.append(current)
            current, used = [], 0
        current.append(item)
        used += weight
    if current:
        out.append(current)
    return out
