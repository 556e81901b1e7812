"""The propose, evaluate, analyse loop of one run, free of I/O.

Each step: if the run has had `max_trials` trials, or `patience` trials in a row have not
replaced its best, it ends; otherwise the next configuration is proposed (every fifth trial a
merge of the frontier's first three, when the frontier has two or more, else the run's own
proposer), evaluated over the tenant's current configuration, and recorded with the frontier
and best trial it leaves. The worker gives it the trials already recorded, so a run resumed on
another replica goes on where it stood, and publishes what each step returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from habitus.contract.optimize import Objective, RunParams
from services.optimizer.counterfactual import Estimate
from services.optimizer.frontier import Progress, Scored, progress
from services.optimizer.space import Params, key_of

#: every this many trials the frontier's best are merged (when it has two or more)
MERGE_EVERY: Final = 5
MERGE_FROM: Final = 3


@dataclass(frozen=True, slots=True)
class Proposal:
    params: Params
    proposer: str
    reasoning: str | None = None
    parse_failure: bool = False


@dataclass(frozen=True, slots=True)
class TrialRecord:
    """A trial as the run keeps it."""

    trial_id: str
    index: int
    params: Mapping[str, Any]
    proposer: str
    metrics: Mapping[str, float | None]
    intervals: Mapping[str, list[float]] = field(default_factory=dict)
    support: int = 0
    refused: str | None = None
    reasoning: str | None = None
    parse_failure: bool = False

    @property
    def scored(self) -> Scored:
        return Scored(self.trial_id, self.index, self.metrics)


class Proposer(Protocol):
    async def propose(self, index: int, history: Sequence[TrialRecord],
                      standing: Progress) -> Proposal | None:
        """The configuration of trial `index`, or None when the proposer has nothing new."""
        ...

    async def merge(self, index: int, history: Sequence[TrialRecord], standing: Progress,
                    best: Sequence[TrialRecord]) -> Proposal | None:
        """A configuration combining `best` (the frontier's first, best first)."""
        ...


class Evaluator(Protocol):
    async def evaluate(self, params: Mapping[str, Any]) -> Estimate:
        """Each objective's estimate for the tenant's configuration with `params` applied."""
        ...


def trial_id(run_id: str, index: int) -> str:
    return f"{run_id}-t{index}"


def standing(history: Sequence[TrialRecord], definition: RunParams) -> Progress:
    return progress([t.scored for t in history], definition.objectives, definition.best_by)


@dataclass(frozen=True, slots=True)
class Ended:
    """Why the run ends: all its trials, its patience, or nothing new to propose."""

    stopped_early: bool
    reason: str


def ending(history: Sequence[TrialRecord], definition: RunParams) -> Ended | None:
    if len(history) >= definition.max_trials:
        return Ended(False, f"{definition.max_trials} trials")
    if history and standing(history, definition).exhausted(definition.patience):
        return Ended(True, f"{definition.patience} trials without a better best")
    return None


async def next_proposal(proposer: Proposer, history: Sequence[TrialRecord],
                        definition: RunParams) -> Proposal | None:
    index = len(history)
    now = standing(history, definition)
    tried = {key_of(t.params) for t in history}
    if index and index % MERGE_EVERY == 0 and len(now.frontier) >= 2:
        by_id = {t.trial_id: t for t in history}
        best = _best_first([by_id[s.trial_id] for s in now.frontier], now)[:MERGE_FROM]
        merged = await proposer.merge(index, history, now, best)
        if merged is not None and key_of(merged.params) not in tried:
            return merged
    return await proposer.propose(index, history, now)


def _best_first(trials: Sequence[TrialRecord], now: Progress) -> list[TrialRecord]:
    best = now.best.trial_id if now.best is not None else None
    return sorted(trials, key=lambda t: (t.trial_id != best, t.index))


async def step(run_id: str, definition: RunParams, history: Sequence[TrialRecord],
               proposer: Proposer, evaluator: Evaluator) -> TrialRecord | Ended:
    """One step of the run: the next trial, or why the run ends."""
    done = ending(history, definition)
    if done is not None:
        return done
    proposal = await next_proposal(proposer, history, definition)
    if proposal is None:
        return Ended(False, "no configuration left to try")
    estimate = await evaluator.evaluate(proposal.params)
    index = len(history)
    return TrialRecord(
        trial_id=trial_id(run_id, index), index=index, params=proposal.params,
        proposer=proposal.proposer, metrics=estimate.metrics, intervals=estimate.intervals,
        support=estimate.support, refused=estimate.refused, reasoning=proposal.reasoning,
        parse_failure=proposal.parse_failure)


def objectives_of(definition: RunParams) -> list[str]:
    return [o.metric for o in definition.objectives]


def frontier_ids(history: Sequence[TrialRecord], objectives: Sequence[Objective],
                 best_by: str = "weighted") -> tuple[list[str], str | None]:
    """The frontier's trial ids and the best trial's id after `history`."""
    now = progress([t.scored for t in history], objectives,
                   "accuracy" if best_by == "accuracy" else "weighted")
    return ([s.trial_id for s in now.frontier],
            now.best.trial_id if now.best is not None else None)
