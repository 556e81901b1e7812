"""`traces.policies`: the tenants' routing policies, folded from `RoutingPolicyUpdated`.

A learned policy's parameters (its class -> model table, a bandit's or GRPO's weights) and a
tenant's default policy are events, so a replica, a restart and a replay all route alike, and
other services can follow the policy as it learns. The events ride on the tenant's `_tenant`
subject: they belong to no user, and erasing a user leaves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.events.domain import RoutingPolicyUpdated
from habitus.projection import ApplyContext, Delivered, Projection
from services.trace_router import policy_store

#: the parameter that makes a `RoutingPolicyUpdated` the tenant's choice of default policy
TENANT_DEFAULT = "tenant_default"


class PoliciesProjection(Projection):
    name = "traces.policies"
    schema = "traces"
    tables = (policy_store.POLICIES, policy_store.DEFAULTS)

    async def on_updated(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
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

    handlers = {RoutingPolicyUpdated: on_updated}
