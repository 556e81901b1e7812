"""The optimisation loop's pure parts: the Pareto frontier and early stopping (the reference's
vectors), the best trial, merges every fifth trial, and the engine stepping a run to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from habitus.contract.optimize import Objective, RunParams
from services.optimizer.counterfactual import Estimate
from services.optimizer.engine import (
    Ended,
    Proposal,
    TrialRecord,
    frontier_ids,
    next_proposal,
    step,
)
from services.optimizer.frontier import Progress, Scored, pareto_frontier, progress
from services.optimizer.proposers import RandomProposer

ACCURACY = Objective(metric="accuracy", direction="maximize")
LATENCY = Objective(metric="latency_seconds", direction="minimize")
COST = Objective(metric="cost_usd", direction="minimize")


def scored(trial_id: str, **metrics: float | None) -> Scored:
    return Scored(trial_id, int(trial_id[1:]) if trial_id[1:].isdigit() else 0, metrics)


def ids(trials: Sequence[Scored]) -> list[str]:
    return [t.trial_id for t in trials]


# ------------------------------------------------------------------ the reference's vectors

def test_a_trial_better_on_everything_is_the_whole_frontier() -> None:
    a = scored("A", accuracy=0.9, latency_seconds=1.0, cost_usd=0.05)
    b = scored("B", accuracy=0.7, latency_seconds=2.0, cost_usd=0.1)
    assert ids(pareto_frontier([a, b], [ACCURACY, LATENCY, COST])) == ["A"]
    assert ids(pareto_frontier([b, a], [ACCURACY, LATENCY, COST])) == ["A"]


def test_a_trade_off_keeps_both_in_input_order() -> None:
    a = scored("A", accuracy=0.9, latency_seconds=2.0)
    b = scored("B", accuracy=0.7, latency_seconds=0.5)
    assert ids(pareto_frontier([a, b], [ACCURACY, LATENCY])) == ["A", "B"]
    assert ids(pareto_frontier([b, a], [ACCURACY, LATENCY])) == ["B", "A"]


def test_identical_trials_both_stay() -> None:
    a = scored("A", accuracy=0.8, latency_seconds=1.0)
    b = scored("B", accuracy=0.8, latency_seconds=1.0)
    assert ids(pareto_frontier([a, b], [ACCURACY, LATENCY])) == ["A", "B"]


def test_intelligence_per_watt_against_energy() -> None:
    # the frontier knows nothing of metric names: a maximised and a minimised one
    ipw = Objective.model_construct(metric="ipw", direction="maximize", weight=1.0)
    energy = Objective(metric="energy_joules", direction="minimize")
    trials = [scored("A", ipw=120, energy_joules=50), scored("B", ipw=40, energy_joules=10),
              scored("C", ipw=30, energy_joules=55)]
    assert ids(pareto_frontier(trials, [ipw, energy])) == ["A", "B"]


def test_empty_trials_or_objectives_are_returned_as_they_are() -> None:
    a = scored("A", accuracy=0.1)
    assert pareto_frontier([], [ACCURACY]) == []
    assert pareto_frontier([a], []) == [a]


def test_a_trial_without_an_estimate_is_not_on_the_frontier() -> None:
    a = scored("A", accuracy=0.5, latency_seconds=1.0)
    b = scored("B", accuracy=None, latency_seconds=0.1)
    assert ids(pareto_frontier([a, b], [ACCURACY, LATENCY])) == ["A"]


def _definition(**overrides: Any) -> RunParams:
    return RunParams.model_validate({
        "space": {"search": [{"name": "routing.policy", "type": "categorical",
                              "values": ["heuristic", "learned", "bandit", "grpo", "sft"]},
                             {"name": "generation.temperature", "type": "continuous",
                              "low": 0, "high": 1}]},
        "objectives": [{"metric": "accuracy", "direction": "maximize"}],
        "max_trials": 5, "patience": 3, "seed": 7, "best_by": "accuracy", **overrides})


class _Scripted:
    """An evaluator answering accuracies in turn."""

    def __init__(self, accuracies: Sequence[float]):
        self._values = list(accuracies)
        self.calls = 0

    async def evaluate(self, params: Mapping[str, Any]) -> Estimate:
        value = self._values[self.calls]
        self.calls += 1
        return Estimate({"accuracy": value}, {"accuracy": [value, value]}, 10)


async def _run(definition: RunParams, evaluator: _Scripted) -> tuple[list[TrialRecord], Ended]:
    proposer = RandomProposer(definition)
    history: list[TrialRecord] = []
    while True:
        result = await step("r1", definition, history, proposer, evaluator)
        if isinstance(result, Ended):
            return history, result
        history.append(result)


def test_early_stopping_after_patience_trials_without_a_better_one() -> None:
    history, ended = asyncio.run(_run(_definition(), _Scripted([0.9, 0.5, 0.5, 0.5, 0.5])))
    assert len(history) == 4 and ended.stopped_early
    assert frontier_ids(history, [ACCURACY], "accuracy")[1] == "r1-t0"


def test_a_run_that_keeps_improving_runs_every_trial() -> None:
    history, ended = asyncio.run(_run(_definition(), _Scripted([0.1, 0.2, 0.3, 0.4, 0.5])))
    assert len(history) == 5 and not ended.stopped_early
    assert frontier_ids(history, [ACCURACY], "accuracy")[1] == "r1-t4"


def test_progress_counts_trials_since_the_best() -> None:
    trials = [scored("t0", accuracy=0.5), scored("t1", accuracy=0.7),
              scored("t2", accuracy=0.7), scored("t3", accuracy=None)]
    now = progress(trials, [ACCURACY], "accuracy")
    assert now.best is not None and now.best.trial_id == "t1"  # a tie keeps the earlier
    assert now.since_best == 2 and now.exhausted(2) and not now.exhausted(3)


def test_weighted_best_trades_objectives_by_their_weights() -> None:
    reward = Objective(metric="reward", direction="maximize", weight=1)
    cost = Objective(metric="cost_usd", direction="minimize", weight=3)
    trials = [scored("t0", reward=0.60, cost_usd=0.010),
              scored("t1", reward=0.66, cost_usd=0.012),   # +10 % reward, +20 % cost
              scored("t2", reward=0.57, cost_usd=0.008)]   # -5 % reward, -20 % cost
    assert progress(trials, [reward, cost]).best == trials[2]
    cheap = Objective(metric="cost_usd", direction="minimize", weight=0.1)
    assert progress(trials, [reward, cheap]).best == trials[1]


def test_accuracy_alone_ignores_the_other_objectives() -> None:
    trials = [scored("t0", accuracy=0.8, latency_seconds=9.0),
              scored("t1", accuracy=0.7, latency_seconds=0.1)]
    assert progress(trials, [ACCURACY, LATENCY], "accuracy").best == trials[0]
    assert progress(trials, [ACCURACY, LATENCY], "weighted").best == trials[1]


# ------------------------------------------------------------------ merges

class _Recording(RandomProposer):
    def __init__(self, definition: RunParams):
        super().__init__(definition)
        self.merged: list[list[str]] = []

    async def merge(self, index: int, history: Sequence[TrialRecord], standing: Progress,
                    best: Sequence[TrialRecord]) -> Proposal | None:
        self.merged.append([t.trial_id for t in best])
        return await super().merge(index, history, standing, best)


def _trial(index: int, params: dict[str, Any], **metrics: float) -> TrialRecord:
    return TrialRecord(f"r-t{index}", index, params, "random", metrics)


def test_every_fifth_trial_merges_the_frontier_best_first() -> None:
    definition = _definition(objectives=[{"metric": "accuracy", "direction": "maximize"},
                                         {"metric": "latency_seconds", "direction": "minimize"}],
                             best_by="weighted", max_trials=20)
    history = [
        _trial(0, {"routing.policy": "heuristic", "generation.temperature": 0.1},
               accuracy=0.6, latency_seconds=0.3),
        _trial(1, {"routing.policy": "heuristic", "generation.temperature": 0.2},
               accuracy=0.9, latency_seconds=1.4),
        _trial(2, {"routing.policy": "learned", "generation.temperature": 0.5},
               accuracy=0.85, latency_seconds=0.35),
        _trial(3, {"routing.policy": "bandit", "generation.temperature": 0.9},
               accuracy=0.2, latency_seconds=3.0),
        _trial(4, {"routing.policy": "grpo", "generation.temperature": 0.3},
               accuracy=0.5, latency_seconds=2.0),
    ]
    proposer = _Recording(definition)
    proposal = asyncio.run(next_proposal(proposer, history, definition))
    # t3 and t4 are dominated; the best by the weighted score (t2) first, then in order
    assert proposer.merged == [["r-t2", "r-t0", "r-t1"]]
    assert proposal is not None and proposal.proposer == "merge"
    # heuristic is held by two of the three; the temperature ties, so the best trial's stands
    assert proposal.params == {"routing.policy": "heuristic", "generation.temperature": 0.5}
    # not at trial 4, nor with a frontier of one
    assert asyncio.run(next_proposal(proposer, history[:4], definition)).proposer == "random"
    assert len(proposer.merged) == 1


@pytest.mark.parametrize("patience", [1, 2])
def test_patience_counts_refused_trials_as_no_better(patience: int) -> None:
    definition = _definition(patience=patience, max_trials=10)
    trials = [scored("t0", accuracy=0.5), scored("t1", accuracy=None)]
    assert progress(trials, definition.objectives, "accuracy").exhausted(1)
