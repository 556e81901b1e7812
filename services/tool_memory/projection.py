"""Tool memory as two projections.

`tools.capture` reads turns from HABITUS_INGEST and publishes the rules they imply as
`ToolRuleUpserted` (the whole rule, with ids derived from the rule and event ids from the turn,
so a redelivered or replayed turn publishes nothing new), and the rules the user's words lift
("You can email Sarah again", `services.tool_memory.lifting`) as `ToolRuleDeleted`. The state
it keeps is its own: when it first made each rule, so a repeat keeps its `created_at`, and each
edict's tool and text (sealed), so a lift is matched against what this projection made as of
the turn, and a replay decides the same. `tools.rules` folds every
`ToolRuleUpserted` and `ToolRuleDeleted`, whoever published them (capture, `memory.*`, another
service), into the queryable `tools.rules`, in stream order: the same order the profile
renderer applies them in for `prompt.context`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.events.causation import caused
from habitus.events.domain import RuleScope, ToolRuleDeleted, ToolRuleUpserted
from habitus.events.ingest import TurnRecorded
from habitus.ids import TENANT_WIDE
from habitus.projection import ApplyContext, Delivered, Projection
from services.tool_memory import metrics, store
from services.tool_memory.capture import USER_EXPLICIT, capture
from services.tool_memory.lifting import lifted, lifts
from services.tool_memory.recall import Recaller
from services.tool_memory.settings import ToolMemorySettings

PRODUCER = "tool_memory"


class CaptureProjection(Projection):
    name = "tools.capture"
    schema = store.SCHEMA
    tables = (store.CAPTURED,)

    def __init__(self, settings: ToolMemorySettings | None = None):
        self.enabled = (settings or ToolMemorySettings()).capture

    async def on_turns(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        if not self.enabled:
            return
        said = [(d, capture(d.event.tenant_id, d.event.user_id, d.event.payload),
                 lifts(d.event.payload.user_message)) for d in run]
        said = [(d, rules, lifted_by) for d, rules, lifted_by in said if rules or lifted_by]
        if not said:
            return
        keys = {(d.event.tenant_id, d.event.user_id, rule.rule_id)
                for d, rules, _ in said for rule in rules}
        known = await store.first_seen(cur, keys)
        # the rules each lifting user's words may lift, as of this batch's start; the turns
        # before a lift in this batch add theirs (in stream order: a rule said, then lifted)
        edicts = await store.liftable(cur, {(d.event.tenant_id, d.event.user_id)
                                            for d, _, lifted_by in said if lifted_by})
        made: dict[tuple[str, str, str], store.Captured] = {}
        gone: set[tuple[str, str, str]] = set()
        for delivered, rules, lifted_by in said:
            event = delivered.event
            owner = (event.tenant_id, event.user_id)
            # a turn's lifts first: they take back what was said before it, never a rule said
            # beside them ("forget what I said about Sarah. Never email her before 9.")
            for lift in lifted_by:
                for rule_id, (tool, text) in list(edicts.get(owner, {}).items()):
                    if lifted(lift, text):
                        del edicts[owner][rule_id]
                        key = (*owner, rule_id)
                        gone.add(key)
                        made.pop(key, None)
                        known.pop(key, None)  # said again, even in this batch, it is new
                        ctx.emit(caused(event, ToolRuleDeleted(rule_id=rule_id, tool_name=tool),
                                        producer=PRODUCER, key=(rule_id,)), delivered)
            for rule in rules:
                key = (*owner, rule.rule_id)
                at = event.occurred_at
                first = made.get(key)
                created = known.get(key) or (first.created_at if first else at)
                made[key] = store.Captured(created, rule.tool_name, rule.rule,
                                           rule.source == USER_EXPLICIT)
                gone.discard(key)
                if owner in edicts and rule.source == USER_EXPLICIT:
                    edicts[owner][rule.rule_id] = (rule.tool_name, rule.rule)
                turn = event.payload
                ctx.emit(caused(event, ToolRuleUpserted(
                    rule_id=rule.rule_id, tool_name=rule.tool_name, rule=rule.rule,
                    priority=rule.priority, source=rule.source, tags=list(rule.tags),
                    scope=RuleScope.USER, created_at=created, updated_at=at,
                    causation=f"turn:{turn.session_id}/{turn.turn_id}"),
                    producer=PRODUCER, key=(rule.rule_id,)), delivered)
        await store.remember(cur, made)
        await store.forget(cur, gone)

    handlers = {TurnRecorded: on_turns}
    emits = (ToolRuleUpserted, ToolRuleDeleted)


def rule_row(delivered: Delivered) -> store.RuleRow:
    event = delivered.event
    p: ToolRuleUpserted = event.payload
    updated = p.updated_at if p.updated_at is not None else event.occurred_at
    # The owner decides the scope (as in the profile renderer): only `_tenant`'s rules reach
    # every user, whatever a payload claims.
    scope = RuleScope.TENANT if event.user_id == TENANT_WIDE else RuleScope.USER
    return store.RuleRow(
        event.tenant_id, event.user_id, p.rule_id, p.tool_name.strip().lower(), p.rule,
        p.priority.value, p.source.value, tuple(p.tags), scope.value,
        p.created_at if p.created_at is not None else updated, updated, p.causation)


class RulesProjection(Projection):
    name = "tools.rules"
    schema = store.SCHEMA
    tables = (store.RULES,)

    def __init__(self, recaller: Recaller | None = None):
        self._recaller = recaller
        self._erased_keys: list[str] = []

    async def erase_user(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> None:
        if self._recaller is not None:
            # recall keeps embeddings of rule texts in memory, keyed by the rules as stored:
            # the user's keys are destroyed before erasure runs, so the texts cannot be opened
            self._erased_keys.extend(await store.stored_rules(cur, tenant_id, user_id))
        await super().erase_user(cur, tenant_id, user_id)

    async def after_erase(self, users: Mapping[tuple[str, str], int], *, committed: bool
                          ) -> None:
        keys = self._erased_keys
        if committed:  # forgotten once more: a recall racing the erasure may have put some back
            self._erased_keys = []
        if self._recaller is not None and keys:
            self._recaller.forget(keys)

    async def on_upserted(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        rows = [rule_row(delivered) for delivered in run]
        await store.upsert_rules(cur, rows)
        for row in rows:
            metrics.RULES.labels(row.source).inc()

    async def on_deleted(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                         ctx: ApplyContext) -> None:
        for delivered in run:
            event = delivered.event
            await store.delete_rule(cur, event.tenant_id, event.user_id, event.payload.rule_id)

    handlers = {ToolRuleUpserted: on_upserted, ToolRuleDeleted: on_deleted}
