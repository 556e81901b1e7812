"""Routing under a tenant's configuration: which policy, which models, which pinned model.

A tenant's configuration (`habitus.contract.configuration`) may name the routing policy and its
`min_samples`, narrow the models routing may choose among (`routing.models`), and pin a model per
query class (`routing.model_for.<class>`). The trace router decides with `decide`; the optimizer
estimates another configuration with `distribution`, the same rules answering "which models,
with what probability" instead of drawing one. Keeping both here is what makes an estimate
describe what applying the configuration would really do.

Precedence: a request naming a policy gets that policy (an explicit caller's choice), else the
configuration's, else the tenant's default policy. A pinned model applies whatever the policy,
when the request offers it (or offers nothing); a pin the request does not offer leaves the
decision to the policy, and the reason says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from habitus.contract.configuration import model_for
from habitus.routing.context import RoutingContext, query_class
from habitus.routing.policies import Choice, Policy, RouterState, policy_for
from habitus.routing.sizes import Sizes


@dataclass(frozen=True, slots=True)
class Routing:
    """The routing part of a configuration, resolved for one request."""

    policy: Policy
    #: the models routing may choose among (None: all offered)
    allowed: frozenset[str] | None
    params: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.policy.name


def routing_for(params: Mapping[str, Any], requested: str | None, default_policy: str,
                min_samples: int) -> Routing:
    """The policy a request is routed by (see the module docstring for the precedence), built
    with the configuration's `routing.min_samples` where it sets one. `UnknownPolicy` for a
    name not registered."""
    name = requested or params.get("routing.policy") or default_policy
    samples = int(params.get("routing.min_samples", min_samples))
    if name in ("heuristic", "bandit", "grpo"):
        policy = policy_for(name)
    elif name == "learned":
        policy = policy_for(name, min_samples=samples,
                            online=bool(params.get("routing.online_switch", False)))
    else:
        policy = policy_for(name, min_samples=samples)
    allowed = params.get("routing.models")
    return Routing(policy, frozenset(allowed) if allowed else None, params)


def narrowed(models: Sequence[str], allowed: frozenset[str] | None) -> tuple[list[str], str]:
    """The offered models routing may choose among, and a note when the configuration's list
    left none of them (then all offered stay: routing never answers a model not offered)."""
    if allowed is None:
        return list(models), ""
    kept = [m for m in models if m in allowed]
    if models and not kept:
        return list(models), " (none of the configured routing.models is offered)"
    return kept, ""


def _pinned(routing: Routing, ctx: RoutingContext, models: Sequence[str]
            ) -> tuple[str | None, str]:
    cls = query_class(ctx)
    pinned = model_for(routing.params, cls)
    if pinned is None:
        return None, ""
    if not models or pinned in models:
        return pinned, f"configured: {cls} queries go to {pinned}"
    return None, f"; the configured {pinned} for {cls} queries is not offered"


def decide(routing: Routing, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
           default_model: str | None, fallback_model: str | None, state: RouterState,
           decision_id: str) -> Choice:
    """The model for one request under the configuration (its propensity included)."""
    offered, note = narrowed(models, routing.allowed)
    pinned, why = _pinned(routing, ctx, offered)
    if pinned is not None:
        return Choice(pinned, why + note)
    choice = routing.policy.choose(ctx, offered, sizes, default_model, fallback_model, state,
                                   decision_id)
    return replace(choice, reason=choice.reason + why + note) if why or note else choice


def distribution(routing: Routing, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                 default_model: str | None, fallback_model: str | None, state: RouterState
                 ) -> dict[str, float]:
    """The probability of each model `decide` can answer for this request."""
    offered, _ = narrowed(models, routing.allowed)
    pinned, _ = _pinned(routing, ctx, offered)
    if pinned is not None:
        return {pinned: 1.0}
    return routing.policy.distribution(ctx, offered, sizes, default_model, fallback_model,
                                       state)
