"""`router.*`, `traces.*`, `advisor.*`, `icl.*` for the caller's tenant.

Routing is read-only and fast: a decision reads the tenant's default policy, its learned
parameters and its per-(class, model) aggregates (small tables, never the traces) and is a pure
function of them and the decision id. Changing a policy is a command: a `RoutingPolicyUpdated`
event, answered once `traces.policies` applied it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract import traces as c
from habitus.contract.configuration import section
from habitus.contract.rpc import METHODS
from habitus.events import CATALOG
from habitus.events.domain import AdviceIssued, AdviceItem, RouteDecided, RoutingPolicyUpdated
from habitus.ids import TENANT_WIDE, new_event_id
from habitus.routing.configured import decide, routing_for
from habitus.routing.context import build_context, classify, query_class
from habitus.routing.policies import (
    POLICIES,
    NoModelAvailable,
    RouterState,
    UnknownPolicy,
    diff,
    group_rewards,
    grpo_update,
    learn,
    online_switch,
    policy_for,
    sft_table,
)
from habitus.routing.sizes import resolve
from habitus.service.context import ServiceContext
from services.trace_router import facts, in_context, metrics, policy_store, store
from services.trace_router.insights import examples, recommendations, skills
from services.trace_router.policy_projection import TENANT_DEFAULT
from services.trace_router.settings import RouterSettings
from services.trace_router.state_cache import StateCache

PRODUCER = "trace_router.rpc"


def _filters(p: c.TraceFilter) -> store.TraceFilters:
    return store.TraceFilters(user_id=p.user_id, agent=p.agent, model=p.model,
                              outcome=p.outcome, since=p.since, until=p.until,
                              query_class=p.query_class)


def _plain(obj: Any) -> Any:
    """Dataclasses and tuples as JSON."""
    return json.loads(json.dumps(obj, default=lambda o: dataclasses.asdict(o)
                                 if dataclasses.is_dataclass(o) and not isinstance(o, type)
                                 else list(o) if isinstance(o, tuple | set) else str(o)))


def learned_parameters(policy: str, state: RouterState, records: list[tuple[str, str, float]],
                       min_samples: int,
                       observations: list[tuple[str, str, str | None, float | None]] | None = None
                       ) -> dict[str, Any]:
    """What `router.update_policy` publishes for `policy`: a class -> model table (learned,
    sft; learned also the online switch's choices for the classes below the threshold, when
    it has any), the GRPO weights from the recorded reward groups, or the bandit's
    posteriors."""
    if policy == "learned":
        online = online_switch(observations or [], min_samples)
        return {"table": learn(state.aggregates, min_samples), **(
            {"online": online} if online else {})}
    if policy == "sft":
        return {"table": sft_table(state.aggregates, min_samples)}
    if policy == "grpo":
        weights: dict[tuple[str, str], float] = {}
        groups, _ = group_rewards(records)
        for cls, group in groups:
            weights = grpo_update(weights, cls, group)
        return {"weights": [[cls, model, round(w, 9)] for (cls, model), w
                            in sorted(weights.items())],
                "table": policy_for("grpo").table(dataclasses.replace(state, grpo=weights))}
    if policy == "bandit":
        return {"table": policy_for("bandit").table(state)}
    return {"table": {}}


@dataclasses.dataclass(frozen=True, slots=True)
class TenantRouting:
    """What a decision reads of its tenant: the default policy (and the version of that
    choice), the learned state, and the configuration (version, settings)."""

    policy: str
    version: int
    state: RouterState
    configuration: int = 0
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


def state_of(aggregates: dict[tuple[str, str], Any], stored: dict[str, Any]) -> RouterState:
    """The state a decision reads: the aggregates as they are and the tables as published.

    A class the published table lacks yet is not filled in here: the table policies compute it
    from the aggregates themselves, class by class, and say so in their reason ("not in the
    published table yet"), so a new tenant is routed by its traces before the first relearn."""
    learned = stored.get("learned", {}).get("table") or {}
    online = stored.get("learned", {}).get("online") or {}
    sft = stored.get("sft", {}).get("table") or {}
    grpo = {(cls, model): float(w) for cls, model, w in stored.get("grpo", {}).get(
        "weights", [])}
    return RouterState(aggregates=aggregates, learned=learned, sft=sft, grpo=grpo,
                       online=online)


class RouterRpc:
    def __init__(self, ctx: ServiceContext, settings: RouterSettings,
                 states: StateCache[TenantRouting] | None = None):
        self.ctx = ctx
        self.settings = settings
        # the tenants' routing state, kept a second (see state_cache); the policies
        # projection of this process drops what it changes
        self._states: StateCache[TenantRouting] = states or StateCache(1.0)
        self.registry = RpcRegistry()
        for name, handler in (
            ("router.select_model", self.select_model),
            ("router.set_default_policy", self.set_default_policy),
            ("router.update_policy", self.update_policy),
            ("traces.summary", self.summary),
            ("traces.route_stats", self.route_stats),
            ("traces.class_stats", self.class_stats),
            ("traces.tool_stats", self.tool_stats),
            ("traces.list", self.list),
            ("traces.get", self.get),
            ("traces.search", self.search),
            ("traces.export", self.export),
            ("advisor.recommendations", self.recommendations),
            ("icl.examples", self.examples),
            ("icl.skills", self.skills),
            ("icl.context", self.icl_context),
        ):
            self.registry.implement(METHODS[name])(handler)

    # ------------------------------------------------------------------ routing

    async def _state(self, tenant_id: str) -> TenantRouting:
        return await self._states.get(tenant_id, self._read_state)

    async def _read_state(self, tenant_id: str) -> TenantRouting:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            default = await policy_store.load_default(cur, tenant_id)
            aggregates = await facts.aggregates(cur, tenant_id)
            stored = {}
            for name in ("learned", "sft", "grpo"):
                found = await policy_store.load_policy(cur, tenant_id, name)
                if found is not None:
                    stored[name] = found.parameters
            configuration = await policy_store.load_configuration(cur, tenant_id)
        policy, version = default or (self.settings.default_policy, 0)
        return TenantRouting(policy, version, state_of(aggregates, stored), *configuration)

    def _policy(self, name: str) -> Any:
        try:
            params = {} if name in ("heuristic", "bandit", "grpo") else {
                "min_samples": self.settings.min_samples}
            return policy_for(name, **params)
        except UnknownPolicy as exc:
            raise RpcError("invalid_argument", f"policy: {exc}") from None

    async def select_model(self, p: c.SelectModel, rc: RpcContext) -> c.ModelChoice:
        tenant = await self._state(rc.tenant_id)
        try:
            routing = routing_for(tenant.params, p.policy, tenant.policy,
                                  self.settings.min_samples)
        except UnknownPolicy as exc:
            raise RpcError("invalid_argument", f"policy: {exc}") from None
        ctx = build_context(p.query, p.urgency)
        models, sizes = resolve([m if isinstance(m, str) else m.model_dump()
                                 for m in p.available_models])
        decision_id = p.decision_id or new_event_id()
        try:
            choice = decide(routing, ctx, models, sizes, p.default_model, p.fallback_model,
                            tenant.state, decision_id)
        except NoModelAvailable:
            raise RpcError("invalid_argument", "available_models: none given, and no "
                                               "default_model or fallback_model") from None
        metrics.DECISIONS.labels(routing.name, choice.model).inc()
        cls = query_class(ctx)
        if p.record:
            await self.ctx.publisher.publish(CATALOG.new(RouteDecided(
                query_id=decision_id, model=choice.model, policy=routing.name,
                reason=choice.reason[:2000], scores=dict(choice.scores), query_class=cls,
                propensity=choice.propensity, offered=list(dict.fromkeys(models))[:200],
                urgency=ctx.urgency, default_model=p.default_model,
                fallback_model=p.fallback_model, configuration=tenant.configuration),
                tenant_id=rc.tenant_id, user_id=p.user_id or TENANT_WIDE, producer=PRODUCER,
                correlation_id=rc.correlation_id))
        return c.ModelChoice(
            model=choice.model, policy=routing.name, query_class=cls,
            reason=choice.reason, decision_id=decision_id, propensity=choice.propensity,
            configuration=tenant.configuration,
            generation=section(tenant.params, "generation"),
            context=c.RoutingContext(query_length=ctx.query_length, has_code=ctx.has_code,
                                     has_math=ctx.has_math, has_reasoning=ctx.has_reasoning,
                                     urgency=ctx.urgency, language=ctx.language))

    async def set_default_policy(self, p: c.SetDefaultPolicy, rc: RpcContext
                                 ) -> c.DefaultPolicy:
        self._policy(p.policy)
        version = (await self._read_state(rc.tenant_id)).version
        await self.ctx.commands.issue(rc, TENANT_WIDE, RoutingPolicyUpdated(
            policy=p.policy, version=version + 1, parameters={TENANT_DEFAULT: True}), PRODUCER)
        self._states.drop([rc.tenant_id])
        return c.DefaultPolicy(policy=p.policy, version=version + 1)

    async def update_policy(self, p: c.UpdatePolicy, rc: RpcContext) -> c.PolicyUpdate:
        self._policy(p.policy)
        update = await publish_update(self.ctx, rc, rc.tenant_id, p.policy,
                                      self.settings.min_samples)
        self._states.drop([rc.tenant_id])
        return update

    # ------------------------------------------------------------------ analyzer

    async def summary(self, p: c.TraceFilter, rc: RpcContext) -> c.TraceSummary:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            return c.TraceSummary.model_validate(
                await store.summary(cur, rc.tenant_id, _filters(p)))

    async def route_stats(self, p: c.TraceFilter, rc: RpcContext) -> c.RouteStatsList:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            return c.RouteStatsList.model_validate(
                {"routes": await store.route_stats(cur, rc.tenant_id, _filters(p))})

    async def class_stats(self, p: c.TraceFilter, rc: RpcContext) -> c.ClassStatsList:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            return c.ClassStatsList.model_validate(
                {"classes": await store.class_figures(cur, rc.tenant_id, _filters(p))})

    async def tool_stats(self, p: c.TraceFilter, rc: RpcContext) -> c.ToolStatsList:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            return c.ToolStatsList.model_validate(
                {"tools": await store.tool_stats(cur, rc.tenant_id, _filters(p))})

    async def list(self, p: c.TraceList, rc: RpcContext) -> c.TracePage:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            try:
                rows, after = await store.list_traces(cur, rc.tenant_id, _filters(p),
                                                      p.limit, p.after)
            except ValueError as exc:
                raise RpcError("invalid_argument", f"after: {exc}") from None
        return c.TracePage.model_validate({"traces": _plain(rows), "next": after})

    async def get(self, p: c.TraceRef, rc: RpcContext) -> c.TraceDetail:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            found = await store.get_trace(cur, rc.tenant_id, p.trace_id, p.user_id)
        if found is None:
            raise RpcError("not_found", f"no trace {p.trace_id!r} for user {p.user_id!r}")
        return c.TraceDetail.model_validate(_plain(found))

    async def search(self, p: c.TraceSearch, rc: RpcContext) -> c.TraceHits:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            hits = await store.search(cur, rc.tenant_id, p.text, p.limit, p.user_id)
        return c.TraceHits.model_validate({"traces": _plain(hits)})

    async def export(self, p: c.TraceList, rc: RpcContext) -> c.TraceExport:
        """A page of whole traces as JSON lines (one trace per line), and the next cursor."""
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            try:
                rows, after = await store.export_page(cur, rc.tenant_id, _filters(p),
                                                      p.after, p.limit)
            except ValueError as exc:
                raise RpcError("invalid_argument", f"after: {exc}") from None
        lines = "".join(json.dumps(_plain(r), sort_keys=True) + "\n" for r in rows)
        return c.TraceExport(jsonl=lines, count=len(rows), next=after)

    # ------------------------------------------------------------------ advisor and ICL

    async def _facts(self, p: c.Insights, rc: RpcContext, *, queries: bool = False) -> Any:
        """The traces the insights read (`queries`: with their queries opened, which only
        the examples show)."""
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            found = await facts.recent(cur, rc.tenant_id, p.user_id, queries=queries)
        return [f for f in found if p.query_class is None or f.query_class == p.query_class]

    async def icl_context(self, p: c.IclContextParams, rc: RpcContext) -> c.IclContext:
        """The request's in-context section (see `in_context`), opted into by the request or
        the tenant's configuration; from the user's own traces of the request's class."""
        params = (await self._state(rc.tenant_id)).params
        wanted = p.examples if p.examples is not None else int(params.get("prompt.examples", 0))
        with_skills = p.skills if p.skills is not None else bool(params.get("prompt.skills",
                                                                            False))
        budget = p.budget_chars if p.budget_chars is not None else int(
            params.get("prompt.examples_chars", in_context.DEFAULT_BUDGET))
        cls = classify(p.request)
        if wanted == 0 and not with_skills:
            return c.IclContext(query_class=cls, section="", examples=[], skills=[])
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            mine = [f for f in await facts.recent(cur, rc.tenant_id, p.user_id,
                                                  limit=facts.RECENT_FOR_CONTEXT,
                                                  queries=wanted > 0)
                    if f.query_class == cls]
            chosen = examples(mine, wanted)
            answers = await store.results(cur, rc.tenant_id, p.user_id,
                                          [e.trace_id for e in chosen])
        found = in_context.section(cls, [(e, answers.get(e.trace_id, "")) for e in chosen],
                                   skills(mine) if with_skills else [], budget)
        return c.IclContext(query_class=cls, section=found.text, examples=list(found.examples),
                            skills=list(found.skills))

    async def recommendations(self, p: c.Insights, rc: RpcContext) -> c.AdvisorReport:
        return c.AdvisorReport.model_validate(_plain(recommendations(await self._facts(p, rc))))

    async def examples(self, p: c.Insights, rc: RpcContext) -> c.IclExamples:
        return c.IclExamples.model_validate(
            {"examples": _plain(examples(await self._facts(p, rc, queries=True), p.limit))})

    async def skills(self, p: c.Insights, rc: RpcContext) -> c.IclSkills:
        found = skills(await self._facts(p, rc))
        return c.IclSkills.model_validate(
            {"skills": [{**_plain(s), "name": s.name} for s in found]})


async def publish_update(ctx: ServiceContext, rc: RpcContext | None, tenant_id: str,
                         policy: str, min_samples: int, *, only_if_changed: bool = False
                         ) -> c.PolicyUpdate:
    """Recompute `policy` for the tenant from its aggregates and publish it as the next
    version (`only_if_changed`: not when its table did not move, the debounced relearn)."""
    async with ctx.pool.connection() as conn, conn.cursor() as cur:
        aggregates = await facts.aggregates(cur, tenant_id)
        stored = await policy_store.load_policy(cur, tenant_id, policy)
        records = await facts.rewards(cur, tenant_id) if policy == "grpo" else []
        observations = await facts.observations(
            cur, tenant_id, facts.below(aggregates, min_samples)) if policy == "learned" else []
    state = RouterState(aggregates=aggregates)
    parameters = learned_parameters(policy, state, records, min_samples, observations)
    old = (stored.parameters if stored else {}).get("table", {})
    changes = [c.PolicyChange.model_validate({"class": cls, **change}) for cls, change in
               sorted(diff(old, parameters.get("table", {})).items())]
    version = (stored.version if stored else 0) + 1
    if only_if_changed and stored is not None and stored.parameters == parameters:
        return c.PolicyUpdate(policy=policy, version=stored.version, changes=[])
    event = RoutingPolicyUpdated(policy=policy, version=version, parameters=parameters)
    if rc is not None:
        await ctx.commands.issue(rc, TENANT_WIDE, event, PRODUCER)
    else:
        await ctx.publisher.publish(CATALOG.new(event, tenant_id=tenant_id,
                                                user_id=TENANT_WIDE, producer=PRODUCER))
    return c.PolicyUpdate(policy=policy, version=version, changes=changes)




_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def advice_event(advice: Any) -> AdviceIssued:
    """The advisor's answer as the event that announces it. Its digest covers what the advice
    says with the numbers blanked: the counts, shares and evidence move with every trace, the
    advice (which kind, which class, which models) does not, and only a change of that is
    issued again."""
    items = [AdviceItem(kind=r.kind, summary=r.summary[:2000], detail=r.detail[:4000],
                        evidence_trace_ids=list(r.evidence_trace_ids)[:20])
             for r in advice.recommendations[:50]]
    said = [[i.kind, _NUMBERS.sub("#", i.summary), _NUMBERS.sub("#", i.detail)] for i in items]
    digest = hashlib.sha256(json.dumps(said).encode()).hexdigest()
    return AdviceIssued(analyzed=advice.analyzed, problems=advice.problems,
                        confidence=min(max(advice.confidence, 0.0), 1.0),
                        recommendations=items, digest=digest)


async def publish_advice(ctx: ServiceContext, tenant_id: str) -> bool:
    """Issue the tenant's advice when it differs from the last issued (or none was and there
    is some); whether it was issued."""
    async with ctx.pool.connection() as conn, conn.cursor() as cur:
        found = recommendations(await facts.recent(cur, tenant_id, queries=False))
        last = await policy_store.load_advice(cur, tenant_id)
    event = advice_event(found)
    if event.digest == last or (last is None and not event.recommendations):
        return False
    await ctx.publisher.publish(CATALOG.new(event, tenant_id=tenant_id, user_id=TENANT_WIDE,
                                            producer=PRODUCER))
    return True


__all__ = ["POLICIES", "RouterRpc", "advice_event", "publish_advice", "publish_update"]
