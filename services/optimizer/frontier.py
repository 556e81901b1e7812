"""Which trials of a run matter: the Pareto frontier, the best trial, when to stop.

All pure, over `Scored` trials (a trial's id, its place in the run and its metrics), so the
worker, the projection that folds `TrialEvaluated` and the tests compute the same answers.

- The frontier: a trial is on it unless another dominates it (at least as good on every
  objective and better on one; a minimised metric counts its negative). Input order is kept,
  weights play no part, and identical trials both stay. A trial the evaluator gave no estimate
  for on some objective is not on it (it cannot be compared), where the reference treats a
  missing metric as 0.
- The best trial: by the weighted objectives (each trial's relative improvement over the
  run's first fully estimated trial, signed by direction, times the weight), or by accuracy
  alone as the reference chooses; strictly better replaces, so ties keep the earlier trial.
- Early stopping: the run ends once `patience` trials in a row have not replaced the best.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from habitus.contract.optimize import Objective

#: below these magnitudes a metric's reference value is not divided by (a free or instant
#: first trial must not make every later improvement infinite)
FLOORS: Final[Mapping[str, float]] = {
    "reward": 0.01, "accuracy": 0.01, "latency_seconds": 0.001, "cost_usd": 1e-6,
    "tokens": 1.0, "energy_joules": 0.001,
}
BestBy = Literal["weighted", "accuracy"]


@dataclass(frozen=True, slots=True)
class Scored:
    trial_id: str
    index: int
    metrics: Mapping[str, float | None]


def _vector(trial: Scored, objectives: Sequence[Objective]) -> tuple[float, ...] | None:
    values: list[float] = []
    for o in objectives:
        value = trial.metrics.get(o.metric)
        if value is None:
            return None
        values.append(value if o.direction == "maximize" else -value)
    return tuple(values)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """`a` is at least as good as `b` everywhere and better somewhere (larger is better)."""
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(
        x > y for x, y in zip(a, b, strict=True))


def pareto_frontier(trials: Sequence[Scored], objectives: Sequence[Objective]) -> list[Scored]:
    """The trials no other trial dominates, in input order (module docstring)."""
    if not trials or not objectives:
        return list(trials)
    vectors = [(t, _vector(t, objectives)) for t in trials]
    comparable = [(t, v) for t, v in vectors if v is not None]
    return [t for t, v in comparable
            if not any(dominates(w, v) for u, w in comparable if u is not t)]


def _reference(trials: Sequence[Scored], objectives: Sequence[Objective]) -> Scored | None:
    return next((t for t in trials if _vector(t, objectives) is not None), None)


def weighted_score(trial: Scored, reference: Scored, objectives: Sequence[Objective]
                   ) -> float | None:
    """Σ weight · signed relative improvement over `reference`; None when not estimated."""
    total = 0.0
    for o in objectives:
        value, base = trial.metrics.get(o.metric), reference.metrics.get(o.metric)
        if value is None or base is None:
            return None
        scale = max(abs(base), FLOORS.get(o.metric, 1e-9))
        change = (value - base) / scale
        total += o.weight * (change if o.direction == "maximize" else -change)
    return total


def _rank(trial: Scored, reference: Scored | None, objectives: Sequence[Objective],
          best_by: BestBy) -> float | None:
    if best_by == "accuracy":
        return trial.metrics.get("accuracy")
    return None if reference is None else weighted_score(trial, reference, objectives)


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a run stands after its trials so far."""

    best: Scored | None
    #: trials in a row since the best was last replaced (or since the start, with none)
    since_best: int
    frontier: tuple[Scored, ...]

    def exhausted(self, patience: int) -> bool:
        return self.since_best >= patience


def progress(trials: Sequence[Scored], objectives: Sequence[Objective],
             best_by: BestBy = "weighted") -> Progress:
    """The best trial, the patience counter and the frontier of `trials` (in run order)."""
    reference = _reference(trials, objectives)
    best: Scored | None = None
    best_rank: float | None = None
    since = 0
    for trial in trials:
        rank = _rank(trial, reference, objectives, best_by)
        if rank is not None and (best_rank is None or rank > best_rank):
            best, best_rank, since = trial, rank, 0
        else:
            since += 1
    return Progress(best, since, tuple(pareto_frontier(trials, objectives)))
