"""What every routing policy shares: its answer, its learned state, the fallbacks, the dice.

A policy is a pure function of (context, the request's models and their sizes, default and
fallback model, learned state, decision id). It reads the state and never changes it: learning
happens in the pure update functions next to each policy (`learn`, `sft_table`, `grpo_update`),
which the service calls as traces arrive and whose results it stores. Randomised policies draw
from `rng_for(decision_id)`, so a recorded decision can be replayed to the same model from the
same state, in any process (the seed comes from SHA-256, not from `hash()`, which is salted per
process).

Per (query class, model) the state keeps an `Aggregate`: sums that a projection can maintain
incrementally (a late feedback is `minus` its old contribution, `plus` its new one), so no policy
ever needs to scan the traces themselves.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from habitus.routing.sizes import name_order

#: (query class, model)
ArmKey = tuple[str, str]


class NoModelAvailable(ValueError):
    """The request offers no model and names neither a default nor a fallback model."""


class UnknownPolicy(LookupError):
    """A policy name that is not in the registry; the message lists the registered names."""


@dataclass(frozen=True, slots=True)
class Choice:
    """A policy's answer: the model, why, the per-model numbers it compared (if any), and the
    probability the policy had of answering this model (1 for a deterministic policy).

    The propensity is what makes the recorded decisions usable for estimating another policy:
    an off-policy estimate weighs each logged outcome by the inverse of it."""

    model: str
    reason: str
    scores: Mapping[str, float] = field(default_factory=dict)
    propensity: float = 1.0


#: the composite's weights: the learned and sft policies score a model by
#: SUCCESS_WEIGHT · success rate + FEEDBACK_WEIGHT · mean feedback
SUCCESS_WEIGHT: Final = 0.6
FEEDBACK_WEIGHT: Final = 0.4
#: the mean feedback assumed for a model nobody has rated
NO_FEEDBACK: Final = 0.5


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Sums over the traces of one (query class, model).

    `successes` counts outcome "success", `outcomes_known` the traces with any outcome,
    `feedback_*` the traces with feedback, `reward_*` the rewards recorded for them.
    """

    count: int = 0
    successes: int = 0
    outcomes_known: int = 0
    feedback_sum: float = 0.0
    feedback_n: int = 0
    reward_sum: float = 0.0
    reward_n: int = 0

    @staticmethod
    def of(outcome: str | None, feedback: float | None = None,
           reward: float | None = None) -> Aggregate:
        """One trace's contribution."""
        return Aggregate(
            count=1,
            successes=int(outcome == "success"),
            outcomes_known=int(outcome is not None),
            feedback_sum=feedback if feedback is not None else 0.0,
            feedback_n=int(feedback is not None),
            reward_sum=reward if reward is not None else 0.0,
            reward_n=int(reward is not None),
        )

    def plus(self, other: Aggregate) -> Aggregate:
        return Aggregate(
            self.count + other.count, self.successes + other.successes,
            self.outcomes_known + other.outcomes_known, self.feedback_sum + other.feedback_sum,
            self.feedback_n + other.feedback_n, self.reward_sum + other.reward_sum,
            self.reward_n + other.reward_n,
        )

    def minus(self, other: Aggregate) -> Aggregate:
        return Aggregate(
            self.count - other.count, self.successes - other.successes,
            self.outcomes_known - other.outcomes_known, self.feedback_sum - other.feedback_sum,
            self.feedback_n - other.feedback_n, self.reward_sum - other.reward_sum,
            self.reward_n - other.reward_n,
        )

    @property
    def success_rate(self) -> float:
        """Successes over traces with an outcome, 0.0 when none has one (as the analyzer)."""
        return self.successes / self.outcomes_known if self.outcomes_known > 0 else 0.0

    @property
    def mean_feedback(self) -> float | None:
        return self.feedback_sum / self.feedback_n if self.feedback_n > 0 else None


def observe(aggregates: Mapping[ArmKey, Aggregate], query_class: str, model: str,
            outcome: str | None, feedback: float | None = None, reward: float | None = None
            ) -> dict[ArmKey, Aggregate]:
    """`aggregates` with one more trace of `model` on `query_class` (a new mapping)."""
    key = (query_class, model)
    updated = dict(aggregates)
    updated[key] = updated.get(key, Aggregate()).plus(Aggregate.of(outcome, feedback, reward))
    return updated


@dataclass(frozen=True, slots=True)
class RouterState:
    """A tenant's learned routing state; the empty state is a cold start for every policy.

    `learned` and `sft` are the class → model tables last computed by `learn` and `sft_table`
    (versioned by the service); `grpo` holds the GRPO weights per (class, model); `online` the
    online switch's choices. The bandit
    needs nothing of its own: its posteriors are the aggregates' reward sums.
    """

    aggregates: Mapping[ArmKey, Aggregate] = field(default_factory=dict)
    learned: Mapping[str, str] = field(default_factory=dict)
    sft: Mapping[str, str] = field(default_factory=dict)
    grpo: Mapping[ArmKey, float] = field(default_factory=dict)
    #: per class below the sample threshold, the model the conservative online switch chose
    #: (`learned.online_switch`); read only by a `learned` policy built with `online=True`
    online: Mapping[str, str] = field(default_factory=dict)


EMPTY_STATE: Final = RouterState()


def rng_for(decision_id: str) -> random.Random:
    """A generator seeded by the decision id alone: the same id draws the same numbers."""
    digest = hashlib.sha256(decision_id.encode("utf-8", "surrogatepass")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def certain(choice: Choice) -> dict[str, float]:
    """The distribution of a deterministic policy: its choice, with probability 1."""
    return {choice.model: 1.0}


def default_chain(models: Sequence[str], default_model: str | None,
                  fallback_model: str | None) -> Choice:
    """The default model if offered, then the fallback if offered, then the first offered by
    name (not by position: the same models in another order give the same answer).

    With no models offered, the default or the fallback as named (the caller may know a model
    the request did not list), else `NoModelAvailable`.
    """
    if not models:
        if default_model:
            return Choice(default_model, "no models offered: the default model")
        if fallback_model:
            return Choice(fallback_model, "no models offered: the fallback model")
        raise NoModelAvailable("no available_models and no default_model or fallback_model")
    if default_model and default_model in models:
        return Choice(default_model, "the default model")
    if fallback_model and fallback_model in models:
        return Choice(fallback_model, "the fallback model")
    named = "neither the default nor the fallback model is offered" if (
        default_model or fallback_model) else "no default or fallback model is named"
    return Choice(min(models, key=name_order), f"{named}: the first offered model by name")
