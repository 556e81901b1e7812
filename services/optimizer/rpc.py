"""`optimize.*` for the caller's tenant.

Starting, stopping, applying and undoing are commands: each publishes its event (on the
tenant's `_tenant` subject) and answers once the views that read it applied it, so the run's
row exists when `optimize.run` answers and routing follows a configuration when
`optimize.apply` answers. Configuration changes of one tenant are serialised by an advisory
lock, so two applies at once get consecutive versions instead of one overwriting the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract import optimize as c
from habitus.contract.configuration import ConfigurationError, validate_configuration
from habitus.contract.rpc import METHODS
from habitus.db.leader import lock_key
from habitus.events.domain import (
    ConfigurationApplied,
    OptimizationRunStarted,
    OptimizationRunStopped,
)
from habitus.ids import TENANT_WIDE, new_event_id
from habitus.llm import BudgetExhausted, LlmClient, LlmError
from habitus.service.context import ServiceContext
from services.optimizer import evaluation, store
from services.optimizer.engine import frontier_ids, objectives_of
from services.optimizer.settings import OptimizerSettings
from services.optimizer.worker import definition_of, record_of

PRODUCER = "optimizer.rpc"


def new_run_id() -> str:
    """Time-ordered, short, and a valid `OptimizationId`."""
    return "r" + new_event_id().replace("-", "")[:23]


def undone(history: list[dict[str, Any]], run_id: str, trial_id: str
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the version applying the trial, the settings an undo of it leaves), from the tenant's
    configuration history (oldest first). The undo restores what that version replaced, for
    the settings it changed and that no later version changed again. `LookupError` when the
    trial is not applied (never, or undone already)."""
    undone_versions = {h["undoes"] for h in history if h["undoes"] is not None}
    applied = [h for h in history if h["run_id"] == run_id and h["trial_id"] == trial_id
               and h["undoes"] is None]
    live = [h for h in applied if h["version"] not in undone_versions]
    if not live:
        raise LookupError("already undone" if applied else "never applied")
    target = live[-1]
    current = dict(history[-1]["params"])
    before, after = target["previous"], target["params"]
    for path in sorted(set(before) | set(after)):
        if before.get(path) == after.get(path) or current.get(path) != after.get(path):
            continue
        if path in before:
            current[path] = before[path]
        else:
            current.pop(path, None)
    return target, current


class OptimizeRpc:
    def __init__(self, ctx: ServiceContext, settings: OptimizerSettings,
                 llm: LlmClient | None, wake: Callable[[], None]):
        self.ctx = ctx
        self.settings = settings
        self._llm = llm
        self._wake = wake
        self.registry = RpcRegistry()
        handlers: Mapping[str, Callable[[Any, RpcContext], Awaitable[Any]]] = {
            "optimize.run": self.run, "optimize.status": self.status,
            "optimize.runs": self.runs, "optimize.frontier": self.frontier,
            "optimize.stop": self.stop, "optimize.apply": self.apply,
            "optimize.undo": self.undo, "optimize.configuration": self.configuration,
            "optimize.configure": self.configure,
            "optimize.evaluate": self.evaluate,
        }
        for name, handler in handlers.items():
            self.registry.implement(METHODS[name])(handler)

    def _needs_llm(self, what: str) -> None:
        if self._llm is None:
            raise RpcError("invalid_argument", f"{what}: needs an LLM endpoint "
                           f"(HABITUS_LLM_BASE_URL and HABITUS_LLM_MODEL): "
                           f"{self.settings.llm.disabled_reason()}")

    async def _current(self, tenant_id: str) -> dict[str, Any] | None:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            return await store.current_configuration(cur, tenant_id)

    # ------------------------------------------------------------------ runs

    async def run(self, p: c.RunParams, rc: RpcContext) -> c.RunStarted:
        if p.proposer == "llm":
            self._needs_llm("proposer")
        if p.evaluator == "replay":
            self._needs_llm("evaluator")
        current = await self._current(rc.tenant_id)
        run_id = new_run_id()
        await self.ctx.commands.issue(rc, TENANT_WIDE, OptimizationRunStarted(
            run_id=run_id, space=p.space.model_dump(mode="json", by_alias=True),
            objectives=[o.model_dump(mode="json", by_alias=True) for o in p.objectives],
            proposer=p.proposer, evaluator=p.evaluator, max_trials=p.max_trials,
            patience=p.patience, seed=p.seed, best_by=p.best_by,
            replay=None if p.replay is None else p.replay.model_dump(mode="json"),
            since=p.since, until=p.until,
            baseline=dict(current["params"]) if current else {}), PRODUCER)
        self._wake()
        return c.RunStarted(run_id=run_id, status="running")

    async def _run_row(self, tenant_id: str, run_id: str) -> dict[str, Any]:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            row = await store.get_run(cur, tenant_id, run_id)
        if row is None:
            raise RpcError("not_found", f"no run {run_id!r}")
        return row

    @staticmethod
    def _status(row: dict[str, Any]) -> c.RunStatus:
        d = row["definition"]
        return c.RunStatus(
            run_id=row["run_id"], status=row["status"], proposer=d["proposer"],
            evaluator=d["evaluator"], objectives=d["objectives"], max_trials=d["max_trials"],
            trials=row["trials"], best_trial_id=row["best_trial_id"],
            frontier=list(row["frontier"]), stopped_early=row["stopped_early"],
            reason=row["reason"], started_at=row["started_at"], ended_at=row["ended_at"])

    async def status(self, p: c.RunRef, rc: RpcContext) -> c.RunStatus:
        return self._status(await self._run_row(rc.tenant_id, p.run_id))

    async def runs(self, p: c.ListRuns, rc: RpcContext) -> c.RunList:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            rows = await store.list_runs(cur, rc.tenant_id, p.limit)
        return c.RunList(runs=[self._status(r) for r in rows])

    async def frontier(self, p: c.FrontierParams, rc: RpcContext) -> c.Frontier:
        row = await self._run_row(rc.tenant_id, p.run_id)
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            found = [record_of(t) for t in await store.trials(cur, rc.tenant_id, p.run_id)]
        definition = definition_of(row)
        front, best = frontier_ids(found, definition.objectives, definition.best_by)
        shown = found if p.all else [t for t in found if t.trial_id in front]
        return c.Frontier(
            run_id=p.run_id, status=row["status"], objectives=definition.objectives,
            frontier=front, best_trial_id=best, trials=[c.Trial(
                trial_id=t.trial_id, index=t.index, params=dict(t.params),
                proposer=t.proposer, reasoning=t.reasoning, parse_failure=t.parse_failure,
                metrics=dict(t.metrics), intervals=dict(t.intervals), support=t.support,
                refused=t.refused, on_frontier=t.trial_id in front, best=t.trial_id == best)
                for t in shown])

    async def stop(self, p: c.StopRun, rc: RpcContext) -> c.RunStatus:
        row = await self._run_row(rc.tenant_id, p.run_id)
        if row["status"] != "running":
            raise RpcError("conflict", f"run {p.run_id!r} already {row['status']}")
        await self.ctx.commands.issue(rc, TENANT_WIDE, OptimizationRunStopped(
            run_id=p.run_id, reason=p.reason), PRODUCER)
        return self._status(await self._run_row(rc.tenant_id, p.run_id))

    # ------------------------------------------------------------------ configuration

    async def _configure(self, rc: RpcContext, change: Callable[[list[dict[str, Any]]],
                                                                ConfigurationApplied]
                         ) -> c.Configuration:
        """Apply `change(history)` under the tenant's configuration lock."""
        async with self.ctx.pool.connection() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)",
                                   (lock_key(f"optimize.configure:{rc.tenant_id}"),))
                async with conn.cursor() as cur:
                    history = await store.configurations(cur, rc.tenant_id)
                event = change(history)
                await self.ctx.commands.issue(rc, TENANT_WIDE, event, PRODUCER)
        return c.Configuration(version=event.version, params=event.params,
                               previous=event.previous, run_id=event.run_id,
                               trial_id=event.trial_id, undoes=event.undoes,
                               applied_at=None)

    async def _trial(self, tenant_id: str, run_id: str, trial_id: str) -> dict[str, Any]:
        await self._run_row(tenant_id, run_id)
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            found = [t for t in await store.trials(cur, tenant_id, run_id)
                     if t["trial_id"] == trial_id]
        if not found:
            raise RpcError("not_found", f"no trial {trial_id!r} in run {run_id!r}")
        return found[0]

    async def apply(self, p: c.TrialRef, rc: RpcContext) -> c.Configuration:
        trial = await self._trial(rc.tenant_id, p.run_id, p.trial_id)
        if trial["refused"] or all(v is None for v in trial["metrics"].values()):
            raise RpcError("conflict", f"trial {p.trial_id!r} has no estimate to stand on: "
                                       f"{trial['refused'] or 'nothing measured'}")

        def change(history: list[dict[str, Any]]) -> ConfigurationApplied:
            current = dict(history[-1]["params"]) if history else {}
            try:
                params = validate_configuration({**current, **trial["params"]})
            except ConfigurationError as exc:
                raise RpcError("invalid_argument", f"params: {exc}") from None
            return ConfigurationApplied(
                version=(history[-1]["version"] if history else 0) + 1, params=params,
                previous=current, run_id=p.run_id, trial_id=p.trial_id)

        return await self._configure(rc, change)

    async def undo(self, p: c.TrialRef, rc: RpcContext) -> c.Configuration:
        await self._trial(rc.tenant_id, p.run_id, p.trial_id)

        def change(history: list[dict[str, Any]]) -> ConfigurationApplied:
            try:
                target, params = undone(history, p.run_id, p.trial_id)
            except LookupError as exc:
                raise RpcError("conflict", f"trial {p.trial_id!r} is not applied: "
                                           f"{exc}") from None
            return ConfigurationApplied(
                version=history[-1]["version"] + 1, params=params,
                previous=dict(history[-1]["params"]), run_id=p.run_id, trial_id=p.trial_id,
                undoes=target["version"])

        return await self._configure(rc, change)

    async def configure(self, p: c.ChangeConfiguration, rc: RpcContext) -> c.Configuration:
        def change(history: list[dict[str, Any]]) -> ConfigurationApplied:
            current = dict(history[-1]["params"]) if history else {}
            merged = {**current, **p.params}
            params = validate_configuration({k: v for k, v in merged.items() if v is not None})
            return ConfigurationApplied(
                version=(history[-1]["version"] if history else 0) + 1, params=params,
                previous=current)

        return await self._configure(rc, change)

    async def configuration(self, p: c.ReadConfiguration, rc: RpcContext
                            ) -> c.Configuration:
        current = await self._current(rc.tenant_id)
        if current is None:
            return c.Configuration(version=0, params={}, previous={}, run_id=None,
                                   trial_id=None, undoes=None, applied_at=None)
        return c.Configuration.model_validate(current)

    # ------------------------------------------------------------------ one evaluation

    async def evaluate(self, p: c.EvaluateParams, rc: RpcContext) -> c.Evaluation:
        current = await self._current(rc.tenant_id)
        baseline = dict(current["params"]) if current else {}
        whole = {**baseline, **p.params}
        if p.evaluator == "replay":
            self._needs_llm("evaluator")
            assert self._llm is not None
            replayer = await evaluation.replay(
                self.ctx, self.settings, self._llm, rc.tenant_id, p.objectives,
                p.replay or c.ReplaySettings(), baseline, p.since, p.until)
            try:
                found = await replayer.evaluate(p.params)
            except BudgetExhausted as exc:
                raise RpcError("rate_limited",
                               f"the tenant's daily LLM budget is spent: {exc}") from None
            except LlmError as exc:
                raise RpcError("unavailable", f"the model endpoint failed: {exc}") from None
            return c.Evaluation(params=whole, estimate=_estimate(found), current=None)
        evaluator = await evaluation.counterfactual(self.ctx, self.settings, rc.tenant_id,
                                                    p.objectives, baseline, p.since, p.until)
        found = await evaluator.evaluate(p.params)
        today = await evaluator.evaluate({})
        return c.Evaluation(params=whole, estimate=_estimate(found), current=_estimate(today))


def _estimate(e: Any) -> c.Estimate:
    return c.Estimate(metrics=dict(e.metrics), intervals=dict(e.intervals), support=e.support,
                      refused=e.refused)


__all__ = ["OptimizeRpc", "objectives_of", "undone"]
