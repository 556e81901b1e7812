"""`traces.policies`: the tenants' routing policies, folded from `RoutingPolicyUpdated`, their
configurations, folded from `ConfigurationApplied` (the optimizer's, which routing follows), and
the digest of the advice last issued (`AdviceIssued`).

A learned policy's parameters (its class -> model table, a bandit's or GRPO's weights) and a
tenant's default policy are events, so a replica, a restart and a replay all route alike, and
other services can follow the policy as it learns. The events ride on the tenant's `_tenant`
subject: they belong to no user, and erasing a user leaves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.events.domain import AdviceIssued, ConfigurationApplied, RoutingPolicyUpdated
from habitus.projection import ApplyContext, Delivered, Projection
from services.trace_router import policy_store
from services.trace_router.state_cache import StateCache

#: the parameter that makes a `RoutingPolicyUpdated` the tenant's choice of default policy
TENANT_DEFAULT = "tenant_default"


class PoliciesProjection(Projection):
    name = "traces.policies"
    schema = "traces"
    tables = (policy_store.POLICIES, policy_store.DEFAULTS, policy_store.CONFIGURATIONS,
              policy_store.ADVICE)

    def __init__(self, states: StateCache[Any] | None = None):
        #: the routing states of this process, dropped for the tenants a batch changes
        self._states = states

    def _changed(self, run: Sequence[Delivered]) -> None:
        if self._states is not None:
            self._states.drop({d.event.tenant_id for d in run})

    async def after_commit(self, batch: Sequence[Delivered]) -> None:
        self._changed(batch)

    async def on_updated(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
        self._changed(run)
        for delivered in run:
            event = delivered.event
            p: RoutingPolicyUpdated = event.payload
            if p.parameters.get(TENANT_DEFAULT):
                await policy_store.save_default(cur, event.tenant_id, event.user_id, p.policy,
                                                p.version,
                                                event.occurred_at)
            else:
                await policy_store.save_policy(cur, event.tenant_id, event.user_id, p.policy,
                                               p.version,
                                               p.parameters, event.occurred_at)

    async def on_configured(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                            ctx: ApplyContext) -> None:
        self._changed(run)
        for delivered in run:
            event = delivered.event
            p: ConfigurationApplied = event.payload
            await policy_store.save_configuration(cur, event.tenant_id, event.user_id,
                                                  p.version, p.params, event.occurred_at)

    async def on_advice(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        for delivered in run:
            p: AdviceIssued = delivered.event.payload
            await policy_store.save_advice(cur, delivered.event.tenant_id,
                                           delivered.event.user_id, p.digest,
                                           delivered.event.occurred_at)

    handlers = {RoutingPolicyUpdated: on_updated, ConfigurationApplied: on_configured,
                AdviceIssued: on_advice}
