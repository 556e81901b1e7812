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

Its propensity (the chance the chosen model had) has no closed form for more than two arms, so
it is estimated: `PROPENSITY_DRAWS` more lotteries from the same posteriors, seeded by the class
and the offered models (not the decision), each model's share of the wins smoothed by half a win
so no offered model has probability 0 (an off-policy estimate divides by it). The estimate
depends on its inputs only and is cached, so a tenant's decisions cost one estimate per state.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from habitus.routing.context import RoutingContext, query_class
from habitus.routing.policies.base import Aggregate, Choice, RouterState, certain, rng_for
from habitus.routing.policies.heuristic import heuristic_choice
from habitus.routing.sizes import Sizes

PRIOR: Final = 1.0
#: lotteries that estimate each offered model's chance of winning (its propensity)
PROPENSITY_DRAWS: Final = 256
#: wins every model is credited before counting, so none has probability 0
SMOOTHING: Final = 0.5


def posterior(agg: Aggregate | None, prior: float = PRIOR) -> tuple[float, float]:
    """(alpha, beta) of an arm; sums that drifted out of range are clamped, never fatal."""
    if agg is None or agg.reward_n <= 0:
        return prior, prior
    wins = min(max(agg.reward_sum, 0.0), float(agg.reward_n))
    return prior + wins, prior + agg.reward_n - wins


@functools.lru_cache(maxsize=4096)
def win_probabilities(arms: tuple[tuple[str, float, float], ...], cls: str,
                      draws: int = PROPENSITY_DRAWS) -> dict[str, float]:
    """Each model's share of `draws` Thompson lotteries over `arms` ((model, alpha, beta), in
    the request's order), smoothed (module docstring). The caller must not change the dict:
    it is cached."""
    rng = rng_for("propensity:" + cls + ":" + "\x1f".join(
        f"{m}\x1e{a!r}\x1e{b!r}" for m, a, b in arms))
    wins: dict[str, float] = dict.fromkeys((m for m, _, _ in arms), SMOOTHING)
    for _ in range(draws):
        best, best_draw = arms[0][0], -1.0
        for model, alpha, beta in arms:
            draw = rng.betavariate(alpha, beta)
            if draw > best_draw:
                best, best_draw = model, draw
        wins[best] += 1.0
    total = draws + SMOOTHING * len(wins)
    return {m: w / total for m, w in wins.items()}


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
        arms = tuple((m, *posterior(state.aggregates.get((cls, m)), self.prior))
                     for m in models)
        chance = win_probabilities(arms, cls)
        return Choice(best, f"bandit: the highest Thompson draw for {cls} queries", draws,
                      chance[best])

    def distribution(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                     default_model: str | None, fallback_model: str | None,
                     state: RouterState) -> dict[str, float]:
        """Each offered model's estimated chance of winning the lottery (module docstring)."""
        if not models:
            return certain(heuristic_choice(ctx, models, sizes, default_model, fallback_model))
        cls = query_class(ctx)
        return dict(win_probabilities(
            tuple((m, *posterior(state.aggregates.get((cls, m)), self.prior)) for m in models),
            cls))

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
