"""PROFILE.md as a projection: every change to what it shows is a new version.

`profile.render` folds, from HABITUS_EVENTS in order, the facets (`CacheRebuilt` carries the whole
active list), the connected accounts, the tool rules and the user's own edits
(`ProfileNotesSaved`) into versioned documents. A render that changes nothing writes nothing and
publishes nothing; one that does publishes `ProfileRendered`. Provider syncs arrive on the ingest
stream: `profile.accounts` restates them as `ConnectedAccountSynced` so that the document has one
writer and one order, and a replay rebuilds the same versions.

After a commit (best effort, outside the fold) the user's cached prompt context is invalidated
and the workspace mirror is written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus import topology
from habitus.bus.streams import EVENTS, INGEST
from habitus.events import CATALOG
from habitus.events.domain import ConnectedAccountSynced, ProfileRendered
from habitus.ids import derived_event_id
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.prompt import ProfileFacet, ToolRule
from services.profile_renderer import store
from services.profile_renderer.document import (
    FACET_BLOCKS,
    Account,
    accounts_body,
    apply_edit,
    facet_bodies,
    render,
)

PRODUCER = "profile_renderer"
UserKey = tuple[str, str]
AfterCommit = Callable[[set[UserKey]], Awaitable[None]]
BeforeCommit = Callable[[dict[UserKey, int]], Awaitable[None]]


def account_label(fields: Any) -> str:
    return str(fields.email or fields.name or "")


class AccountsProjection(Projection):
    """Provider syncs (ingest) → `ConnectedAccountSynced` (events); no tables of its own."""

    name = "profile.accounts"
    schema = store.SCHEMA
    stream = INGEST
    filter_subjects = topology.projection(name).filter_subjects()
    tables = ()

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        for delivered in batch:
            cause = delivered.event
            p = cause.payload
            event = CATALOG.new(
                ConnectedAccountSynced(toolkit=p.toolkit, connection_id=p.connection_id,
                                       label=account_label(p.fields)),
                tenant_id=cause.tenant_id, user_id=cause.user_id, producer=PRODUCER,
                occurred_at=cause.occurred_at,
                event_id=derived_event_id(cause.event_id, "ConnectedAccountSynced"),
                causation_id=cause.event_id,
                correlation_id=cause.correlation_id or cause.event_id,
            )
            ctx.emit(event, delivered)


class RenderProjection(Projection):
    name = "profile.render"
    schema = store.SCHEMA
    stream = EVENTS
    filter_subjects = topology.projection(name).filter_subjects()
    tables = store.TABLES

    def __init__(self, after_commit_hook: AfterCommit | None = None,
                 before_commit_hook: BeforeCommit | None = None):
        self._hook = after_commit_hook
        self._before = before_commit_hook

    def set_hooks(self, *, after_commit: AfterCommit, before_commit: BeforeCommit) -> None:
        """`before_commit` gets each user the batch touches with the sequence of its newest
        event, before the transaction commits (the prompt cache's change marks); it must not
        fail the batch. `after_commit` gets the users once it committed."""
        self._hook = after_commit
        self._before = before_commit

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        for delivered in batch:
            await self._apply(cur, delivered, ctx)
        if self._before is not None:
            await self._before({(d.event.tenant_id, d.event.user_id): d.seq for d in batch})

    async def _apply(self, cur: AsyncCursor[Any], delivered: Delivered, ctx: ApplyContext
                     ) -> None:
        event = delivered.event
        t, u, p = event.tenant_id, event.user_id, event.payload
        if event.type == "ProfileNotesSaved":
            await self._save_notes(cur, delivered, ctx)
            return
        if event.type == "CacheRebuilt":
            await store.replace_facets(cur, t, u, [
                ProfileFacet(f.class_.value, f.key, f.value, f.user_state.value == "pinned",
                             f.stability)
                for f in p.active])
            blocks: tuple[str, ...] = FACET_BLOCKS
        elif event.type == "ConnectedAccountSynced":
            await store.upsert_account(cur, t, u, p.toolkit, p.connection_id, p.label)
            blocks = ("connected-accounts",)
        elif event.type == "ToolRuleUpserted":
            await store.upsert_rule(cur, t, u, ToolRule(p.rule_id, p.tool_name, p.rule,
                                                        p.priority.value))
            return  # tool rules are in the prompt context, not in PROFILE.md
        elif event.type == "ToolRuleDeleted":
            await store.delete_rule(cur, t, u, p.rule_id)
            return
        else:
            return
        await self._render(cur, delivered, ctx, blocks)

    async def _bodies(self, cur: AsyncCursor[Any], t: str, u: str, blocks: Sequence[str]
                      ) -> dict[str, str]:
        bodies: dict[str, str] = {}
        if any(b in FACET_BLOCKS for b in blocks):
            bodies.update(facet_bodies(await store.load_facets(cur, t, u)))
        if "connected-accounts" in blocks:
            accounts = await store.load_accounts(cur, t, u)
            bodies["connected-accounts"] = accounts_body([Account(k, label)
                                                          for k, label in accounts])
        return bodies

    async def _render(self, cur: AsyncCursor[Any], delivered: Delivered, ctx: ApplyContext,
                      blocks: Sequence[str]) -> None:
        event = delivered.event
        t, u = event.tenant_id, event.user_id
        current = await store.latest(cur, t, u)
        bodies = await self._bodies(cur, t, u, blocks)
        if current is None:  # a new document: every block, so none is missing
            bodies = {**await self._bodies(cur, t, u, (*FACET_BLOCKS, "connected-accounts")),
                      **bodies}
        rendered = render(current.markdown if current else None, bodies)
        if current is not None and rendered.text == current.markdown:
            return
        await self._new_version(cur, delivered, ctx, current, rendered.text, "render",
                                rendered.changed)

    async def _save_notes(self, cur: AsyncCursor[Any], delivered: Delivered,
                          ctx: ApplyContext) -> None:
        event = delivered.event
        t, u, p = event.tenant_id, event.user_id, event.payload
        current = await store.latest(cur, t, u)
        if await store.saved_since(cur, t, u, p.base_version):
            return  # another save won the compare-and-swap; the RPC reports the conflict
        if current is None:
            bodies = await self._bodies(cur, t, u, (*FACET_BLOCKS, "connected-accounts"))
            base = render(None, bodies).text
        else:
            base = current.markdown
        edited = apply_edit(base, p.markdown)
        if current is not None and edited.text == current.markdown:
            return
        await self._new_version(cur, delivered, ctx, current, edited.text, "notes", ())

    async def _new_version(self, cur: AsyncCursor[Any], delivered: Delivered,
                           ctx: ApplyContext, current: store.Document | None, text: str,
                           origin: str, changed: Sequence[str]) -> None:
        event = delivered.event
        version = (current.version if current else 0) + 1
        digest = await store.add_version(cur, event.tenant_id, event.user_id, version, text,
                                         origin, event.event_id, changed)
        ctx.emit(CATALOG.new(
            ProfileRendered(version=version, sha256=digest, blocks_changed=list(changed)),
            tenant_id=event.tenant_id, user_id=event.user_id, producer=PRODUCER,
            occurred_at=event.occurred_at,
            event_id=derived_event_id(event.event_id, "ProfileRendered"),
            causation_id=event.event_id,
            correlation_id=event.correlation_id or event.event_id,
        ), delivered)

    async def after_commit(self, batch: Sequence[Delivered]) -> None:
        if self._hook is not None:
            await self._hook({(d.event.tenant_id, d.event.user_id) for d in batch})

