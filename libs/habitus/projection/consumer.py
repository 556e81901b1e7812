"""The projection's JetStream consumer: where deliveries start, and that none goes missing.

The checkpoint in Postgres is the one truth about position; the consumer only follows it. On
every claim the durable consumer is deleted and created again at checkpoint + 1, so
deliveries start in stream order from exactly where the view is. A consumer left over from an
earlier claim may hold deliveries that were given back and would come round again out of order;
recreating it also covers a replay, a restored database, and a changed filter.

Nothing is ever given back one message at a time: a failure recreates the consumer (a rewind).
That is what makes the consumer's `AckPolicy.ALL` safe, acknowledging the latest delivery of a
batch acknowledges every delivery before it, and what lets `check_contiguous` demand that the
deliveries of a claim are numbered 1, 2, ... without gaps: a gap means deliveries this runner
never saw, and acking or checkpointing past them would lose them.

Batches are fetched one ahead (`fetch` while the previous batch is applied) so the network wait
overlaps the database work; a prefetched batch is dropped unhandled on any rewind.

Each partition of a projection has a durable consumer of its own (`durable_name`), filtering
the partition's slots (`Projection.partition_filters`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from habitus.bus.pull import BatchPuller, delivery_info
from habitus.projection.base import Projection
from habitus.projection.faults import Rewind
from habitus.projection.partitions import WHOLE, Partition

log = logging.getLogger(__name__)


class ConsumerSettings(Protocol):
    """The part of RunnerConfig the consumer reads."""

    @property
    def batch_size(self) -> int: ...
    @property
    def fetch_timeout(self) -> float: ...
    @property
    def ack_wait(self) -> float: ...
    @property
    def linger(self) -> float: ...


def durable_name(projection: Projection, partition: Partition = WHOLE) -> str:
    """The durable consumer of one partition of a projection (the projection's own name for
    the whole of it, so an unpartitioned consumer keeps the name it always had)."""
    return projection.durable + partition.suffix


def consumer_config(projection: Projection, settings: ConsumerSettings, start_seq: int,
                    partition: Partition = WHOLE) -> ConsumerConfig:
    p = projection
    filters = p.partition_filters(partition)
    cfg = ConsumerConfig(
        durable_name=durable_name(p, partition),
        description=f"projection {p.name}" + ("" if partition.whole
                                              else f", partition {partition.label}"),
        # Acknowledging the latest delivery acknowledges all before it: safe because events
        # are never given back one by one (a failure rewinds the whole consumer).
        ack_policy=AckPolicy.ALL,
        ack_wait=settings.ack_wait,
        max_deliver=-1,
        # Room for the batch being applied and the next one being fetched.
        max_ack_pending=2 * settings.batch_size,
        max_waiting=8,
    )
    if len(filters) == 1:
        cfg.filter_subject = filters[0]
    else:
        cfg.filter_subjects = filters
    if start_seq <= 1:
        cfg.deliver_policy = DeliverPolicy.ALL
    else:
        cfg.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        cfg.opt_start_seq = start_seq
    return cfg


def check_contiguous(msgs: Sequence[Msg], next_delivery: int,
                     seqs: Iterable[int] | None = None) -> int:
    """Every delivery since the claim must reach the runner, in order; otherwise acking
    (ack-all) and checkpointing past a missing one would lose it. Returns the next delivery
    number expected; raises Rewind on a gap. `seqs`: the deliveries' consumer sequences, when
    the caller already read them from the ack subjects (decoded items)."""
    numbers = sorted(delivery_info(m).consumer_seq for m in msgs) if seqs is None else sorted(seqs)
    if not numbers:
        return next_delivery
    if numbers[0] != next_delivery or numbers[-1] - numbers[0] + 1 != len(numbers):
        raise Rewind(0.0, f"deliveries {next_delivery}.. expected, got "
                          f"{numbers[0]}..{numbers[-1]} ({len(numbers)})")
    return numbers[-1] + 1


class ProjectionConsumer:
    """The durable consumer of one projection and the puller reading it."""

    def __init__(self, nc: Client, js: JetStreamContext, projection: Projection,
                 settings: ConsumerSettings, partition: Partition = WHOLE):
        self._nc = nc
        self._js = js
        self.projection = projection
        self.settings = settings
        self.partition = partition
        self.durable = durable_name(projection, partition)
        self._filters = projection.partition_filters(partition)
        self._sub: BatchPuller | None = None

    def config(self, start_seq: int) -> ConsumerConfig:
        return consumer_config(self.projection, self.settings, start_seq, self.partition)

    async def restart_at(self, checkpoint: int) -> None:
        """Recreate the consumer at `checkpoint` + 1 and start pulling from it."""
        p = self.projection
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(p.stream, self.durable)
        await self._js.add_consumer(p.stream, self.config(checkpoint + 1))
        log.info("consumer started from checkpoint",
                 extra={"projection": p.name, "partition": self.partition.label,
                        "checkpoint": checkpoint})
        self._sub = BatchPuller(self._nc, p.stream, self.durable,
                                linger_seconds=self.settings.linger)
        await self._sub.start()

    async def remove(self) -> None:
        """Stop pulling and delete the durable consumer (a partition that left the layout)."""
        await self.stop()
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(self.projection.stream, self.durable)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.stop()
            sub.drain_buffer()  # never handed out; the next claim starts from the checkpoint

    def fetch(self, timeout: float | None = None) -> asyncio.Task[list[Msg]]:
        """Start fetching the next batch, waiting up to `timeout` (the settings' fetch
        timeout by default) for it; raises NATS' TimeoutError when there is none."""
        assert self._sub is not None
        return asyncio.create_task(self._sub.fetch(
            self.settings.batch_size,
            timeout=self.settings.fetch_timeout if timeout is None else timeout))

    @staticmethod
    async def discard(fetch: asyncio.Task[list[Msg]]) -> None:
        """Drop the batch fetched ahead: the next claim starts again from the checkpoint."""
        if not fetch.done():
            fetch.cancel()
        with contextlib.suppress(BaseException):
            await fetch

    async def pending(self) -> tuple[int, int]:
        """(events not yet delivered, deliveries not yet acknowledged), from the server."""
        info = await self._js.consumer_info(self.projection.stream, self.durable)
        return info.num_pending or 0, info.num_ack_pending or 0

    async def last_seq(self) -> int:
        """The stream's last sequence on the partition's subjects (0: none there): one
        last-message lookup per filter subject."""
        p = self.projection
        best = 0
        for subject in self._filters:
            try:
                msg = await self._js.get_last_msg(p.stream, subject)
            except NotFoundError:
                continue
            best = max(best, int(msg.seq or 0))
        return best
