"""Works on the running runs: one replica per run, resumable anywhere.

Each optimizer process looks for running runs (woken at once by `optimize.run`, else every
`poll_seconds`) and takes up to `concurrent_runs` of them, each under a Postgres advisory lock
named for the run, so a run is worked on by one replica at a time and taken over when that
replica dies (its lock goes with its connection). Working on a run: read its definition and the
trials already recorded, read the evaluation log once, then step the engine, publishing each
trial as `TrialEvaluated` and waiting until it is folded before the next (the folded trials are
the run's memory, so a replica taking over goes on from exactly there). Event ids are derived
from the run and the trial's index, so a trial published twice across a takeover is one.

A run ends with `OptimizationRunCompleted`; a spent LLM budget stops it
(`OptimizationRunStopped`); an evaluator or proposer that fails for good fails it
(`OptimizationRunFailed`). An outage of the bus or the database only pauses it: the lock is
released and the run is taken up again later, by whichever replica gets there first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import nats.errors
import psycopg

from habitus.bus.rpc import RpcError
from habitus.contract.optimize import RunParams
from habitus.db.leader import LeaderLock
from habitus.events import CATALOG
from habitus.events.domain import (
    OptimizationRunCompleted,
    OptimizationRunFailed,
    OptimizationRunStopped,
    TrialEvaluated,
)
from habitus.events.envelope import Payload
from habitus.ids import TENANT_WIDE, derived_event_id
from habitus.llm import BudgetExhausted, LlmClient, LlmError
from habitus.service.context import ServiceContext
from habitus.tasks import stop_task
from services.optimizer import metrics, store
from services.optimizer.engine import Ended, Evaluator, TrialRecord, frontier_ids, step
from services.optimizer.evaluation import evaluator_for
from services.optimizer.proposers import proposer_for
from services.optimizer.settings import OptimizerSettings

log = logging.getLogger(__name__)
PRODUCER = "optimizer.worker"
#: failures that say nothing about the run (the bus or the database is away): retry later
_OUTAGES = (psycopg.OperationalError, nats.errors.Error, OSError, asyncio.TimeoutError)


def definition_of(row: dict[str, Any]) -> RunParams:
    """The run's parameters from its folded `OptimizationRunStarted`."""
    d = row["definition"]
    return RunParams.model_validate({k: d.get(k) for k in (
        "space", "objectives", "proposer", "evaluator", "max_trials", "patience", "seed",
        "best_by", "replay", "since", "until") if d.get(k) is not None})


def record_of(row: dict[str, Any]) -> TrialRecord:
    return TrialRecord(
        trial_id=row["trial_id"], index=row["idx"], params=row["params"],
        proposer=row["proposer"], metrics=row["metrics"], intervals=row["intervals"],
        support=row["support"], refused=row["refused"], reasoning=row["reasoning"],
        parse_failure=row["parse_failure"])


class Worker:
    def __init__(self, ctx: ServiceContext, settings: OptimizerSettings,
                 llm: LlmClient | None):
        self._ctx = ctx
        self._settings = settings
        self._llm = llm
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._active: dict[tuple[str, str], asyncio.Task[None]] = {}

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="optimizer.worker")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._active.values()) if t is not None]
        await asyncio.gather(*(stop_task(task) for task in tasks))
        if self._llm is not None:
            await self._llm.aclose()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.poll_seconds)
            self._wake.clear()
            try:
                await self._claim()
            except _OUTAGES as exc:
                log.warning("optimizer could not look for runs", extra={"error": repr(exc)})

    async def _claim(self) -> None:
        self._active = {k: t for k, t in self._active.items() if not t.done()}
        if len(self._active) >= self._settings.concurrent_runs:
            return
        async with self._ctx.pool.connection() as conn, conn.cursor() as cur:
            waiting = await store.running(cur)
        for key in waiting:
            if len(self._active) >= self._settings.concurrent_runs:
                break
            if key in self._active:
                continue
            lock = LeaderLock(str(self._ctx.pool.conninfo), f"optimize.run:{key[0]}:{key[1]}")
            if not await lock.try_acquire():
                continue  # another replica works on it
            self._active[key] = asyncio.create_task(self._hold(key, lock),
                                                    name=f"optimizer.run.{key[1]}")

    async def _hold(self, key: tuple[str, str], lock: LeaderLock) -> None:
        try:
            await self.work(*key)
        except (*_OUTAGES, RpcError) as exc:
            log.warning("optimizer run paused by an outage; it is taken up again later",
                        extra={"tenant_id": key[0], "run_id": key[1], "error": repr(exc)})
        finally:
            await lock.release()
            self._wake.set()

    async def work(self, tenant_id: str, run_id: str) -> None:
        """Step the run until it ends (or is stopped by someone else)."""
        async with self._ctx.pool.connection() as conn, conn.cursor() as cur:
            row = await store.get_run(cur, tenant_id, run_id)
            done = await store.trials(cur, tenant_id, run_id)
        if row is None or row["status"] != "running":
            return
        definition = definition_of(row)
        history = [record_of(t) for t in done]
        try:
            evaluator = await evaluator_for(self._ctx, self._settings, self._llm, tenant_id,
                                            definition, row["definition"].get("baseline") or {})
            proposer = proposer_for(definition, self._llm, tenant_id)
            while True:
                if not await self._still_running(tenant_id, run_id):
                    return
                result = await self._step(run_id, definition, history, proposer, evaluator)
                if isinstance(result, Ended):
                    await self._completed(tenant_id, run_id, definition, history, result)
                    return
                await self._trial(tenant_id, run_id, definition, history, result)
                history.append(result)
        except BudgetExhausted as exc:
            await self._end(tenant_id, run_id, "stop", OptimizationRunStopped(
                run_id=run_id, reason=f"the tenant's daily LLM budget is spent ({exc})"))
        except (*_OUTAGES, RpcError):
            raise
        except (LlmError, ValueError, LookupError) as exc:
            log.warning("optimizer run failed", extra={"tenant_id": tenant_id,
                                                       "run_id": run_id, "error": repr(exc)})
            await self._end(tenant_id, run_id, "fail", OptimizationRunFailed(
                run_id=run_id, error=f"{type(exc).__name__}: {exc}"[:4000]))

    async def _step(self, run_id: str, definition: RunParams, history: list[TrialRecord],
                    proposer: Any, evaluator: Evaluator) -> TrialRecord | Ended:
        started = time.monotonic()
        result = await step(run_id, definition, history, proposer, evaluator)
        if isinstance(result, TrialRecord):
            metrics.EVALUATION_SECONDS.labels(definition.evaluator).observe(
                time.monotonic() - started)
            outcome = ("parse_failure" if result.parse_failure else
                       "refused" if result.refused else "estimated")
            metrics.TRIALS.labels(result.proposer, outcome).inc()
        return result

    async def _still_running(self, tenant_id: str, run_id: str) -> bool:
        async with self._ctx.pool.connection() as conn, conn.cursor() as cur:
            row = await store.get_run(cur, tenant_id, run_id)
        return row is not None and row["status"] == "running"

    async def _trial(self, tenant_id: str, run_id: str, definition: RunParams,
                     history: list[TrialRecord], trial: TrialRecord) -> None:
        frontier, best = frontier_ids([*history, trial], definition.objectives,
                                      definition.best_by)
        await self._publish(tenant_id, run_id, f"trial:{trial.index}", TrialEvaluated(
            run_id=run_id, trial_id=trial.trial_id, index=trial.index, params=dict(trial.params),
            proposer=trial.proposer, reasoning=trial.reasoning,
            parse_failure=trial.parse_failure, metrics=dict(trial.metrics),
            intervals={k: list(v) for k, v in trial.intervals.items()},
            support=trial.support, refused=trial.refused, frontier=frontier,
            best_trial_id=best))

    async def _completed(self, tenant_id: str, run_id: str, definition: RunParams,
                         history: list[TrialRecord], ended: Ended) -> None:
        frontier, best = frontier_ids(history, definition.objectives, definition.best_by)
        await self._end(tenant_id, run_id, "end", OptimizationRunCompleted(
            run_id=run_id, trials=len(history), best_trial_id=best, frontier=frontier,
            stopped_early=ended.stopped_early))

    async def _end(self, tenant_id: str, run_id: str, what: str, payload: Payload) -> None:
        await self._publish(tenant_id, run_id, what, payload)
        status = {"end": "completed", "stop": "stopped", "fail": "failed"}[what]
        metrics.RUNS.labels(status).inc()

    async def _publish(self, tenant_id: str, run_id: str, what: str, payload: Payload) -> None:
        event = CATALOG.new(payload, tenant_id=tenant_id, user_id=TENANT_WIDE,
                            producer=PRODUCER,
                            event_id=derived_event_id("optimize", tenant_id, run_id, what))
        await self._ctx.commands.run(event)
