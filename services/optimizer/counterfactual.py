"""What a configuration would have done, estimated from the decisions that were recorded.

Every routing decision is recorded with its propensity (the chance the policy had of choosing
the model it chose) and joined to the outcome of the trace that followed it. For another
configuration π, each objective's per-query mean is estimated doubly robustly:

    V̂ = 1/N Σ_i [ Σ_m π(m | x_i) q̂(c_i, m)  +  π(a_i | x_i) / p_i · (r_i - q̂(c_i, a_i)) ]

where a_i is the model chosen, p_i its propensity, r_i the metric observed, c_i the query's
class and q̂(c, m) the mean of the metric over the recorded traces of model m on class c (the
direct model). The first term is the direct model's guess of what π would have got; the second
corrects it with the outcomes π agrees with, weighted by how unlikely they were. It is unbiased
when either the propensities or q̂ are right, and with deterministic routing (propensities 1)
it is the plain mean over the decisions π agrees with plus q̂ elsewhere.

The interval is the normal one, V̂ ± z · s / √N, s the sample deviation of the per-query terms
(95 % by default). `support` counts the decisions whose chosen model π could also have chosen;
below `min_support`, or when π would use a model the log never saw on a class π sends to it,
nothing is claimed (`refused` says why): an estimate resting on nothing is worse than none.

It must not read the log again per trial. `EvaluationLog` is built once per run: the decisions
are grouped by everything any policy's choice depends on (the query's class and signals, length
band, urgency band, the models offered, the default and fallback model), and per group and
chosen model the sums the estimate needs (n, Σ1/p, Σr/p, Σ1/p², Σr/p², Σr²/p²) are kept, so one
trial costs one policy distribution per group, whatever the number of traces.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from habitus.contract.configuration import QueryClass
from habitus.routing.configured import Routing, distribution
from habitus.routing.context import LONG_CHARS, SHORT_CHARS, RoutingContext
from habitus.routing.policies import (
    Aggregate,
    RouterState,
    grpo_update,
    learn,
    online_switch,
    sft_table,
)
from habitus.routing.policies.grpo import group_rewards
from habitus.routing.policies.heuristic import URGENT
from habitus.routing.sizes import resolve

METRIC_NAMES: Final = ("reward", "accuracy", "latency_seconds", "cost_usd", "tokens",
                       "energy_joules")
#: the quantile of a two-sided 95 % normal interval
Z95: Final = 1.959963984540054
_ACCURATE: Final = "success"
_INACCURATE: Final = frozenset({"failure", "partial", "error"})


@dataclass(frozen=True, slots=True)
class Sample:
    """One recorded decision joined to its trace's outcome."""

    query_class: QueryClass
    has_code: bool
    has_math: bool
    has_reasoning: bool
    query_length: int
    urgency: float
    offered: tuple[str, ...]
    default_model: str | None
    fallback_model: str | None
    model: str
    propensity: float
    outcome: str | None = None
    feedback: float | None = None
    reward: float | None = None
    latency_seconds: float | None = None
    cost_usd: float | None = None
    tokens: float | None = None
    energy_joules: float | None = None

    def metric(self, name: str) -> float | None:
        if name == "accuracy":
            if self.outcome == _ACCURATE:
                return 1.0
            return 0.0 if self.outcome in _INACCURATE else None
        value: float | None = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True)
class Group:
    """Decisions any policy would treat alike (see the module docstring)."""

    query_class: str
    has_code: bool
    has_math: bool
    has_reasoning: bool
    length_band: int  # 0: short, 1: middle, 2: long
    urgent: bool
    offered: tuple[str, ...]
    default_model: str | None
    fallback_model: str | None

    @staticmethod
    def of(s: Sample) -> Group:
        band = 0 if s.query_length < SHORT_CHARS else (2 if s.query_length > LONG_CHARS else 1)
        return Group(s.query_class, s.has_code, s.has_math, s.has_reasoning, band,
                     s.urgency > URGENT, s.offered, s.default_model, s.fallback_model)

    def context(self) -> RoutingContext:
        """A context with exactly this group's signals (what the policies read)."""
        length = (SHORT_CHARS - 1, (SHORT_CHARS + LONG_CHARS) // 2, LONG_CHARS + 1)[
            self.length_band]
        return RoutingContext(query="", query_length=length, has_code=self.has_code,
                              has_math=self.has_math, has_reasoning=self.has_reasoning,
                              urgency=1.0 if self.urgent else 0.5)


@dataclass(slots=True)
class _Sums:
    """Per (group, chosen model, metric): the weighted sums of the estimate."""

    n: int = 0
    inv: float = 0.0  # Σ 1/p
    r_inv: float = 0.0  # Σ r/p
    inv2: float = 0.0  # Σ 1/p²
    r_inv2: float = 0.0  # Σ r/p²
    r2_inv2: float = 0.0  # Σ r²/p²

    def add(self, r: float, p: float) -> None:
        self.n += 1
        self.inv += 1 / p
        self.r_inv += r / p
        self.inv2 += 1 / (p * p)
        self.r_inv2 += r / (p * p)
        self.r2_inv2 += r * r / (p * p)


@dataclass(frozen=True, slots=True)
class Estimate:
    metrics: dict[str, float | None]
    intervals: dict[str, list[float]]
    support: int
    refused: str | None = None


@dataclass
class EvaluationLog:
    """A tenant's recorded decisions, summarised once for any number of estimates."""

    #: (group, chosen model) -> metric -> sums
    sums: dict[tuple[Group, str], dict[str, _Sums]] = field(default_factory=dict)
    #: (group, chosen model) -> decisions (with any outcome)
    chosen: dict[tuple[Group, str], int] = field(default_factory=dict)
    #: metric -> (class, model) -> (sum, n): the direct model
    direct: dict[str, dict[tuple[str, str], tuple[float, int]]] = field(default_factory=dict)
    #: the learned state the table policies and the bandit would read, from every trace
    state: RouterState = field(default_factory=RouterState)
    samples: int = 0

    @classmethod
    def build(cls, samples: Iterable[Sample], aggregates: Mapping[tuple[str, str], Aggregate]
              | None = None, grpo_records: Sequence[tuple[str, str, float]] = (),
              min_samples: int = 5,
              observations: Sequence[tuple[str, str, str | None, float | None]] | None = None
              ) -> EvaluationLog:
        """The log of `samples`; `aggregates`, `grpo_records` (class, model, reward in order)
        and `observations` (class, model, outcome, feedback in order) are the tenant's whole
        trace history, which the learned policies' state is computed from as the router would
        (from the samples when not given)."""
        log = cls()
        direct: dict[str, dict[tuple[str, str], list[float]]] = {
            m: defaultdict(lambda: [0.0, 0]) for m in METRIC_NAMES}
        own: dict[tuple[str, str], Aggregate] = {}
        records: list[tuple[str, str, float]] = []
        seen: list[tuple[str, str, str | None, float | None]] = []
        for s in samples:
            log.samples += 1
            group = Group.of(s)
            key = (group, s.model)
            log.chosen[key] = log.chosen.get(key, 0) + 1
            per_metric = log.sums.setdefault(key, {})
            for name in METRIC_NAMES:
                value = s.metric(name)
                if value is None or not math.isfinite(value):
                    continue
                per_metric.setdefault(name, _Sums()).add(value, s.propensity)
                cell = direct[name][(s.query_class, s.model)]
                cell[0] += value
                cell[1] += 1
            own[(s.query_class, s.model)] = own.get((s.query_class, s.model), Aggregate()).plus(
                Aggregate.of(s.outcome, s.feedback, s.reward))
            if s.reward is not None:
                records.append((s.query_class, s.model, s.reward))
            seen.append((s.query_class, s.model, s.outcome, s.feedback))
        log.direct = {m: {k: (v[0], int(v[1])) for k, v in cells.items()}
                      for m, cells in direct.items()}
        agg = dict(aggregates) if aggregates is not None else own
        weights: dict[tuple[str, str], float] = {}
        for cls_name, group_ in group_rewards(grpo_records if aggregates is not None
                                              else records)[0]:
            weights = grpo_update(weights, cls_name, group_)
        log.state = RouterState(
            aggregates=agg, learned=learn(agg, min_samples), sft=sft_table(agg, min_samples),
            grpo=weights, online=online_switch(
                observations if observations is not None else seen, min_samples))
        return log

    def q(self, metric: str, query_class: str, model: str) -> float | None:
        cell = self.direct.get(metric, {}).get((query_class, model))
        return None if cell is None or cell[1] == 0 else cell[0] / cell[1]


def _policies(log: EvaluationLog, routing: Routing) -> dict[Group, dict[str, float]]:
    out: dict[Group, dict[str, float]] = {}
    for group, _ in log.chosen:
        if group not in out:
            _, sizes = resolve(list(group.offered))
            out[group] = distribution(routing, group.context(), group.offered, sizes,
                                      group.default_model, group.fallback_model, log.state)
    return out


def estimate(log: EvaluationLog, routing: Routing, metrics: Sequence[str], *,
             min_support: int = 20, z: float = Z95) -> Estimate:
    """Each metric's doubly robust estimate for `routing` (module docstring)."""
    if log.samples == 0:
        return Estimate(dict.fromkeys(metrics), {}, 0,
                        "no recorded decision is joined to a trace yet: report traces with "
                        "the decision_id router.select_model answered")
    targets = _policies(log, routing)
    support = sum(n for (group, model), n in log.chosen.items()
                  if targets[group].get(model, 0.0) > 0)
    if support < min_support:
        return Estimate(dict.fromkeys(metrics), {}, support,
                        f"only {support} recorded decisions agree with this configuration, "
                        f"{min_support} needed")
    values: dict[str, float | None] = {}
    intervals: dict[str, list[float]] = {}
    for metric in metrics:
        result = _one(log, targets, metric, z)
        if isinstance(result, str):
            return Estimate(dict.fromkeys(metrics), {}, support, result)
        if result is None:
            values[metric] = None
            continue
        mean, low, high = result
        values[metric] = mean
        intervals[metric] = [low, high]
    return Estimate(values, intervals, support)


def _one(log: EvaluationLog, targets: Mapping[Group, Mapping[str, float]], metric: str,
         z: float) -> tuple[float, float, float] | str | None:
    """(mean, low, high) of one metric; None when no trace reports it; a string: why the log
    cannot support it."""
    total = total_sq = 0.0
    n = 0
    direct_of: dict[Group, float] = {}
    for (group, chosen), per_metric in log.sums.items():
        sums = per_metric.get(metric)
        if sums is None:
            continue
        policy = targets[group]
        if group not in direct_of:
            d = 0.0
            for model, prob in policy.items():
                if prob <= 0:
                    continue
                q = log.q(metric, group.query_class, model)
                if q is None:
                    return (f"no recorded {group.query_class} trace of {model} reports "
                            f"{metric}: the log cannot say what it would do")
                d += prob * q
            direct_of[group] = d
        d = direct_of[group]
        w = policy.get(chosen, 0.0)
        q_a = log.q(metric, group.query_class, chosen) or 0.0
        correction = sums.r_inv - q_a * sums.inv
        total += sums.n * d + w * correction
        total_sq += (sums.n * d * d + 2 * d * w * correction
                     + w * w * (sums.r2_inv2 - 2 * q_a * sums.r_inv2 + q_a * q_a * sums.inv2))
        n += sums.n
    if n == 0:
        return None
    mean = total / n
    variance = max(total_sq / n - mean * mean, 0.0) * (n / (n - 1) if n > 1 else 0.0)
    half = z * math.sqrt(variance / n)
    return mean, mean - half, mean + half
