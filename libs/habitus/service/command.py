"""Commands: publish the event, wait until every view it changes shows it, then answer.

Read-your-writes across services: the projections that read the command's event apply it
(checked against their checkpoints, and against their dead letters, so a change that was given
up on is answered as an error with the reason, never as success); then, for every event type
those projections emit, the projections that read it apply what the stream holds of it for
this user, and so on down the flow in `habitus.topology`. When a command answers, the next
`prompt.context` and PROFILE.md read already reflect it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from psycopg_pool import AsyncConnectionPool

from habitus.bus.publisher import EventPublisher, PublishResult
from habitus.bus.rpc import RpcContext, RpcError
from habitus.events import CATALOG, Event
from habitus.events.envelope import Payload
from habitus.projection.base import subject_for
from habitus.projection.wait import DeadLettered, NotAppliedYet, wait_applied
from habitus.projection.watch import CheckpointWatcher
from habitus.topology import ProjectionInfo, Topology

log = logging.getLogger(__name__)

#: dead-letter reasons that mean the caller's data can never be applied (else: our fault)
_CALLERS_FAULT = ("invalid_event",)
_MAX_HOPS = 4


class Commands:
    def __init__(self, publisher: EventPublisher, js: JetStreamContext,
                 pool: AsyncConnectionPool, timeout: float, topology: Topology):
        self._topology = topology
        # One LISTEN connection for the service's commands, closed with the service.
        self._watcher = CheckpointWatcher(str(pool.conninfo))
        self._publisher = publisher
        self._js = js
        self._pool = pool
        self._timeout = timeout

    async def issue(self, rc: RpcContext, user_id: str, payload: Payload, producer: str
                    ) -> tuple[Event[Any], PublishResult]:
        """The command helper every state-changing RPC uses: the caller's change as an event
        (its tenant and correlation from the request), published, and answered once every
        view downstream of it applied it; RpcError with the reason otherwise."""
        event = CATALOG.new(payload, tenant_id=rc.tenant_id, user_id=user_id,
                            producer=producer, correlation_id=rc.correlation_id)
        return event, await self.run(event)

    async def run(self, event: Event[Any], *, absent_ok: bool = False,
                  timeout: float | None = None, applied: list[str] | None = None
                  ) -> PublishResult:
        """Publish `event` and wait for the views downstream of it; RpcError on failure.

        `absent_ok`: a reader whose service this deployment never ran (no checkpoint row) is
        not waited for even as a first reader (an erasure: a view never built holds nothing).
        `applied` gets the names of the first readers that applied it."""
        result = await self._publisher.publish(event)
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        try:
            await self._wait_flow(event, result.seq, deadline, absent_ok,
                                  [] if applied is None else applied)
        except DeadLettered as exc:
            letter = exc.record
            permanent = letter.reason in _CALLERS_FAULT or "DataError" in letter.detail
            raise RpcError("invalid_argument" if permanent else "internal",
                           f"the change was refused: {exc}") from None
        except NotAppliedYet as exc:
            log.warning("a command's views did not apply it in time",
                        extra={"event_type": event.type, "error": str(exc)})
            raise RpcError("deadline_exceeded",
                           f"{exc}; the change is recorded and will apply") from None
        return result

    async def close(self) -> None:
        await self._watcher.close()

    @property
    def topology(self) -> Topology:
        return self._topology

    async def settle(self, tenant_id: str, user_id: str, *, timeout: float | None = None
                     ) -> None:
        """Wait until every projection applied what the streams hold of this user so far:
        in flow order (a consequence after its cause), again until a round finds nothing
        new (a view that caught up may have published more for the next one)."""
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        reached: dict[str, int] = {}
        for _ in range(_MAX_HOPS):
            moved = False
            for reader in self._topology.in_flow_order():
                target = await self._last_seq(reader.consumes, tenant_id, user_id,
                                              reader.stream)
                if not target or reached.get(reader.name) == target:
                    continue
                moved = True
                reached[reader.name] = target
                try:
                    await self._wait(reader, target, deadline, tenant_id, user_id,
                                     unless_absent=True)
                except DeadLettered:
                    continue  # given up on: nothing of it is in that view to wait for
                except NotAppliedYet as exc:
                    raise RpcError("deadline_exceeded", f"{exc}; nothing was changed"
                                   ) from None
            if not moved:
                return

    async def _wait_flow(self, event: Event[Any], seq: int, deadline: float,
                         absent_ok: bool, applied: list[str]) -> None:
        readers = list(self._topology.readers_of(event.type))
        for reader in readers:
            if await self._wait(reader, seq, deadline, event.tenant_id, event.user_id,
                                unless_absent=absent_ok):
                applied.append(reader.name)
        seen = {r.name for r in readers}
        emitted = {t for r in readers for t in r.emits}
        for _ in range(_MAX_HOPS):
            downstream = {r.name: r for t in sorted(emitted)
                          for r in self._topology.readers_of(t) if r.name not in seen}
            if not downstream:
                return
            upstream, emitted = emitted, set()
            for reader in downstream.values():
                seen.add(reader.name)
                # Only the types the hop before emitted carry this command's consequences.
                caused = [t for t in reader.consumes if t in upstream]
                target = await self._last_seq(caused, event.tenant_id, event.user_id,
                                              reader.stream)
                if target:
                    await self._wait(reader, target, deadline, event.tenant_id,
                                     event.user_id, unless_absent=True)
                emitted.update(reader.emits)

    async def _wait(self, reader: ProjectionInfo, seq: int, deadline: float, tenant_id: str,
                    user_id: str, *, unless_absent: bool) -> bool:
        # A downstream view whose service this deployment never ran is no one's to wait for.
        # A partitioned reader: the partition holding this user (or tenant) is the one to wait
        # for; the others may never reach `seq`.
        return await wait_applied(self._pool, reader.schema, reader.name, seq,
                                  timeout=max(0.0, deadline - time.monotonic()),
                                  unless_absent=unless_absent, watcher=self._watcher,
                                  slot=reader.slot_of(tenant_id, user_id))

    async def _last_seq(self, types: Iterable[str], tenant_id: str, user_id: str, stream: str
                        ) -> int:
        """The newest sequence of this user's events of `types`: everything the reader must
        have applied for the user's views to include the consequences published so far."""
        newest = 0
        for event_type in types:
            try:
                msg = await self._js.get_last_msg(stream, subject_for(event_type, tenant_id,
                                                                      user_id), direct=True)
            except NotFoundError:
                continue
            newest = max(newest, int(msg.seq or 0))
        return newest
