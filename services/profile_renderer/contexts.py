"""Building a user's prompt context into the cache: on a miss, and ahead of the next read.

A miss (the `prompt.context` RPC) builds the variant asked for from one Postgres statement and
puts it under the generation it read first (services.profile_renderer.cache). Under load that
was most calls: the users whose agents read their context on every turn are the users whose
turns keep changing it, and each render of theirs turned every entry away, so the next read
went to the renderer's queue and to Postgres while Postgres served every projection.

So a miss also records which variant was asked for (tools, budget, the unconfirmed section),
every read of an entry gives it `READ_CREDITS` rebuilds (habitus.context_cache), and after
each commit the projection process builds again, for the users it changed, the entries with
rebuilds left, spending one (`Refresher`). The agent's next read is a hit, answered by the
gateway. The rebuild goes by exactly the rule a miss goes by (the generation read before the
inputs, the stamps of the one statement that read them), so a refreshed entry can be turned
away like any other and never serves what a later change made stale.

Building ahead costs at most `READ_CREDITS` builds a read. A first try rebuilt every variant
asked for within the window on every change, and built eight entries for each miss it saved
under `make load`; one that rebuilt only what was read since its last build saved few misses
there, where a hot user's turns change the context several times between two reads of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from habitus.context_cache import READ_CREDITS, Stamp, field_for
from services.profile_renderer import metrics, store
from services.profile_renderer.cache import ContextCache, Entry
from services.profile_renderer.context import build_context
from services.profile_renderer.document import notes

log = logging.getLogger(__name__)
User = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Variant:
    """The request options that change a context's text (what `field_for` digests)."""

    tools: tuple[str, ...] | None
    budget_chars: int | None
    unconfirmed: bool

    @classmethod
    def of(cls, tools: Iterable[str] | None, budget_chars: int | None,
           unconfirmed: bool) -> Variant:
        return cls(None if tools is None else tuple(sorted(set(tools))), budget_chars,
                   unconfirmed)

    @property
    def field(self) -> str:
        return field_for(self.tools, self.budget_chars, self.unconfirmed)

    def recorded(self, at: float) -> str:
        """The variant as the cache records it, asked for at `at`."""
        return json.dumps({"at": at, "tools": self.tools, "budget_chars": self.budget_chars,
                           "unconfirmed": self.unconfirmed})

    @classmethod
    def read(cls, raw: bytes | str) -> tuple[float, Variant] | None:
        """(when it was asked for, the variant) from what `recorded` wrote; None when it is
        not that (a cache written by another version is a variant not refreshed, no error)."""
        try:
            doc = json.loads(raw)
            tools, budget, unconfirmed = doc["tools"], doc["budget_chars"], doc["unconfirmed"]
            at = float(doc["at"])
        except (ValueError, TypeError, KeyError):
            return None
        if not ((tools is None or (isinstance(tools, list)
                                   and all(isinstance(t, str) for t in tools)))
                and (budget is None or (isinstance(budget, int) and not isinstance(budget, bool)))
                and isinstance(unconfirmed, bool)):
            return None
        return at, cls.of(tools, budget, unconfirmed)


class ContextBuilder:
    """A user's context variants from Postgres, put into the cache when a generation is
    given."""

    def __init__(self, pool: AsyncConnectionPool, cache: ContextCache | None, projection: str):
        self.pool = pool
        self.cache = cache
        self.projection = projection

    async def build(self, t: str, u: str, variant: Variant, generation: str | None,
                    record_at: float | None = None) -> tuple[dict[str, Any], Stamp]:
        """The context from Postgres (one statement: the stamps are exactly the checkpoints
        the data is at), cached under `generation` (None: not cached); with its stamps.
        `record_at`: a read asked for the variant now (a miss): it is recorded, and the entry
        counts as read, so the user's next change builds it again."""
        inputs = await store.context_inputs(self.pool, self.projection, t, u,
                                            variant.unconfirmed)
        result = self._built(u, inputs, variant)
        if generation is not None and self.cache is not None:
            await self.cache.put(t, u, variant.field, result, generation, inputs.stamp,
                                 wanted=None if record_at is None else variant.recorded(record_at),
                                 credits=READ_CREDITS if record_at is not None else 0)
        return result, inputs.stamp

    @staticmethod
    def _built(u: str, inputs: store.ContextInputs, variant: Variant) -> dict[str, Any]:
        version, markdown = inputs.document if inputs.document else (0, "")
        built = build_context(facets=inputs.facets, notes=notes(markdown) if markdown else "",
                              rules=inputs.rules, tools=variant.tools,
                              budget_chars=variant.budget_chars,
                              unconfirmed=inputs.provisional)
        return {
            "user_id": u,
            "version": version,
            "sections": [{"name": s.name, "content": s.content} for s in built.sections],
            "text": built.text,
        }

    async def refresh(self, read: Mapping[User, Mapping[str, int]], *, window: float,
                      limit: int, now: float) -> tuple[int, int, int]:
        """Build again, and put, the entries `read` names (per user, those with rebuilds left,
        and how many) whose variant a miss recorded within `window` seconds before `now`, at
        most `limit` a user, the latest asked first. One cache round trip for all the users
        (their variants and generations, read before any input), then one statement per user
        and unconfirmed flag, and one transaction of puts per user. (stored, turned away by a
        later change, users that failed: a user's failure is logged and costs only misses.)"""
        cache = self.cache
        if cache is None:
            return 0, 0, 0
        wanted = await cache.wanted(read)  # no tenant-wide user: invalidate lists none
        stored = superseded = failed = 0
        for (t, u), (generation, recorded) in wanted.items():
            try:
                done = await self._rebuild(t, u, generation, recorded, read[(t, u)],
                                           window=window, limit=limit, now=now)
            except Exception as exc:
                log.warning("a prompt context was not rebuilt; its next read misses",
                            extra={"error": repr(exc)})
                failed += 1
                continue
            stored += sum(done)
            superseded += len(done) - sum(done)
        return stored, superseded, failed

    async def _rebuild(self, t: str, u: str, generation: str, recorded: Sequence[bytes],
                       left: Mapping[str, int], *, window: float, limit: int, now: float
                       ) -> list[bool]:
        """One user's entries `left` names, built and put in one transaction."""
        cache = self.cache
        assert cache is not None
        variants = [v for v in latest_variants(recorded, window=window, limit=len(recorded),
                                               now=now) if v.field in left][:limit]
        entries = []
        for unconfirmed in sorted({v.unconfirmed for v in variants}):
            inputs = await store.context_inputs(self.pool, self.projection, t, u, unconfirmed)
            # still read lately: each record is renewed, and one rebuild spent
            entries += [Entry(v.field, self._built(u, inputs, v), inputs.stamp,
                              wanted=v.recorded(now), credits=left[v.field] - 1)
                        for v in variants if v.unconfirmed == unconfirmed]
        return await cache.put_many(t, u, generation, entries)


def latest_variants(recorded: Iterable[bytes | str], *, window: float, limit: int,
                    now: float) -> list[Variant]:
    """The variants asked for within `window` before `now`, the latest first, at most
    `limit`; what cannot be read is left out."""
    seen = [r for r in (Variant.read(raw) for raw in recorded) if r is not None]
    fresh = sorted((r for r in seen if now - r[0] <= window), key=lambda r: -r[0])
    return [variant for _, variant in fresh[:limit]]


class Refresher:
    """Rebuilds changed users' read contexts beside the projection, not in its way: a commit
    only adds the entries it dropped with rebuilds left to a set, and one task builds what the
    set holds, so a user changed by several batches while a round runs is rebuilt once, after
    them. Started and stopped with the service (a `Background`); before it starts, nothing is
    refreshed."""

    def __init__(self, builder: ContextBuilder, *, window: float, limit: int):
        self.builder = builder
        self.window = window
        self.limit = limit
        self._pending: dict[User, dict[str, int]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def request(self, read: Mapping[User, Mapping[str, int]]) -> None:
        """Build again the entries `read` names (per user, with the rebuilds each has left)."""
        if self._task is None:
            return
        for user, fields in read.items():
            pending = self._pending.setdefault(user, {})
            for field, credits in fields.items():
                pending[field] = max(credits, pending.get(field, 0))
        if self._pending:
            self._wake.set()

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self._run(), name="profile.context-refresh")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            read, self._pending = self._pending, {}
            await self.round(read)

    async def round(self, read: Mapping[User, Mapping[str, int]]) -> None:
        """One round over the users `read` names; a failure (Postgres, Redis) costs only
        misses, logged."""
        try:
            stored, superseded, failed = await self.builder.refresh(
                read, window=self.window, limit=self.limit, now=time.time())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("prompt contexts not refreshed; the next reads miss",
                        extra={"users": len(read), "error": repr(exc)})
            metrics.CONTEXT_REFRESHES.labels("failed").inc(len(read))
            return
        metrics.CONTEXT_REFRESHES.labels("stored").inc(stored)
        metrics.CONTEXT_REFRESHES.labels("superseded").inc(superseded)
        metrics.CONTEXT_REFRESHES.labels("failed").inc(failed)
