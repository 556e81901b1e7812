"""Benchmarks that run two sides at once, each in a process of its own, and compare what each
side measured of itself: whatever else the shared machine does falls on both."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any


async def results_of(children: Sequence[Any], results: Any, timeout: float = 600
                     ) -> dict[Any, tuple[Any, ...]]:
    """Each child's result (a tuple its side's key leads, put on `results`) by that key, once
    every child has ended well."""
    measured = {}
    for _ in children:
        side, *figures = await asyncio.to_thread(results.get, True, timeout)
        measured[side] = tuple(figures)
    for child in children:
        child.join(10)
        assert child.exitcode == 0
    return measured
