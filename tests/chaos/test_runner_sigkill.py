"""kill -9 the projection runner mid-stream; the resumed view equals an uninterrupted one.

A TallyProjection runs in a worker process of its own (`tests.support.tally_worker`). The test
publishes 10,000 events, lets the worker apply part of them, SIGKILLs it (no chance to finish a
batch, ack, or release anything), starts a new worker, and waits for the end of the stream. The
tally counts every apply, so a batch applied twice or an event skipped shows up as a wrong count,
a missing `seen` row, or a unique violation (which the runner retries and then dead-letters, so
the DLQ must stay empty). The reference is a second TallyProjection over the same events (another
schema, same tenant filter) run uninterrupted in-process.

Kills land where they fall (usually inside a batch), or, pinned with the worker's
`--hang-before-ack-at-seq`, after a batch committed and before any of its acks left: the
redelivery that follows must be recognised by the checkpoint and change nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NotFoundError

from habitus.bus import DLQ, PublishResult
from habitus.events import Event
from habitus.projection.checkpoints import checkpoint_table
from habitus.subjects import DLQ_ROOT
from tests.integration.runner_support import eventually, publish, run_to_end
from tests.support.factories import turn, unique
from tests.support.tally import TallyProjection, fold, read_counts, read_seen

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
TOTAL = 10_000
USERS = 20
CHUNK = 1_000


async def tally_for(pool: Any, tenant: str) -> TallyProjection:
    projection = TallyProjection(unique("tally"), tenant)
    async with pool.connection() as conn:
        for stmt in projection.ddl():
            await conn.execute(stmt)
        await conn.commit()
    return projection


async def publish_all(nc: Any, events: list[Event[Any]]) -> list[PublishResult]:
    results: list[PublishResult] = []
    for start in range(0, len(events), CHUNK):
        for result in await publish(nc, events[start:start + CHUNK]):
            assert isinstance(result, PublishResult), result
            assert not result.duplicate
            results.append(result)
    return results


async def seen_count(pool: Any, schema: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT count(*) FROM {schema}.seen")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def checkpoint(pool: Any, projection: TallyProjection) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"SELECT last_seq FROM {checkpoint_table(projection.schema)} WHERE projection = %s",
            (projection.name,),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def dead_letters(nc: Any, projection: TallyProjection) -> int:
    subjects = f"{DLQ_ROOT}.{projection.durable}.>"
    info = await nc.jetstream().stream_info(DLQ, subjects_filter=subjects)
    return sum((info.state.subjects or {}).values())


async def assert_prefix(pool: Any, projection: TallyProjection,
                        expected_seen: list[tuple[str, int, str]], when: str) -> None:
    """The view holds exactly the events up to its checkpoint: no hole below it, nothing above."""
    committed = await checkpoint(pool, projection)
    want = [row for row in expected_seen if row[1] <= committed]
    seen = await read_seen(pool, projection.schema)
    if seen != want:
        got = {row[1] for row in seen}
        missing = [row[1] for row in want if row[1] not in got]
        extra = sorted(got - {row[1] for row in want})
        raise AssertionError(
            f"{when}: the view is not the prefix up to checkpoint {committed}: "
            f"{len(missing)} events below it never applied (seqs {_ranges(missing)}), "
            f"{len(extra)} unexpected (seqs {_ranges(extra)})"
        )


def _ranges(seqs: list[int]) -> str:
    out: list[str] = []
    for s in seqs:
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out[:10]) + (" ..." if len(out) > 10 else "")


async def landing(nc: Any, pool: Any, projection: TallyProjection) -> str:
    """Where a kill landed, read from the consumer and the checkpoint once the process is gone."""
    info = await nc.jetstream().consumer_info(projection.stream, projection.durable)
    acked = info.ack_floor.stream_seq if info.ack_floor else 0
    committed = await checkpoint(pool, projection)
    if (acked or 0) < committed:
        return "after commit, before ack"
    if info.num_ack_pending:
        return "delivered, not committed"
    return "between batches"


class Worker:
    """One `tally_worker` process; its stderr goes to a file kept for failure messages."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path):
        self.proc = proc
        self.log = log

    @classmethod
    async def start(cls, env: dict[str, str], projection: TallyProjection, tenant: str,
                    log: Path, *extra: str) -> Worker:
        with log.open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.support.tally_worker",
                "--schema", projection.schema, "--tenant", tenant, "--batch-size", "100", *extra,
                cwd=REPO_ROOT, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=err,
            )
        return cls(proc, log)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    async def expect(self, word: str, within: float = 30.0) -> str:
        """The worker's next stdout line, which must start with `word`."""
        assert self.proc.stdout is not None
        try:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), within)).decode()
        except TimeoutError:
            raise AssertionError(f"worker did not say {word!r} in {within}s:\n{self.tail()}"
                                 ) from None
        assert line.split()[:1] == [word], f"worker said {line!r}:\n{self.tail()}"
        return line

    async def sigkill(self) -> None:
        if self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()

    async def sigterm(self, within: float = 20.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), within)


@dataclass(frozen=True)
class Kill:
    after: int  # events applied before the kill
    pinned: bool = False  # after a commit and before its acks, instead of wherever it falls


async def kill_and_resume(nc: Any, pool: Any, servers: Any, tmp_path: Path,
                          kills: list[Kill]) -> None:
    tenant = unique("t")
    events = [turn(tenant, f"u{i % USERS}") for i in range(TOTAL)]
    results = await publish_all(nc, events)
    seqs = sorted(r.seq for r in results)
    by_id = {e.event_id: e for e in events}
    expected_seen = sorted(((r.event_id, r.seq, by_id[r.event_id].user_id) for r in results),
                           key=lambda row: row[1])

    projection = await tally_for(pool, tenant)
    env = {**os.environ, **servers.env()}
    log = tmp_path / "worker.log"
    workers: list[Worker] = []
    landings: list[str] = []
    try:
        for kill in kills:
            extra = ["--hang-before-ack-at-seq", str(seqs[kill.after])] if kill.pinned else []
            worker = await Worker.start(env, projection, tenant, log, *extra)
            workers.append(worker)
            await worker.expect("ready")
            if kill.pinned:
                await worker.expect("hung")
            else:
                await eventually(lambda n=kill.after: _count_above(pool, projection.schema, n),
                                 timeout=30.0, interval=0.01)
            await worker.sigkill()
            assert worker.proc.returncode == -signal.SIGKILL
            landings.append(await landing(nc, pool, projection))
            await assert_prefix(pool, projection, expected_seen, f"after kill {landings}")
            killed_at = await seen_count(pool, projection.schema)
            assert kill.after < killed_at < TOTAL, f"kill did not land mid-stream ({killed_at})"
            if kill.pinned:
                assert landings[-1] == "after commit, before ack"

        final = await Worker.start(env, projection, tenant, log)
        workers.append(final)
        await final.expect("ready")

        async def at_end() -> bool:
            return await checkpoint(pool, projection) == seqs[-1]

        try:
            await eventually(at_end, timeout=40.0, interval=0.1)
        except AssertionError:
            n, cp = await seen_count(pool, projection.schema), await checkpoint(pool, projection)
            raise AssertionError(
                f"resumed worker stalled: seen={n}/{TOTAL} checkpoint={cp}/{seqs[-1]} "
                f"kills landed {landings}\n{final.tail()}"
            ) from None
        await assert_prefix(pool, projection, expected_seen, f"at the end, kills {landings}")
        assert await final.sigterm() == 0, final.tail()  # a graceful stop exits cleanly
    finally:
        for worker in workers:
            await worker.sigkill()

    reference = await tally_for(pool, tenant)
    await run_to_end(reference, nc, pool)

    counts = await read_counts(pool, projection.schema)
    seen = await read_seen(pool, projection.schema)
    assert counts == await read_counts(pool, reference.schema)
    assert seen == await read_seen(pool, reference.schema)
    assert counts == fold(events)
    assert seen == expected_seen
    assert await checkpoint(pool, projection) == seqs[-1] == await checkpoint(pool, reference)
    # A redelivery applied again would have failed on `seen` and ended in the DLQ.
    assert await dead_letters(nc, projection) == 0, f"kills landed {landings}"


async def _count_above(pool: Any, schema: str, n: int) -> bool:
    return await seen_count(pool, schema) > n


async def test_sigkill_mid_stream_then_resume_equals_uninterrupted(
    nc: Any, pool: Any, servers: Any, tmp_path: Path
) -> None:
    await kill_and_resume(nc, pool, servers, tmp_path, [Kill(3_000)])


async def test_two_sigkills_in_a_row_then_resume_equals_uninterrupted(
    nc: Any, pool: Any, servers: Any, tmp_path: Path
) -> None:
    await kill_and_resume(nc, pool, servers, tmp_path, [Kill(3_000), Kill(6_000, pinned=True)])


async def test_sigkill_inside_a_batch_with_live_traffic_loses_nothing(
    nc: Any, pool: Any, servers: Any, tmp_path: Path
) -> None:
    """Ten events; the worker is killed inside the batch applying them; ten more arrive while
    it is down; a new worker must end with all twenty.

    The killed batch stays unacknowledged on the consumer until ack_wait, while the ack-pending
    window still has room: a consumer that simply carries on hands the new worker the ten newer
    events first, and once they commit, the checkpoint (a high-water mark) is past the killed
    batch, which is then acknowledged without ever being applied."""
    tenant = unique("t")
    before = [turn(tenant, f"u{i % 3}") for i in range(10)]
    after = [turn(tenant, f"u{i % 3}") for i in range(10)]
    projection = await tally_for(pool, tenant)
    env = {**os.environ, **servers.env()}
    log = tmp_path / "worker.log"
    workers: list[Worker] = []
    try:
        first = await publish_all(nc, before)
        dying = await Worker.start(env, projection, tenant, log,
                                   "--hang-in-apply-at-seq", str(min(r.seq for r in first)))
        workers.append(dying)
        await dying.expect("ready")
        await dying.expect("hung")
        await dying.sigkill()
        assert await landing(nc, pool, projection) == "delivered, not committed"

        second = await publish_all(nc, after)  # traffic goes on while the projection is down
        resumed = await Worker.start(env, projection, tenant, log)
        workers.append(resumed)
        await resumed.expect("ready")

        js = nc.jetstream()

        async def settled() -> bool:  # nothing left to deliver, nothing delivered and unacked
            try:
                info = await js.consumer_info(projection.stream, projection.durable)
            except NotFoundError:  # the new worker is recreating it
                return False
            return not info.num_pending and not info.num_ack_pending

        await eventually(settled, timeout=20.0, interval=0.1)
    finally:
        for worker in workers:
            await worker.sigkill()

    applied = {seq for _, seq, _ in await read_seen(pool, projection.schema)}
    lost = sorted(r.seq for r in first + second if r.seq not in applied)
    assert lost == [], f"acknowledged but never applied: seqs {_ranges(lost)}"
    assert await read_counts(pool, projection.schema) == fold(before + after)
