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
best offered model by the same scores (the table cannot know each request's models); a class
with enough traces that the published table does not have yet is routed by the same
computation; a class with too few traces gets the heuristic's answer.

`learned` is the default policy of a tenant that chose none, so its reason says which of the
two applied and on what facts: "learned from 24 code traces: gpt-4o 0.96 vs gpt-4o-mini 0.12"
(the class's traces of every model, and the scores of the chosen model and of the best other
offered one), or "heuristic (only 2 code traces, 5 needed): " followed by the heuristic's own
reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, TypedDict

from habitus.routing.context import RoutingContext, query_class
from habitus.routing.policies.base import (
    FEEDBACK_WEIGHT,
    NO_FEEDBACK,
    SUCCESS_WEIGHT,
    Aggregate,
    ArmKey,
    Choice,
    RouterState,
    certain,
)
from habitus.routing.policies.heuristic import URGENT, heuristic_choice
from habitus.routing.sizes import Sizes, name_order

DEFAULT_MIN_SAMPLES: Final = 5
#: feedback above which a success may switch a class's model online
SWITCH_FEEDBACK: Final = 0.7
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


def online_switch(observations: Iterable[tuple[str, str, str | None, float | None]],
                  min_samples: int = DEFAULT_MIN_SAMPLES) -> dict[str, str]:
    """The conservative online switch, over (class, model, outcome, feedback) in the order the
    traces were recorded: while a class has fewer than `min_samples` traces, a success rated
    above `SWITCH_FEEDBACK` routes the class to its model; from `min_samples` on the choice is
    frozen (the aggregates decide from there). Conservative: a class is mapped only by a good
    trace, never by whichever trace came first."""
    table: dict[str, str] = {}
    seen: dict[str, int] = {}
    for cls, model, outcome, feedback in observations:
        before = seen.get(cls, 0)
        if (before < min_samples and model and outcome == "success" and feedback is not None
                and feedback > SWITCH_FEEDBACK):
            table[cls] = model
        seen[cls] = before + 1
    return dict(sorted(table.items()))


def diff(old: Mapping[str, str], new: Mapping[str, str]) -> dict[str, Change]:
    """The classes whose model changed, was learned (`old` None) or was dropped (`new` None)."""
    return {cls: Change(old=old.get(cls), new=new.get(cls))
            for cls in sorted(set(old) | set(new)) if old.get(cls) != new.get(cls)}


def class_rows(aggregates: Aggregates, cls: str) -> dict[str, Aggregate]:
    """The models with traces of class `cls` and their aggregates."""
    return {model: agg for (c, model), agg in aggregates.items()
            if c == cls and model and agg.count > 0}


def _traces(n: int, cls: str) -> str:
    return f"{n} {cls} trace" + ("" if n == 1 else "s")


def compare(chosen: str, models: Sequence[str], scores: Mapping[str, float],
            rows: Mapping[str, Aggregate], cls: str) -> str:
    """`chosen`'s score against the best other offered model's ("a 0.96 vs b 0.12"), or against
    the offered models without traces of the class."""
    mine = f"{chosen} {scores[chosen]:.2f}" if chosen in scores else f"{chosen} (no score)"
    others = [(m, rows[m], scores[m]) for m in dict.fromkeys(models)
              if m != chosen and m in scores]
    runner = _best(others)
    if runner is not None:
        return f"{mine} vs {runner} {scores[runner]:.2f}"
    untried = sorted({m for m in models if m != chosen}, key=name_order)
    if not untried:
        return f"{mine}, the only model offered"
    if len(untried) == 1:
        return f"{mine} vs {untried[0]} (no {cls} traces)"
    return f"{mine} vs {len(untried)} models with no {cls} traces"


class _TablePolicy:
    """A policy that routes by a class -> model table computed from the aggregates (`learned`
    and `sft` differ in how a model is scored, when a class or model has enough traces, and
    which table of the state they read).

    The threshold is checked on the aggregates the decision reads, not on the published table,
    which trails them by the relearn debounce: a class that has just reached enough traces is
    routed by them at once (by the same computation the next relearn will publish), a class
    that fell below (an erased user) goes back to the heuristic, and the reason's counts are the
    ones the decision used. Where the class has enough traces, the published table's model is
    used when it is offered and still qualifies, so every replica answers alike."""

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

    def _shortfall(self, cls: str, rows: Mapping[str, Aggregate]) -> str | None:
        """Why the class has too few traces to be learned from; None when it has enough."""
        raise NotImplementedError

    def _qualifies(self, model: str, rows: Mapping[str, Aggregate]) -> bool:
        """Whether `model`'s traces of the class are enough to be routed to by this policy."""
        raise NotImplementedError

    def choose(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
               default_model: str | None, fallback_model: str | None,
               state: RouterState, decision_id: str) -> Choice:
        cls = query_class(ctx)
        if not models:
            return heuristic_choice(ctx, models, sizes, default_model, fallback_model)
        rows = class_rows(state.aggregates, cls)
        scores = {m: self._score(rows[m]) for m in models if m in rows}

        def heuristic(why: str) -> Choice:
            fallback = heuristic_choice(ctx, models, sizes, default_model, fallback_model)
            return Choice(fallback.model, f"heuristic ({why}): {fallback.reason}", scores)

        if ctx.urgency > URGENT:
            # "answer now" is the caller's explicit trade: speed over the learned quality
            return heuristic("urgent: speed before what the traces favour")
        shortfall = self._shortfall(cls, rows)
        if shortfall is not None:
            switched = state.online.get(cls) if getattr(self, "online", False) else None
            if switched is not None and switched in models:
                return Choice(switched, f"learned online ({shortfall}): {switched} had the "
                                        f"latest {cls} success rated above {SWITCH_FEEDBACK:g}",
                              scores)
            return heuristic(shortfall)
        evidence = f"{self.name} from {_traces(sum(a.count for a in rows.values()), cls)}"
        table_model = self._published(state).get(cls)
        if table_model is not None and table_model in models and self._qualifies(table_model,
                                                                                  rows):
            text = compare(table_model, models, scores, rows, cls)
            best = _best([(m, rows[m], scores[m]) for m in scores if self._qualifies(m, rows)])
            if best is not None and best != table_model:
                text += "; the published table's choice, until the next relearn"
            return Choice(table_model, f"{evidence}: {text}", scores)
        live = self._compute(state.aggregates, set(models)).get(cls)
        if table_model is None:
            note = "not in the published table yet"
        elif table_model not in models:
            note = f"the table's {table_model} is not offered"
        else:
            note = f"the table's {table_model} no longer has enough {cls} traces"
        if live is not None:
            return Choice(live, f"{evidence}: {compare(live, models, scores, rows, cls)} ({note})",
                          scores)
        return heuristic(f"{note}, and no offered model has enough {cls} traces")

    def distribution(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                     default_model: str | None, fallback_model: str | None,
                     state: RouterState) -> dict[str, float]:
        """Deterministic: the model `choose` answers, with probability 1."""
        return certain(self.choose(ctx, models, sizes, default_model, fallback_model, state,
                                   ""))

    def table(self, state: RouterState) -> dict[str, str]:
        return self._compute(state.aggregates)


@dataclass(frozen=True, slots=True)
class Learned(_TablePolicy):
    """Per class, the model with the best composite once the class has `min_samples` traces."""

    min_samples: int = DEFAULT_MIN_SAMPLES
    #: below the threshold, route by the online switch's choice (when offered) instead of the
    #: heuristic
    online: bool = False
    name: ClassVar[str] = "learned"

    @staticmethod
    def _score(agg: Aggregate) -> float:
        return composite(agg)

    def _compute(self, aggregates: Aggregates, candidates: set[str] | None = None
                 ) -> dict[str, str]:
        return learn(aggregates, self.min_samples, candidates)

    def _published(self, state: RouterState) -> Mapping[str, str]:
        return state.learned

    def _shortfall(self, cls: str, rows: Mapping[str, Aggregate]) -> str | None:
        n = sum(agg.count for agg in rows.values())
        return None if n >= self.min_samples else (
            f"only {_traces(n, cls)}, {self.min_samples} needed")

    def _qualifies(self, model: str, rows: Mapping[str, Aggregate]) -> bool:
        return model in rows


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

    def _shortfall(self, cls: str, rows: Mapping[str, Aggregate]) -> str | None:
        if any(self._qualifies(m, rows) for m in rows):
            return None
        most = max((agg.count for agg in rows.values()), default=0)
        return (f"no model has {self.min_samples} {cls} traces yet, the most is {most}")

    def _qualifies(self, model: str, rows: Mapping[str, Aggregate]) -> bool:
        return model in rows and rows[model].count >= self.min_samples
