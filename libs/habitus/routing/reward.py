"""The reward of one routed request, in [0, 1]: what the bandit and GRPO policies learn from.

The heuristic part is the seed's `HeuristicRewardFunction`: a weighted sum of three terms, each
in [0, 1], clamped to [0, 1]:

- latency:    1 - latency_seconds / max_latency   (0 at `max_latency` = 30 s or slower)
- cost:       1 - cost_usd / max_cost             (0 at `max_cost` = $0.01 or dearer)
- efficiency: completion / (prompt + completion)  (the share of tokens that is answer; 0.5
  when no tokens were counted)

with weights latency 0.4, cost 0.3, efficiency 0.3. A term whose input is missing (`None`, NaN)
is a neutral 0.5: a trace without a cost is not free, nor infinitely dear. A negative input counts
as 0, so a clock skew cannot push a term above 1.

The heuristic only sees speed and price, so a fast wrong answer scores well. `reward` therefore
blends it with the request's quality signal when there is one:

    reward = (1 - FEEDBACK_WEIGHT) · heuristic + FEEDBACK_WEIGHT · quality,  FEEDBACK_WEIGHT = 0.5

where quality is the given feedback (clamped to [0, 1]), else 1.0 for the outcome "success" and
0.0 for "failure" or "error", and with neither the reward is the heuristic alone. Half and half
keeps the two on one scale: a perfect but slow answer (heuristic 0.3, feedback 1) scores 0.65,
above a fast useless one (heuristic 0.9, feedback 0) at 0.45, and the seed's vectors still hold
for traces that carry no feedback.

Pure: numbers in, a number out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

#: the share of the blended reward that is the quality signal (feedback or outcome)
FEEDBACK_WEIGHT: Final = 0.5
NEUTRAL: Final = 0.5
_FAILED_OUTCOMES: Final = frozenset({"failure", "error"})


def _clamp01(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def _known(value: float | None) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass(frozen=True, slots=True)
class HeuristicReward:
    """The seed's latency / cost / efficiency reward; see the module docstring for the terms."""

    weight_latency: float = 0.4
    weight_cost: float = 0.3
    weight_efficiency: float = 0.3
    max_latency: float = 30.0
    max_cost: float = 0.01

    def __post_init__(self) -> None:
        if not (self.max_latency > 0 and self.max_cost > 0):
            raise ValueError("max_latency and max_cost must be positive")
        weights = (self.weight_latency, self.weight_cost, self.weight_efficiency)
        if any(not math.isfinite(w) or w < 0 for w in weights):
            raise ValueError("reward weights must be finite and non-negative")

    def compute(self, latency_seconds: float | None = None, cost_usd: float | None = None,
                prompt_tokens: int | None = None, completion_tokens: int | None = None) -> float:
        latency = _known(latency_seconds)
        cost = _known(cost_usd)
        lat_term = NEUTRAL if latency is None else _clamp01(1.0 - max(latency, 0.0)
                                                            / self.max_latency)
        cost_term = NEUTRAL if cost is None else _clamp01(1.0 - max(cost, 0.0) / self.max_cost)
        prompt = max(int(prompt_tokens or 0), 0)
        completion = max(int(completion_tokens or 0), 0)
        total = prompt + completion
        eff_term = completion / total if total > 0 else NEUTRAL
        return _clamp01(self.weight_latency * lat_term + self.weight_cost * cost_term
                        + self.weight_efficiency * eff_term)


DEFAULT_REWARD: Final = HeuristicReward()


def quality(feedback: float | None, outcome: str | None) -> float | None:
    """The request's quality signal: feedback if given, else what its outcome says, else None."""
    given = _known(feedback)
    if given is not None:
        return _clamp01(given)
    if outcome == "success":
        return 1.0
    if outcome in _FAILED_OUTCOMES:
        return 0.0
    return None


def blend(heuristic: float, signal: float | None) -> float:
    """The documented blend: the heuristic alone without a signal, else half and half."""
    if signal is None:
        return _clamp01(heuristic)
    return _clamp01((1.0 - FEEDBACK_WEIGHT) * heuristic + FEEDBACK_WEIGHT * _clamp01(signal))


def reward(latency_seconds: float | None = None, cost_usd: float | None = None,
           prompt_tokens: int | None = None, completion_tokens: int | None = None,
           feedback: float | None = None, outcome: str | None = None,
           function: HeuristicReward = DEFAULT_REWARD) -> float:
    """The reward of one trace: `function`'s heuristic blended with its quality signal."""
    heuristic = function.compute(latency_seconds, cost_usd, prompt_tokens, completion_tokens)
    return blend(heuristic, quality(feedback, outcome))
