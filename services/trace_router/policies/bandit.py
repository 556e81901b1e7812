"""Thompson sampling per (query class, model) on the trace reward (`reward.reward`).

Each (class, model) is an arm with a Beta posterior over its mean reward. Rewards are in [0, 1],
not 0/1, so a reward r counts as r of a success and 1 - r of a failure (the fractional Bernoulli
update): alpha = 1 + Σr, beta = 1 + Σ(1 - r), from the Beta(1, 1) prior. Those sums are the
aggregates' `reward_sum` and `reward_n`, so the bandit has no state of its own and a replay of
the traces rebuilds it exactly.

To choose, every offered model draws once from its posterior, in the request's order, from the
generator seeded by the decision id, and the highest draw wins (ties: the first). An untried model
draws from the flat prior, so it keeps being explored until its rewards say otherwise, and no
heuristic stands in at a cold start: with no data the draw is a fair lottery, which is what
choosing a bandit asks for. The traces it learns from need not be its own choices: any trace of
a (class, model) informs that arm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from services.trace_router.context import RoutingContext, query_class
from services.trace_router.policies.base import Aggregate, Choice, RouterState, rng_for
from services.trace_router.policies.heuristic import heuristic_choice
from services.trace_router.sizes import Sizes

PRIOR: Final = 1.0


def posterior(agg: Aggregate | None, prior: float = PRIOR) -> tuple[float, float]:
    """(alpha, beta) of an arm; sums that drifted out of range are clamped, never fatal."""
    if agg is None or agg.reward_n <= 0:
        return prior, prior
    wins = min(max(agg.reward_sum, 0.0), float(agg.reward_n))
    return prior + wins, prior + agg.reward_n - wins


@dataclass(frozen=True, slots=True)
class Bandit:
    """Thompson sampling over the offered models, per query class."""

    prior: float = PRIOR
    name: ClassVar[str] = "bandit"

    def __post_init__(self) -> None:
        if not self.prior > 0:
            raise ValueError("the Beta prior must be positive")

    def choose(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
               default_model: str | None, fallback_model: str | None,
               state: RouterState, decision_id: str) -> Choice:
        if not models:
            return heuristic_choice(ctx, models, sizes, default_model, fallback_model)
        cls = query_class(ctx)
        rng = rng_for(decision_id)
        draws: dict[str, float] = {}
        best, best_draw = models[0], -1.0
        for model in models:
            alpha, beta = posterior(state.aggregates.get((cls, model)), self.prior)
            draw = rng.betavariate(alpha, beta)
            draws.setdefault(model, draw)
            if draw > best_draw:
                best, best_draw = model, draw
        return Choice(best, f"bandit: the highest Thompson draw for {cls} queries", draws)

    def table(self, state: RouterState) -> dict[str, str]:
        """Per class, the arm with the highest posterior mean among those with rewards."""
        best: dict[str, tuple[float, int, str]] = {}
        for (cls, model), agg in state.aggregates.items():
            if agg.reward_n <= 0 or not model:
                continue
            alpha, beta = posterior(agg, self.prior)
            rank = (-alpha / (alpha + beta), -agg.reward_n, model)
            if cls not in best or rank < best[cls]:
                best[cls] = rank
        return {cls: rank[2] for cls, rank in sorted(best.items())}
