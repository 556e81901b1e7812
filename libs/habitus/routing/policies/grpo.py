"""GRPO routing: softmax weights per (query class, model), moved by group-relative advantages.

The policy for a class is softmax(w / temperature) over the offered models' weights (0 for a
model never updated), sampled with the generator seeded by the decision id. With all weights 0
that is a uniform draw, which is how it explores before it has learned anything.

Learning takes a *group*: rewards recorded for one class, each with the model that earned it
(the service forms the groups, e.g. every `group_size` traces of a class, with `group_rewards`).
Within the group each reward's advantage is A_i = (r_i - mean) / std, so only how a model did
relative to the others in the same group counts, not the reward's scale. The step is the policy
gradient of the group's mean advantage-weighted log-likelihood,

    Δw_k = lr / G · Σ_i A_i (1[a_i = k] - π_k) = lr / G · Σ_{i: a_i = k} A_i,

because the advantages of a group sum to zero; models absent from the group keep their weights.
A group of one, or of equal rewards, carries no relative information and changes nothing.
Weights are clipped to ±`MAX_WEIGHT`, so no model's probability ever reaches exactly 0 and a
changed world can still be noticed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from habitus.routing.context import RoutingContext, query_class
from habitus.routing.policies.base import ArmKey, Choice, RouterState, certain, rng_for
from habitus.routing.policies.heuristic import heuristic_choice
from habitus.routing.sizes import Sizes

LEARNING_RATE: Final = 0.5
MAX_WEIGHT: Final = 5.0
GROUP_SIZE: Final = 8
_MIN_STD: Final = 1e-9

#: (model, reward) pairs recorded for one class
Group = Sequence[tuple[str, float]]


def grpo_update(weights: Mapping[ArmKey, float], cls: str, group: Group,
                learning_rate: float = LEARNING_RATE, max_weight: float = MAX_WEIGHT,
                ) -> dict[ArmKey, float]:
    """`weights` after one group of `cls` rewards (a new mapping; see the module docstring)."""
    updated = dict(weights)
    if len(group) < 2:
        return updated
    rewards = [r for _, r in group]
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std < _MIN_STD:
        return updated
    step: dict[str, float] = defaultdict(float)
    for model, r in group:
        step[model] += learning_rate * (r - mean) / std / len(group)
    for model, delta in step.items():
        key = (cls, model)
        updated[key] = min(max(updated.get(key, 0.0) + delta, -max_weight), max_weight)
    return updated


def group_rewards(records: Iterable[tuple[str, str, float]], group_size: int = GROUP_SIZE
                  ) -> tuple[list[tuple[str, list[tuple[str, float]]]],
                             dict[str, list[tuple[str, float]]]]:
    """(class, model, reward) records in order → the full groups of `group_size` per class, in
    the order they filled, and the partial group each class has left over."""
    if group_size < 2:
        raise ValueError("a group needs at least 2 rewards")
    pending: dict[str, list[tuple[str, float]]] = defaultdict(list)
    groups: list[tuple[str, list[tuple[str, float]]]] = []
    for cls, model, r in records:
        pending[cls].append((model, r))
        if len(pending[cls]) == group_size:
            groups.append((cls, pending.pop(cls)))
    return groups, dict(pending)


def _by_model(models: Sequence[str], probs: Sequence[float]) -> dict[str, float]:
    """Each model's probability (a model offered twice has both its shares)."""
    out: dict[str, float] = {}
    for model, p in zip(models, probs, strict=True):
        out[model] = out.get(model, 0.0) + p
    return out


def softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


@dataclass(frozen=True, slots=True)
class GRPO:
    """Softmax sampling over the class's GRPO weights."""

    temperature: float = 1.0
    name: ClassVar[str] = "grpo"

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError("the softmax temperature must be positive")

    def choose(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
               default_model: str | None, fallback_model: str | None,
               state: RouterState, decision_id: str) -> Choice:
        if not models:
            return heuristic_choice(ctx, models, sizes, default_model, fallback_model)
        cls = query_class(ctx)
        probs = softmax([state.grpo.get((cls, m), 0.0) / self.temperature for m in models])
        point = rng_for(decision_id).random()
        chosen = models[-1]
        cumulative = 0.0
        for model, p in zip(models, probs, strict=True):
            cumulative += p
            if point < cumulative:
                chosen = model
                break
        scores = _by_model(models, probs)
        return Choice(chosen, f"grpo: sampled from the {cls} policy", scores, scores[chosen])

    def distribution(self, ctx: RoutingContext, models: Sequence[str], sizes: Sizes,
                     default_model: str | None, fallback_model: str | None,
                     state: RouterState) -> dict[str, float]:
        """The softmax over the offered models (exact: what `choose` samples from)."""
        if not models:
            return certain(heuristic_choice(ctx, models, sizes, default_model, fallback_model))
        cls = query_class(ctx)
        return _by_model(models, softmax(
            [state.grpo.get((cls, m), 0.0) / self.temperature for m in models]))

    def table(self, state: RouterState) -> dict[str, str]:
        """Per class, the model with the highest weight (ties: the lesser name)."""
        best: dict[str, tuple[float, str]] = {}
        for (cls, model), w in state.grpo.items():
            if model and (cls not in best or (-w, model) < best[cls]):
                best[cls] = (-w, model)
        return {cls: rank[1] for cls, rank in sorted(best.items())}
