"""The routing policies, by name: `heuristic`, `learned`, `sft`, `bandit`, `grpo`.

Every policy answers `choose(ctx, models, sizes, default_model, fallback_model, state,
decision_id) -> Choice` purely from its arguments (the choice carries its propensity),
`distribution(...)` with the probability of each model it can choose, and `table(state)` with its
current class → model preferences (what `router.update_policy` diffs and versions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, Protocol

from habitus.routing.context import RoutingContext
from habitus.routing.policies.bandit import Bandit
from habitus.routing.policies.base import (
    Aggregate,
    Choice,
    NoModelAvailable,
    RouterState,
    UnknownPolicy,
    observe,
    rng_for,
)
from habitus.routing.policies.grpo import GRPO, group_rewards, grpo_update
from habitus.routing.policies.heuristic import Heuristic, heuristic_choice
from habitus.routing.policies.learned import (
    SFT,
    Learned,
    diff,
    learn,
    online_switch,
    sft_table,
)
from habitus.routing.sizes import Sizes


class Policy(Protocol):
    name: ClassVar[str]

    def choose(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
               default_model: str | None, fallback_model: str | None,
               state: RouterState, decision_id: str) -> Choice: ...

    def distribution(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                     default_model: str | None, fallback_model: str | None,
                     state: RouterState) -> dict[str, float]:
        """The probability of each model `choose` can answer (1 for one model when the policy
        is deterministic): what an off-policy estimate of this policy weighs outcomes by."""
        ...

    def table(self, state: RouterState) -> dict[str, str]: ...


POLICIES: Final[Mapping[str, Callable[..., Policy]]] = {
    "heuristic": Heuristic,
    "learned": Learned,
    "sft": SFT,
    "bandit": Bandit,
    "grpo": GRPO,
}
#: what a tenant that chose no policy gets (`RouterSettings.default_policy`): its own traces
#: where a query class has enough of them, else the heuristic, class by class
DEFAULT_POLICY: Final = "learned"


def policy_for(name: str, **params: Any) -> Policy:
    """The policy registered as `name`, built with `params` (e.g. `min_samples=3`)."""
    factory = POLICIES.get(name)
    if factory is None:
        raise UnknownPolicy(f"unknown routing policy {name!r}; known: {', '.join(POLICIES)}")
    return factory(**params)


__all__ = [
    "DEFAULT_POLICY", "GRPO", "POLICIES", "SFT", "Aggregate", "Bandit", "Choice", "Heuristic",
    "Learned", "NoModelAvailable", "Policy", "RouterState", "UnknownPolicy", "diff",
    "group_rewards", "grpo_update", "heuristic_choice", "learn", "observe", "online_switch",
    "policy_for",
    "rng_for", "sft_table",
]
