"""Which habits say the same thing in other words: scores, thresholds and the bounded scan.

Condition and behavior are embedded separately and a pair scores the lower of the two cosines,
so "same situation, different advice" and "different situation, same advice" are both kept
apart. Scores are whole basis points, rounded down: the stored relation and every threshold
compare integers, so one pair gets the same verdict in every process. Habits of different
polarity ("do" against "do not") are never compared: that is a conflict, not a duplicate, and
another check handles it.

A scan is quadratic, so it is bounded: at most 100 habits, hence at most 4,950 pairs. Past that
the person is asked to archive habits they no longer use, rather than the scan quietly skipping
some of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.habits.embedding import NOBODY, Embedder, EmbedderUnavailable, Owner, Vector
from services.habits.identity import normalise

if TYPE_CHECKING:  # numpy is imported by the functions that compute (see embedding.py)
    import numpy as np
    from numpy.typing import NDArray

REVIEW_BP = 5500
STRONG_BP = 7000
MAX_SCAN_HABITS = 100
MAX_SCAN_PAIRS = MAX_SCAN_HABITS * (MAX_SCAN_HABITS - 1) // 2  # 4,950
BP = 10_000

# The matrix products of `scan` and the one-pair `cosine` may differ in the last bits; pairs
# within this margin of the threshold are rescored one by one, so both give the same verdict.
_MARGIN = 1e-4

HabitText = tuple[str, int, float, str, str]
"""(habit_id, polarity, created_at, condition, behavior), as `embed_habits` takes them."""


def _check_bp(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= BP:
        raise ValueError(f"{name} must be a whole number of basis points from 0 to {BP}")
    return value


@dataclass(frozen=True)
class Thresholds:
    """Review from `review_bp` up, strong from `strong_bp` up; strong is never below review."""

    review_bp: int = REVIEW_BP
    strong_bp: int = STRONG_BP

    def __post_init__(self) -> None:
        _check_bp("review_bp", self.review_bp)
        _check_bp("strong_bp", self.strong_bp)
        if self.strong_bp < self.review_bp:
            raise ValueError("strong_bp must not be below review_bp; use Thresholds.sanitised")

    @classmethod
    def sanitised(cls, review_bp: int = REVIEW_BP, strong_bp: int = STRONG_BP) -> Thresholds:
        """Settings as a person may write them: a strong threshold below the review threshold
        is raised to it (a pair cannot be strong without being worth a review)."""
        review = _check_bp("review_bp", review_bp)
        strong = _check_bp("strong_bp", strong_bp)
        return cls(review_bp=review, strong_bp=max(strong, review))


def _wide_unit(vector: NDArray[np.floating] | Sequence[float]) -> NDArray[np.float64]:
    import numpy as np

    wide = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(wide))
    if wide.ndim != 1 or norm == 0.0 or not math.isfinite(norm):
        raise ValueError("cannot compare an empty, zero or non-finite vector")
    return wide / norm


def cosine(a: NDArray[np.floating] | Sequence[float],
           b: NDArray[np.floating] | Sequence[float]) -> float:
    """The cosine of two vectors, computed in float64 whatever they are stored as."""
    ua, ub = _wide_unit(a), _wide_unit(b)
    if ua.shape != ub.shape:
        raise ValueError(f"vectors of {ua.shape[0]} and {ub.shape[0]} dimensions")
    return float(ua @ ub)


def to_bp(cos: float) -> int:
    """Basis points, rounded down and kept within 0..10,000 (a negative cosine is 0)."""
    if not math.isfinite(cos):
        raise ValueError("a cosine must be finite")
    return max(0, min(BP, math.floor(cos * BP)))


@dataclass(frozen=True, eq=False)
class Embedded:
    """A habit with its two vectors. Compared by identity: arrays have no single truth value."""

    habit_id: str
    polarity: int
    created_at: float
    condition: Vector
    behavior: Vector


def similarity_bp(a: Embedded, b: Embedded) -> int:
    """The pair's score: the lower of the condition and the behavior similarities."""
    return min(to_bp(cosine(a.condition, b.condition)), to_bp(cosine(a.behavior, b.behavior)))


@dataclass(frozen=True)
class Pair:
    """Two habits that may be one. `first` is the older (then the lower id): the one a merge
    keeps by default, and the order in which the relation is stored."""

    first: str
    second: str
    similarity_bp: int
    strong: bool

    @classmethod
    def of(cls, a: Embedded, b: Embedded, score: int, thresholds: Thresholds) -> Pair:
        older, newer = sorted((a, b), key=lambda h: (h.created_at, h.habit_id))
        return cls(first=older.habit_id, second=newer.habit_id, similarity_bp=score,
                   strong=score >= thresholds.strong_bp)


def _ranked(pairs: list[Pair]) -> list[Pair]:
    return sorted(pairs, key=lambda p: (-p.similarity_bp, p.first, p.second))


def matches(target: Embedded, others: Sequence[Embedded],
            thresholds: Thresholds = Thresholds()) -> list[Pair]:
    """The habits among `others` that `target` may duplicate, best first.

    The target itself and habits of a different polarity are skipped before any vector is
    looked at; a pair needs at least `review_bp` on both condition and behavior.
    """
    found: list[Pair] = []
    for other in others:
        if other.habit_id == target.habit_id or other.polarity != target.polarity:
            continue
        score = similarity_bp(target, other)
        if score >= thresholds.review_bp:
            found.append(Pair.of(target, other, score, thresholds))
    return _ranked(found)


class ScanTooLarge(ValueError):
    """More habits than one scan compares."""

    def __init__(self, count: int):
        super().__init__(
            f"{count} habits are too many to check for duplicates at once (the limit is "
            f"{MAX_SCAN_HABITS}); archive habits you no longer use and retry")
        self.count = count


def compared_pairs(habits: Sequence[Embedded]) -> int:
    """How many pairs `scan` compares: those of the same polarity."""
    counts: dict[int, int] = {}
    for habit in habits:
        counts[habit.polarity] = counts.get(habit.polarity, 0) + 1
    return sum(n * (n - 1) // 2 for n in counts.values())


def _matrix(vectors: Sequence[Vector]) -> NDArray[np.float64]:
    import numpy as np

    rows = np.vstack([np.asarray(v, dtype=np.float64) for v in vectors])
    norms: NDArray[np.float64] = np.linalg.norm(rows, axis=1, keepdims=True)
    if not bool(np.all(np.isfinite(norms))) or bool(np.any(norms == 0.0)):
        raise ValueError("cannot compare an empty, zero or non-finite vector")
    unit_rows: NDArray[np.float64] = rows / norms
    return unit_rows


def scan(habits: Sequence[Embedded], thresholds: Thresholds = Thresholds()) -> list[Pair]:
    """Every pair of `habits` worth a review, best first.

    Habits are grouped by polarity and each group is scored with two matrix products (all
    condition cosines, all behavior cosines); only pairs near or above the threshold are
    rescored exactly, so a scan and `matches` agree on every pair.
    """
    import numpy as np

    if len(habits) > MAX_SCAN_HABITS:
        raise ScanTooLarge(len(habits))
    if len({h.habit_id for h in habits}) != len(habits):
        raise ValueError("a habit appears twice in one scan")
    assert compared_pairs(habits) <= MAX_SCAN_PAIRS  # follows from the habit cap
    floor = thresholds.review_bp / BP - _MARGIN
    found: list[Pair] = []
    for polarity in sorted({h.polarity for h in habits}):
        group = [h for h in habits if h.polarity == polarity]
        if len(group) < 2:
            continue
        conditions = _matrix([h.condition for h in group])
        behaviors = _matrix([h.behavior for h in group])
        scores = np.minimum(conditions @ conditions.T, behaviors @ behaviors.T)
        upper_i, upper_j = np.triu_indices(len(group), k=1)
        near = scores[upper_i, upper_j] >= floor
        for i, j in zip(upper_i[near].tolist(), upper_j[near].tolist(), strict=True):
            score = similarity_bp(group[i], group[j])
            if score >= thresholds.review_bp:
                found.append(Pair.of(group[i], group[j], score, thresholds))
    return _ranked(found)


async def embed_habits(embedder: Embedder, items: Sequence[HabitText], *,
                       owner: Owner = NOBODY) -> list[Embedded]:
    """Embed the habits' normalised conditions and behaviors in one call to the embedder,
    as `owner`'s (whose habits they are: what is cached of them goes with the user).

    Wordings are normalised as approval compares them, so a change of case or spacing neither
    changes a vector nor misses the cache. Raises `EmbedderUnavailable` when the embedder does.
    """
    if not items:
        return []
    conditions = [normalise(item[3]) for item in items]
    behaviors = [normalise(item[4]) for item in items]
    vectors = await embedder.embed(conditions + behaviors, owner=owner)
    if len(vectors) != 2 * len(items):
        raise EmbedderUnavailable(f"{len(vectors)} vectors for {2 * len(items)} texts")
    n = len(items)
    return [
        Embedded(habit_id=habit_id, polarity=polarity, created_at=created_at,
                 condition=vectors[k], behavior=vectors[n + k])
        for k, (habit_id, polarity, created_at, _, _) in enumerate(items)
    ]
