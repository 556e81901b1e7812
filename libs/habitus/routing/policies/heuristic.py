"""The seed's rule-based router, in the order its code runs them (not the order its docs list).

1. urgency > 0.8 → the smallest model (the fastest answer);
2. code → a model whose name contains "code" ("coder", "codestral" included; of several, the
   largest), else the largest;
3. math → the largest;
4. shorter than 50 characters → the smallest;
5. longer than 500 characters, or reasoning words → the largest;
6. else the default model, then the fallback, then the first offered by name.

"Largest" and "smallest" are `sizes.pick_largest` / `sizes.pick_smallest`: size first (a model
of unknown size, a hosted one, is the largest and never the smallest while a sized one is
offered), then the catalogue price, then the name. Nothing here depends on the order of the
request's models: the seed takes the first code model and the first of equal size, so listing
`gpt-4o-mini,gpt-4o` instead of `gpt-4o,gpt-4o-mini` changed its answer; here the same models
give the same model in any order. Each reason names the rule and the facts that decided (sizes
and where they were read, prices), so "the largest model" is never said of a model that was
picked by price or by name.

It is also the fallback of every learning policy while that policy knows too little.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from habitus.routing.context import LONG_CHARS, SHORT_CHARS, RoutingContext
from habitus.routing.policies.base import Choice, RouterState, certain, default_chain
from habitus.routing.sizes import Direction, Sizes, name_order, pick

#: above this urgency the smallest model wins whatever the query
URGENT: Final = 0.8
_CODE_TAG: Final = "code"


def code_models(models: Sequence[str]) -> list[str]:
    """The offered models whose name says they are for code, in name order."""
    return sorted({m for m in models if _CODE_TAG in m.lower()}, key=name_order)


def heuristic_choice(ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                     default_model: str | None, fallback_model: str | None) -> Choice:
    if not models:
        return default_chain(models, default_model, fallback_model)
    if ctx.urgency > URGENT:
        return _ranked(f"urgency {ctx.urgency:g} > {URGENT:g}", models, sizes, "smallest")
    if ctx.has_code:
        coders = code_models(models)
        if len(coders) == 1:
            return Choice(coders[0], f"code: the one code model offered ({coders[0]} has "
                                     f"\"{_CODE_TAG}\" in its name)")
        if coders:
            return _ranked(f"code: of {len(coders)} code models", coders, sizes, "largest")
        return _ranked("code, no code model", models, sizes, "largest")
    if ctx.has_math:
        return _ranked("math", models, sizes, "largest")
    if ctx.query_length < SHORT_CHARS:
        return _ranked(f"short query (< {SHORT_CHARS} characters)", models, sizes, "smallest")
    if ctx.query_length > LONG_CHARS:
        return _ranked(f"long query (> {LONG_CHARS} characters)", models, sizes, "largest")
    if ctx.has_reasoning:
        return _ranked("reasoning words", models, sizes, "largest")
    chosen = default_chain(models, default_model, fallback_model)
    return Choice(chosen.model, f"no signal: {chosen.reason}")


def _ranked(rule: str, models: Sequence[str], sizes: Sizes, direction: Direction) -> Choice:
    """The first of `models` for `direction`, the reason being the rule and the deciding facts."""
    chosen = pick(models, sizes, direction)
    if chosen is None:  # only for no models, which every caller has ruled out
        return default_chain(models, None, None)
    return Choice(chosen.model, f"{rule}: {chosen.why}")


@dataclass(frozen=True, slots=True)
class Heuristic:
    """Rules only; it learns nothing, so its table is always empty."""

    name: ClassVar[str] = "heuristic"

    def choose(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
               default_model: str | None, fallback_model: str | None,
               state: RouterState, decision_id: str) -> Choice:
        return heuristic_choice(ctx, models, sizes, default_model, fallback_model)

    def distribution(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                     default_model: str | None, fallback_model: str | None,
                     state: RouterState) -> dict[str, float]:
        return certain(heuristic_choice(ctx, models, sizes, default_model, fallback_model))

    def table(self, state: RouterState) -> dict[str, str]:
        return {}
