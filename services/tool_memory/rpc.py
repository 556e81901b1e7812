"""`memory.*`: tool-scoped rules for the caller's tenant.

Writes are commands: the rule becomes a `ToolRuleUpserted` or `ToolRuleDeleted` and the answer
comes once `tools.rules` and the profile renderer applied it, so the next `prompt.context`
already carries it. Reads come from `tools.rules`.
"""

from __future__ import annotations

import time
from typing import Any

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.contract import memory as m
from habitus.contract.rpc import METHODS
from habitus.events.domain import RuleScope, ToolRuleDeleted, ToolRuleUpserted
from habitus.ids import TENANT_WIDE, derived_event_id
from habitus.prompt import ToolRule, render_tool_rules, select_prompt_rules
from habitus.service.context import ServiceContext
from services.tool_memory import store
from services.tool_memory.capture import normalise_body
from services.tool_memory.recall import Recaller

PRODUCER = "tool_memory.rpc"


def rule_id_for(tenant_id: str, owner: str, tool_name: str, text: str) -> str:
    """The id capture gives the same rule, so an API put of what the user said merges."""
    return derived_event_id("tool-rule", tenant_id, owner, tool_name, normalise_body(text))


def owner_of(p: m.RulePut | m.RuleRef) -> str:
    return TENANT_WIDE if p.scope == RuleScope.TENANT else str(p.user_id)


def as_result(row: store.RuleRow) -> m.Rule:
    return m.Rule(id=row.rule_id, tool_name=row.tool_name, rule=row.rule,
                  priority=row.priority, source=row.source, tags=list(row.tags),
                  scope=row.scope, created_at=row.created_at, updated_at=row.updated_at,
                  causation=row.causation)


def prompt_rule(row: store.RuleRow) -> ToolRule:
    """As the prompt sees it; the id carries the owner, so a user's rule and the tenant's that
    share an id stay two rules (the id only breaks ties, it is never rendered)."""
    return ToolRule(f"{row.user_id}/{row.rule_id}", row.tool_name, row.rule, row.priority,
                    updated_at=row.updated_at)


class MemoryRpc:
    def __init__(self, ctx: ServiceContext, recaller: Recaller,
                 clock: Any = time.time):
        self.ctx = ctx
        self.recaller = recaller
        self.clock = clock
        self.registry = RpcRegistry()
        for name, handler in (
            ("memory.tool_rule_put", self.put),
            ("memory.tool_rule_get", self.get),
            ("memory.tool_rule_list", self.list),
            ("memory.tool_rule_delete", self.delete),
            ("memory.tool_rules_for_prompt", self.for_prompt),
            ("memory.tool_rules_json", self.json),
            ("memory.tool_rules_recall", self.recall),
        ):
            self.registry.implement(METHODS[name])(handler)

    async def _get(self, tenant_id: str, owner: str, rule_id: str) -> store.RuleRow | None:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            return await store.get_rule(cur, tenant_id, owner, rule_id)

    async def _list(self, tenant_id: str, user_id: str | None, **filters: Any
                    ) -> list[store.RuleRow]:
        async with self.ctx.pool.connection() as conn, conn.cursor() as cur:
            return await store.list_rules(cur, tenant_id, store.owners(user_id), **filters)

    async def put(self, p: m.RulePut, rc: RpcContext) -> m.Rule:
        owner = owner_of(p)
        rule_id = p.id or rule_id_for(rc.tenant_id, owner, p.tool_name, p.rule)
        existing = await self._get(rc.tenant_id, owner, rule_id)
        now = self.clock()
        await self.ctx.commands.issue(rc, owner, ToolRuleUpserted(
            rule_id=rule_id, tool_name=p.tool_name, rule=p.rule, priority=p.priority,
            source=p.source, tags=p.tags, scope=p.scope,
            created_at=existing.created_at if existing else now, updated_at=now,
            causation=rc.correlation_id or "memory.tool_rule_put"), PRODUCER)
        stored = await self._get(rc.tenant_id, owner, rule_id)
        if stored is None:  # deleted again between the write and this read
            raise RpcError("conflict", f"rule {rule_id} was deleted meanwhile")
        return as_result(stored)

    async def get(self, p: m.RuleRef, rc: RpcContext) -> m.Rule:
        row = await self._get(rc.tenant_id, owner_of(p), p.id)
        if row is None or row.tool_name != p.tool_name:
            raise RpcError("not_found", f"no rule {p.id} for tool {p.tool_name!r}")
        return as_result(row)

    async def list(self, p: m.RuleQuery, rc: RpcContext) -> m.RuleList:
        rows = await self._list(rc.tenant_id, p.user_id, tool_name=p.tool_name,
                                priority=p.priority)
        return m.RuleList(rules=[as_result(r) for r in rows])

    async def delete(self, p: m.RuleRef, rc: RpcContext) -> m.Deleted:
        owner = owner_of(p)
        row = await self._get(rc.tenant_id, owner, p.id)
        if row is None or row.tool_name != p.tool_name:
            return m.Deleted(deleted=False)
        await self.ctx.commands.issue(
            rc, owner, ToolRuleDeleted(rule_id=p.id, tool_name=p.tool_name), PRODUCER)
        return m.Deleted(deleted=True)

    async def for_prompt(self, p: m.RulesForPrompt, rc: RpcContext) -> m.PromptRules:
        rows = await self._list(rc.tenant_id, p.user_id)
        by_id = {f"{r.user_id}/{r.rule_id}": r for r in rows}
        rules = [prompt_rule(r) for r in rows]
        chosen = select_prompt_rules(rules, p.tools)
        return m.PromptRules(rendered=render_tool_rules(rules, p.tools),
                             rules=[as_result(by_id[r.rule_id]) for r in chosen])

    async def json(self, p: m.ToolRules, rc: RpcContext) -> m.RuleList:
        rows = await self._list(rc.tenant_id, p.user_id, tool_name=p.tool_name)
        return m.RuleList(rules=[as_result(r) for r in rows])

    async def recall(self, p: m.Recall, rc: RpcContext) -> m.RecallResult:
        rows = [r for r in await self._list(rc.tenant_id, p.user_id, priority="normal")
                if r.tool_name in (p.tool_name, "*")]
        if not p.query:
            return m.RecallResult(matches=[m.RecallMatch(rule=as_result(r), score=None)
                                           for r in rows[:p.limit]])
        scores = await self.recaller.scores(p.query, [r.rule for r in rows],
                                            [r.recall_key for r in rows])
        ranked = sorted(zip(scores, rows, strict=True), key=lambda sr: (-sr[0], sr[1].sort_key))
        return m.RecallResult(matches=[m.RecallMatch(rule=as_result(r), score=s)
                                       for s, r in ranked[:p.limit]])
