"""Configurations drawn from a search space: at random, on a grid, merged from the frontier.

Pure and seeded: the proposal for trial n of a run depends on the run's seed, n and the
trials before it only, so a run resumed after a crash proposes what it would have, and a
run repeated with its seed tries the same configurations.

- Random: each dimension independently (uniform over a categorical's or text's values, over
  [low, high] for a continuous one, over the integers for an integer one, each value with
  probability 1/2 for a subset, never empty). A text dimension without values is left to the
  current configuration (only the LLM proposer writes text). A draw that is excluded by a
  constraint or was tried already is drawn again, a bounded number of times.
- Grid: a categorical's values, five evenly spaced points of a continuous range, every integer
  of a range of at most `GRID_POINTS * 2` integers (else `GRID_POINTS` evenly spaced), the
  non-empty subsets of at most six values (else each value alone and all of them). The
  product is walked in a seeded order that visits every point once (a stride coprime to its
  size), so a run that stops early has sampled the whole grid, not one corner of it.
- Merge: the values the frontier's first three trials agree on most, per dimension, ties to
  the best of them: what the frontier's trade-offs have in common.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from habitus.contract.configuration import check_value, setting_of
from habitus.contract.optimize import Dimension, Exclusion, SearchSpace

GRID_POINTS: Final = 5
#: redraws of an excluded or repeated random configuration before giving up on novelty
MAX_REDRAWS: Final = 50
Params = dict[str, Any]


def rng_for(seed: int, *parts: object) -> random.Random:
    """A generator for one draw of a run (the same seed and parts draw the same)."""
    text = ":".join(str(p) for p in (seed, *parts))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def key_of(params: Mapping[str, Any]) -> str:
    """A configuration's identity (paths sorted; subsets are kept sorted)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def excluded(params: Mapping[str, Any], exclusions: Sequence[Exclusion]) -> bool:
    """Whether a constraint excludes `params` (all of one exclusion's values held)."""
    return any(all(path in params and _same(params[path], value)
                   for path, value in e.when.items()) for e in exclusions)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return sorted(map(str, a)) == sorted(map(str, b))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def draw(dimension: Dimension, rng: random.Random) -> Any:
    """One value of `dimension` (None: a text dimension without values)."""
    if dimension.kind == "continuous":
        assert dimension.low is not None and dimension.high is not None
        return round(rng.uniform(dimension.low, dimension.high), 6)
    if dimension.kind == "integer":
        assert dimension.low is not None and dimension.high is not None
        return rng.randint(int(dimension.low), int(dimension.high))
    values = dimension.values or []
    if dimension.kind == "subset":
        chosen = [v for v in values if rng.random() < 0.5]
        return sorted(chosen or [rng.choice(values)])
    return rng.choice(values) if values else None


def random_params(space: SearchSpace, seed: int, index: int,
                  tried: set[str] | frozenset[str] = frozenset()) -> Params | None:
    """A random configuration for trial `index`: novel and allowed if one is found within
    `MAX_REDRAWS` draws, else None (the space is used up, or nearly)."""
    for attempt in range(MAX_REDRAWS):
        rng = rng_for(seed, "random", index, attempt)
        params: Params = {}
        for dimension in space.search:
            value = draw(dimension, rng)
            if value is not None:
                params[dimension.name] = value
        params = with_fixed(params, space)
        if not excluded(params, space.constraints.exclude) and key_of(params) not in tried:
            return params
    return None


def with_fixed(params: Mapping[str, Any], space: SearchSpace) -> Params:
    """`params` with the space's fixed values over them (fixed values always win)."""
    return {**params, **space.fixed}


def grid_values(dimension: Dimension) -> list[Any]:
    """The points of one dimension on the grid (module docstring)."""
    if dimension.kind == "continuous":
        assert dimension.low is not None and dimension.high is not None
        step = (dimension.high - dimension.low) / (GRID_POINTS - 1)
        return [round(dimension.low + i * step, 6) for i in range(GRID_POINTS)]
    if dimension.kind == "integer":
        assert dimension.low is not None and dimension.high is not None
        low, high = int(dimension.low), int(dimension.high)
        if high - low + 1 <= GRID_POINTS * 2:
            return list(range(low, high + 1))
        return sorted({round(low + i * (high - low) / (GRID_POINTS - 1))
                       for i in range(GRID_POINTS)})
    values = list(dimension.values or [])
    if dimension.kind == "subset":
        if len(values) <= 6:
            return [sorted(c) for n in range(1, len(values) + 1)
                    for c in itertools.combinations(values, n)]
        return [[v] for v in values] + [sorted(values)]
    return values


def grid_size(space: SearchSpace) -> int:
    return math.prod(len(grid_values(d)) for d in space.search if grid_values(d))


def _stride(seed: int, size: int) -> tuple[int, int]:
    rng = rng_for(seed, "grid")
    offset = rng.randrange(size)
    step = rng.randrange(1, size) if size > 1 else 1
    while math.gcd(step, size) != 1:
        step += 1
    return offset, step % size or 1


def grid_point(space: SearchSpace, position: int) -> Params:
    """The configuration at `position` of the grid in its natural (mixed-radix) order."""
    params: Params = {}
    axes = [(d.name, grid_values(d)) for d in space.search]
    for name, values in reversed(axes):
        if not values:
            continue
        position, digit = divmod(position, len(values))
        params[name] = values[digit]
    return with_fixed(dict(sorted(params.items())), space)


def grid_walk(space: SearchSpace, seed: int) -> Iterator[Params]:
    """Every grid point once, in the seeded order, constraints applied."""
    size = grid_size(space)
    if size == 0:
        return
    offset, step = _stride(seed, size)
    for n in range(size):
        params = grid_point(space, (offset + n * step) % size)
        if not excluded(params, space.constraints.exclude):
            yield params


def merge(trials: Sequence[Mapping[str, Any]], space: SearchSpace) -> Params | None:
    """Per dimension the value most of `trials` share (the first trial breaks ties: the
    caller orders them best first); None for fewer than two trials."""
    if len(trials) < 2:
        return None
    params: Params = {}
    for dimension in space.search:
        held = [t[dimension.name] for t in trials if dimension.name in t]
        if not held:
            continue
        counts = Counter(key_of({"v": v}) for v in held)
        top = max(counts.values())
        params[dimension.name] = next(v for v in held if counts[key_of({"v": v})] == top)
    merged = with_fixed(params, space)
    return None if excluded(merged, space.constraints.exclude) else merged


def sanitize(proposed: Mapping[str, Any], space: SearchSpace) -> tuple[Params, list[str]]:
    """A proposal (the LLM's) cut to the space: values a dimension allows are kept, anything
    else dropped with a note why; the fixed values then override. Numbers outside a range
    are dropped, not clamped: the model meant something the space does not allow."""
    kept: Params = {}
    notes: list[str] = []
    names = {d.name: d for d in space.search}
    for path, value in proposed.items():
        dimension = names.get(path)
        if dimension is None:
            if path not in space.fixed:
                notes.append(f"{path}: not in the search space")
            continue
        reason = _disallowed(dimension, value)
        if reason is not None:
            notes.append(f"{path}: {reason}")
            continue
        kept[path] = sorted(value) if dimension.kind == "subset" else (
            int(value) if dimension.kind == "integer" else value)
    return with_fixed(kept, space), notes


def _disallowed(dimension: Dimension, value: Any) -> str | None:
    if dimension.kind in ("continuous", "integer"):
        assert dimension.low is not None and dimension.high is not None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value):
            return "not a number"
        if dimension.kind == "integer" and value != int(value):
            return "not a whole number"
        if not dimension.low <= value <= dimension.high:
            return f"outside [{dimension.low:g}, {dimension.high:g}]"
        return None
    values = dimension.values or []
    if dimension.kind == "subset":
        if not isinstance(value, list) or not value or any(v not in values for v in value):
            return "not a non-empty subset of its values"
        return None
    if dimension.kind == "text" and not values:
        try:
            check_value(setting_of(dimension.name), value)
        except ValueError as exc:
            return str(exc)
        return None
    if value not in values:
        return "not one of its values"
    return None
