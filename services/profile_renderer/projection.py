"""PROFILE.md as a projection: every change to what it shows is a new version.

`profile.render` folds, from HABITUS_EVENTS in order, the facets (`CacheRebuilt` carries the whole
active list and the whole not-yet-sure list), the connected accounts, the tool rules and the
user's own edits (`ProfileNotesSaved`) into versioned documents. A render that changes nothing
writes nothing and publishes nothing; one that does publishes `ProfileRendered`. Provider syncs
arrive on the ingest stream: `profile.accounts` restates them as `ConnectedAccountSynced` so
that the document has one writer and one order, and a replay rebuilds the same versions.

After a commit (best effort, outside the fold) the user's cached prompt context is invalidated,
the variants readers asked for are built again beside the batches (contexts.Refresher), and the
workspace mirror is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from psycopg import AsyncCursor

from habitus.events.causation import caused
from habitus.events.domain import (
    CacheRebuilt,
    ConnectedAccountSynced,
    ProfileNotesSaved,
    ProfileRendered,
    RuleScope,
    ToolRuleDeleted,
    ToolRuleUpserted,
)
from habitus.events.ingest import ProviderProfileSynced
from habitus.ids import TENANT_WIDE
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.prompt import ProfileFacet, ProvisionalFacet, ToolRule
from services.profile_renderer import metrics, store
from services.profile_renderer.cache import ContextCache
from services.profile_renderer.contexts import Refresher
from services.profile_renderer.document import (
    FACET_BLOCKS,
    NOT_YET_SURE,
    Account,
    accounts_body,
    apply_edit,
    facet_bodies,
    not_yet_sure_body,
    render,
)
from services.profile_renderer.mirror import Mirror
from services.profile_renderer.store import strongest_per_key

PRODUCER = "profile_renderer"
#: what a `CacheRebuilt` can change: the facet blocks and the not-yet-sure block
LEARNED_BLOCKS = (*FACET_BLOCKS, NOT_YET_SURE)
#: the facets and the not-yet-sure facets of a user as a batch just stored them, and their
#: connected accounts (toolkit, label) when the batch read them already (None: read them)
Known = tuple[Sequence[ProfileFacet], Sequence[ProvisionalFacet], list[tuple[str, str]] | None]
#: every block, for a document written for the first time
ALL_BLOCKS = (*LEARNED_BLOCKS, "connected-accounts")


def account_label(fields: Any) -> str:
    return str(fields.email or fields.name or "")


def profile_facets(payload: CacheRebuilt) -> list[ProfileFacet]:
    """The active facets as the renderer keeps them, with why each holds (its origin)."""
    return [ProfileFacet(f.class_.value, f.key, f.value, f.user_state.value == "pinned",
                         f.stability, f.origin.value)
            for f in payload.active]


def provisional_facets(payload: CacheRebuilt) -> list[ProvisionalFacet]:
    """The not-yet-sure facets as the renderer keeps them."""
    return [ProvisionalFacet(f.class_.value, f.key, f.value, f.stability, tuple(f.evidence))
            for f in payload.provisional]


class AccountsProjection(Projection):
    """Provider syncs (ingest) → `ConnectedAccountSynced` (events); no tables of its own."""

    name = "profile.accounts"
    schema = store.SCHEMA

    async def on_syncs(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        for delivered in run:
            cause = delivered.event
            p = cause.payload
            ctx.emit(caused(
                cause, ConnectedAccountSynced(toolkit=p.toolkit, connection_id=p.connection_id,
                                              label=account_label(p.fields)),
                producer=PRODUCER), delivered)

    handlers = {ProviderProfileSynced: on_syncs}
    emits = (ConnectedAccountSynced,)


class RenderProjection(Projection):
    name = "profile.render"
    schema = store.SCHEMA
    tables = store.TABLES
    also_holds = (store.MIRROR,)

    def __init__(self, cache: ContextCache | None = None, mirror: Mirror | None = None,
                 refresher: Refresher | None = None):
        self._cache = cache
        self._mirror = mirror
        #: rebuilds, beside the batches, the contexts readers asked for of the users changed
        self._refresher = refresher
        #: versions written by the batch in progress, by origin: counted once it commits
        self._renders: Counter[str] = Counter()

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        self._renders = Counter()  # a retried batch counts again from nothing
        await super().apply_batch(cur, batch, ctx)

    async def on_facets(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        """A run of rebuilt caches, in about six statements whatever its length (six per
        rebuild before): each `CacheRebuilt` states a user's whole lists, so the tables end
        holding each user's last; every one of them is rendered in order, from its own lists
        (nothing read back), on the versions the run has made so far, and the new versions
        are stored together at the end."""
        lists = [(delivered, profile_facets(delivered.event.payload),
                  strongest_per_key(provisional_facets(delivered.event.payload)))
                 for delivered in run]
        last = {(d.event.tenant_id, d.event.user_id): (facets, unsure)
                for d, facets, unsure in lists}
        await store.replace_facets_of(cur, {user: f for user, (f, _) in last.items()})
        await store.replace_provisional_of(cur, {user: p for user, (_, p) in last.items()})
        current = await store.latest_of(cur, list(last))
        # a user's first document shows every block, their accounts too: read for all at once
        accounts = await store.accounts_of(cur, [u for u, doc in current.items() if doc is None])
        versions = store.NewVersions()
        for delivered, facets, unsure in lists:
            user = (delivered.event.tenant_id, delivered.event.user_id)
            current[user] = await self._render(cur, delivered, ctx, LEARNED_BLOCKS,
                                               known=(facets, unsure, accounts.get(user)),
                                               current=current[user], versions=versions)
        await versions.flush(cur)

    async def on_accounts(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        for delivered in run:
            event, p = delivered.event, delivered.event.payload
            await store.upsert_account(cur, event.tenant_id, event.user_id, p.toolkit,
                                       p.connection_id, p.label)
            await self._render(cur, delivered, ctx, ("connected-accounts",))

    async def on_rule_upserted(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                               ctx: ApplyContext) -> None:
        """Tool rules are in the prompt context, not in PROFILE.md: nothing to render.

        A tenant-scoped rule arrives for the reserved user `TENANT_WIDE` and is stored under
        it, so it reaches every user of the tenant (`store.context_inputs`) and no erasure of a
        user removes it. The row's scope follows its user id: a `tenant` payload on a real
        user's event still only reaches that user."""
        for delivered in run:
            event, p = delivered.event, delivered.event.payload
            updated_at = p.updated_at if p.updated_at is not None else event.occurred_at
            scope = RuleScope.TENANT if event.user_id == TENANT_WIDE else RuleScope.USER
            await store.upsert_rule(cur, event.tenant_id, event.user_id,
                                    ToolRule(p.rule_id, p.tool_name, p.rule, p.priority.value,
                                             float(updated_at)),
                                    scope.value)

    async def on_rule_deleted(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                              ctx: ApplyContext) -> None:
        for delivered in run:
            event = delivered.event
            await store.delete_rule(cur, event.tenant_id, event.user_id, event.payload.rule_id)

    async def on_notes(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        for delivered in run:
            await self._save_notes(cur, delivered, ctx)

    handlers = {
        CacheRebuilt: on_facets,
        ConnectedAccountSynced: on_accounts,
        ToolRuleUpserted: on_rule_upserted,
        ToolRuleDeleted: on_rule_deleted,
        ProfileNotesSaved: on_notes,
    }
    emits = (ProfileRendered,)

    async def before_commit(self, cur: AsyncCursor[Any], batch: Sequence[Delivered]) -> None:
        """The prompt cache's change marks: each user the batch touches, at the sequence of
        its newest event (a failure only leaves entries to their TTL; it never fails the
        batch). A tenant-wide event marks `(tenant, TENANT_WIDE)`, the mark every user of the
        tenant is checked against, so all their cached contexts miss once it commits."""
        if self._cache is not None:
            await self._cache.mark_changed({(d.event.tenant_id, d.event.user_id): d.seq
                                            for d in batch})

    async def _bodies(self, cur: AsyncCursor[Any], t: str, u: str, blocks: Sequence[str],
                      known: Known | None = None) -> dict[str, str]:
        """The blocks' bodies from the user's stored rows; `known`: the facets and the
        not-yet-sure facets as just stored, so they are not read back."""
        bodies: dict[str, str] = {}
        if any(b in FACET_BLOCKS for b in blocks):
            facets = known[0] if known else await store.load_facets(cur, t, u)
            bodies.update(facet_bodies(facets))
        if NOT_YET_SURE in blocks:
            unsure = known[1] if known else await store.load_provisional(cur, t, u)
            bodies[NOT_YET_SURE] = not_yet_sure_body(unsure)
        if "connected-accounts" in blocks:
            accounts = (known[2] if known and known[2] is not None
                        else await store.load_accounts(cur, t, u))
            bodies["connected-accounts"] = accounts_body([Account(k, label)
                                                          for k, label in accounts])
        return bodies

    async def _render(self, cur: AsyncCursor[Any], delivered: Delivered, ctx: ApplyContext,
                      blocks: Sequence[str], known: Known | None = None, *,
                      current: store.Document | Literal["read"] | None = "read",
                      versions: store.NewVersions | None = None) -> store.Document | None:
        """Render `blocks` on the user's latest document (`current`, when the caller has it)
        and store a new version if the text changed (into `versions` when given, for the
        caller to flush); returns the document now latest."""
        event = delivered.event
        t, u = event.tenant_id, event.user_id
        if current == "read":
            current = await store.latest(cur, t, u)
        bodies = await self._bodies(cur, t, u, blocks, known)
        if current is None:  # a new document: every block, so none is missing
            bodies = {**await self._bodies(cur, t, u, ALL_BLOCKS, known), **bodies}
        rendered = render(current.markdown if current else None, bodies)
        if current is not None and rendered.text == current.markdown:
            return current
        return await self._new_version(cur, delivered, ctx, current, rendered.text, "render",
                                       rendered.changed, versions)

    async def _save_notes(self, cur: AsyncCursor[Any], delivered: Delivered,
                          ctx: ApplyContext) -> None:
        event = delivered.event
        t, u, p = event.tenant_id, event.user_id, event.payload
        current = await store.latest(cur, t, u)
        if await store.saved_since(cur, t, u, p.base_version):
            return  # another save won the compare-and-swap; the RPC reports the conflict
        if current is None:
            bodies = await self._bodies(cur, t, u, ALL_BLOCKS)
            base = render(None, bodies).text
        else:
            base = current.markdown
        edited = apply_edit(base, p.markdown)
        if current is not None and edited.text == current.markdown:
            return
        await self._new_version(cur, delivered, ctx, current, edited.text, "notes", ())

    async def _new_version(self, cur: AsyncCursor[Any], delivered: Delivered,
                           ctx: ApplyContext, current: store.Document | None, text: str,
                           origin: str, changed: Sequence[str],
                           versions: store.NewVersions | None = None) -> store.Document:
        event = delivered.event
        version = (current.version if current else 0) + 1
        pending = versions if versions is not None else store.NewVersions()
        digest = pending.add(event.tenant_id, event.user_id, version, text, origin,
                             event.event_id, changed)
        if versions is None:
            await pending.flush(cur)
        self._renders[origin] += 1
        ctx.emit(caused(event, ProfileRendered(version=version, sha256=digest,
                                               blocks_changed=list(changed)),
                        producer=PRODUCER), delivered)
        return store.Document(version, text, digest, origin, event.event_id)

    async def after_commit(self, batch: Sequence[Delivered]) -> None:
        renders, self._renders = self._renders, Counter()
        for origin, n in renders.items():
            metrics.RENDERS.labels(origin).inc(n)
        users = {(d.event.tenant_id, d.event.user_id) for d in batch}
        if self._cache is not None:
            read = await self._cache.invalidate(users)
            if self._refresher is not None:
                self._refresher.request(read)
        if self._mirror is not None:
            await self._mirror.sync(users)

    async def erase_user(self, cur: AsyncCursor[Any], tenant_id: str, user_id: str) -> None:
        await super().erase_user(cur, tenant_id, user_id)
        await store.forget_mirror(cur, tenant_id, user_id)

    async def after_erase(self, users: Mapping[tuple[str, str], int], *, committed: bool
                          ) -> None:
        if self._cache is not None:
            await self._cache.forget(users)
            if not committed:  # a context a racing read puts back before the commit is stale
                await self._cache.mark_changed(users)
        if self._mirror is not None:
            await self._mirror.remove(users)
