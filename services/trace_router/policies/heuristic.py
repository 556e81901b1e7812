"""The seed's rule-based router, in the order its code runs them (not the order its docs list).

1. urgency > 0.8 → the smallest model (the fastest answer);
2. code → the first model whose name contains "code" ("coder", "codestral" included), else the
   largest;
3. math → the largest;
4. shorter than 50 characters → the smallest;
5. longer than 500 characters, or reasoning words → the largest;
6. else the default model, then the fallback, then the first offered.

"Largest" and "smallest" are `sizes.largest` / `sizes.smallest`: a model of unknown size (a
cloud model) is the largest and never the smallest while a sized one is offered. It is also the
fallback of every learning policy while that policy knows too little.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from services.trace_router.context import LONG_CHARS, SHORT_CHARS, RoutingContext
from services.trace_router.policies.base import Choice, RouterState, default_chain
from services.trace_router.sizes import Sizes, largest, smallest

#: above this urgency the smallest model wins whatever the query
URGENT: Final = 0.8
_CODE_TAG: Final = "code"


def heuristic_choice(ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                     default_model: str | None, fallback_model: str | None) -> Choice:
    if not models:
        return default_chain(models, default_model, fallback_model)
    if ctx.urgency > URGENT:
        return _sized(smallest(models, sizes), models, f"urgency {ctx.urgency:g} > {URGENT:g}: "
                      "the smallest model")
    if ctx.has_code:
        coder = next((m for m in models if _CODE_TAG in m.lower()), None)
        if coder is not None:
            return Choice(coder, "code: a code model")
        return _sized(largest(models, sizes), models, "code, no code model: the largest model")
    if ctx.has_math:
        return _sized(largest(models, sizes), models, "math: the largest model")
    if ctx.query_length < SHORT_CHARS:
        return _sized(smallest(models, sizes), models,
                      f"short query (< {SHORT_CHARS} characters): the smallest model")
    if ctx.query_length > LONG_CHARS:
        return _sized(largest(models, sizes), models,
                      f"long query (> {LONG_CHARS} characters): the largest model")
    if ctx.has_reasoning:
        return _sized(largest(models, sizes), models, "reasoning words: the largest model")
    chosen = default_chain(models, default_model, fallback_model)
    return Choice(chosen.model, f"no signal: {chosen.reason}")


def _sized(model: str | None, models: Sequence[str], reason: str) -> Choice:
    # largest/smallest return None only for no models, which the caller has ruled out
    return Choice(model if model is not None else models[0], reason)


@dataclass(frozen=True, slots=True)
class Heuristic:
    """Rules only; it learns nothing, so its table is always empty."""

    name: ClassVar[str] = "heuristic"

    def choose(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
               default_model: str | None, fallback_model: str | None,
               state: RouterState, decision_id: str) -> Choice:
        return heuristic_choice(ctx, models, sizes, default_model, fallback_model)

    def table(self, state: RouterState) -> dict[str, str]:
        return {}
