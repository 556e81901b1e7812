"""The two table policies: `learned` (per class) and `sft` (per model), from the aggregates.

Both score a (class, model) by 0.6 · success + 0.4 · feedback and route a class to its best
model; they differ in what they count:

- `learned`: success rate = successes / traces with an outcome, feedback = the mean of the given
  feedback (0.5 when none), and a class is learned once it has `min_samples` traces in all,
  whatever their models.
- `sft` (the seed's trace-driven routing table; no model is trained): the mean over traces of
  0.6 · (outcome is "success") + 0.4 · (feedback, or 0.5 when none), so an unknown outcome
  counts as a miss and an unrated trace as 0.5, and only models with at least `min_samples`
  traces of the class compete.

Ties go to the model with more traces, then to the lesser name: the reference breaks them by
which trace it read first, which a replay of the same traces in another order can change. A
table is recomputed from the aggregates by `learn` / `sft_table`; the service stores it, and
`diff` gives the changes it reports. A request that does not offer the table's model gets the
best offered model by the same scores (the table cannot know each request's models), and a class
with no table entry gets the heuristic's answer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, TypedDict

from services.trace_router.context import RoutingContext, query_class
from services.trace_router.policies.base import (
    FEEDBACK_WEIGHT,
    NO_FEEDBACK,
    SUCCESS_WEIGHT,
    Aggregate,
    ArmKey,
    Choice,
    RouterState,
)
from services.trace_router.policies.heuristic import heuristic_choice
from services.trace_router.sizes import Sizes

DEFAULT_MIN_SAMPLES: Final = 5
Aggregates = Mapping[ArmKey, Aggregate]


class Change(TypedDict):
    old: str | None
    new: str | None


def composite(agg: Aggregate) -> float:
    """The learned policy's score of one (class, model)."""
    feedback = agg.mean_feedback
    return (SUCCESS_WEIGHT * agg.success_rate
            + FEEDBACK_WEIGHT * (feedback if feedback is not None else NO_FEEDBACK))


def sft_score(agg: Aggregate) -> float:
    """The sft policy's score: the mean per-trace composite, unrated traces counting 0.5."""
    if agg.count <= 0:
        return 0.0
    unrated = max(agg.count - agg.feedback_n, 0)
    return (SUCCESS_WEIGHT * agg.successes / agg.count
            + FEEDBACK_WEIGHT * (agg.feedback_sum + NO_FEEDBACK * unrated) / agg.count)


def _by_class(aggregates: Aggregates) -> dict[str, list[tuple[str, Aggregate]]]:
    grouped: dict[str, list[tuple[str, Aggregate]]] = defaultdict(list)
    for (cls, model), agg in aggregates.items():
        if model and agg.count > 0:
            grouped[cls].append((model, agg))
    return grouped


def _best(scored: Sequence[tuple[str, Aggregate, float]]) -> str | None:
    if not scored:
        return None
    return min(scored, key=lambda item: (-item[2], -item[1].count, item[0]))[0]


def learn(aggregates: Aggregates, min_samples: int = DEFAULT_MIN_SAMPLES,
          candidates: Collection[str] | None = None) -> dict[str, str]:
    """The learned table: per class with ≥ `min_samples` traces, its best model by `composite`
    (among `candidates` when given)."""
    table: dict[str, str] = {}
    for cls, rows in _by_class(aggregates).items():
        if sum(agg.count for _, agg in rows) < min_samples:
            continue
        best = _best([(m, agg, composite(agg)) for m, agg in rows
                      if candidates is None or m in candidates])
        if best is not None:
            table[cls] = best
    return table


def sft_table(aggregates: Aggregates, min_samples: int = DEFAULT_MIN_SAMPLES,
              candidates: Collection[str] | None = None) -> dict[str, str]:
    """The sft table: per class, the best model by `sft_score` among the models with
    ≥ `min_samples` traces of it (and in `candidates` when given)."""
    table: dict[str, str] = {}
    for cls, rows in _by_class(aggregates).items():
        best = _best([(m, agg, sft_score(agg)) for m, agg in rows
                      if agg.count >= min_samples and (candidates is None or m in candidates)])
        if best is not None:
            table[cls] = best
    return table


def diff(old: Mapping[str, str], new: Mapping[str, str]) -> dict[str, Change]:
    """The classes whose model changed, was learned (`old` None) or was dropped (`new` None)."""
    return {cls: Change(old=old.get(cls), new=new.get(cls))
            for cls in sorted(set(old) | set(new)) if old.get(cls) != new.get(cls)}


def _table_choice(label: str, table_model: str | None, live_model: str | None, cls: str,
                  scores: dict[str, float], ctx: RoutingContext, models: Sequence[str],
                  sizes: Sizes, default_model: str | None, fallback_model: str | None,
                  ) -> Choice:
    if table_model is not None and table_model in models:
        return Choice(table_model, f"{label}: the best model for {cls} queries", scores)
    if table_model is not None and live_model is not None:
        return Choice(live_model, f"{label}: {table_model} is not offered; the best offered "
                      f"model for {cls} queries", scores)
    fallback = heuristic_choice(ctx, models, sizes, default_model, fallback_model)
    why = (f"too few {cls} traces" if table_model is None
           else f"{table_model} is not offered and no offered model qualifies")
    return Choice(fallback.model, f"{label}: {why}; heuristic: {fallback.reason}", scores)


class _TablePolicy:
    """A policy that routes by a class -> model table computed from the aggregates (`learned`
    and `sft` differ only in how a model is scored and which table of the state they read)."""

    min_samples: int
    name: ClassVar[str]

    @staticmethod
    def _score(agg: Aggregate) -> float:
        raise NotImplementedError

    def _compute(self, aggregates: Aggregates, candidates: set[str] | None = None
                 ) -> dict[str, str]:
        raise NotImplementedError

    def _published(self, state: RouterState) -> Mapping[str, str]:
        raise NotImplementedError

    def choose(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
               default_model: str | None, fallback_model: str | None,
               state: RouterState, decision_id: str) -> Choice:
        cls = query_class(ctx)
        if not models:
            return heuristic_choice(ctx, models, sizes, default_model, fallback_model)
        scores = {m: self._score(agg) for m in models
                  if (agg := state.aggregates.get((cls, m))) is not None and agg.count > 0}
        table_model = self._published(state).get(cls)
        live = None
        if table_model is not None and table_model not in models:
            live = self._compute(state.aggregates, set(models)).get(cls)
        return _table_choice(self.name, table_model, live, cls, scores, ctx, models, sizes,
                             default_model, fallback_model)

    def table(self, state: RouterState) -> dict[str, str]:
        return self._compute(state.aggregates)


@dataclass(frozen=True, slots=True)
class Learned(_TablePolicy):
    """Per class, the model with the best composite once the class has `min_samples` traces."""

    min_samples: int = DEFAULT_MIN_SAMPLES
    name: ClassVar[str] = "learned"

    @staticmethod
    def _score(agg: Aggregate) -> float:
        return composite(agg)

    def _compute(self, aggregates: Aggregates, candidates: set[str] | None = None
                 ) -> dict[str, str]:
        return learn(aggregates, self.min_samples, candidates)

    def _published(self, state: RouterState) -> Mapping[str, str]:
        return state.learned


@dataclass(frozen=True, slots=True)
class SFT(_TablePolicy):
    """The seed's trace-driven routing table (per model at least `min_samples` traces)."""

    min_samples: int = DEFAULT_MIN_SAMPLES
    name: ClassVar[str] = "sft"

    @staticmethod
    def _score(agg: Aggregate) -> float:
        return sft_score(agg)

    def _compute(self, aggregates: Aggregates, candidates: set[str] | None = None
                 ) -> dict[str, str]:
        return sft_table(aggregates, self.min_samples, candidates)

    def _published(self, state: RouterState) -> Mapping[str, str]:
        return state.sft
