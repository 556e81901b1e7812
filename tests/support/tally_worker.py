"""A TallyProjection runner as a process of its own, for tests that kill it.

    python -m tests.support.tally_worker --schema S --tenant T [--batch-size 100] [--ack-wait 2]
                                         [--hang-before-ack-at-seq SEQ]
                                         [--hang-in-apply-at-seq SEQ]

Servers come from HABITUS_NATS_URL and HABITUS_DATABASE_URL; the schema must already exist (the
test creates it with `TallyProjection.ddl()`). The worker prints "ready" on stdout once it holds
the projection's leadership, runs until SIGTERM/SIGINT (then stops the runner gracefully), and
is meant to be SIGKILLed mid-stream: the small batch size makes a kill land between batches or
inside one.

`--partitions N --member NAME [--lease S]` runs it as one replica among others instead: a
`Membership` with N partitions, which prints "ready" once it has joined and "owns <labels>"
each time its share of the partitions changes (a replica SIGKILLed, another taking over).

`--hang-before-ack-at-seq SEQ` pins the kill to the narrowest window: once a batch reaching
stream sequence SEQ has committed (view and checkpoint), the worker prints "hung <checkpoint>"
and blocks before sending that batch's acks, so a SIGKILL then lands after the commit and before
any ack of it. `--hang-in-apply-at-seq SEQ` blocks instead inside the batch transaction that
would apply SEQ (after its writes, before the commit) and prints "hung <SEQ>": a kill then lands
inside a batch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from habitus.bus import connect
from habitus.config import Settings
from habitus.crypto.setup import keyring_from
from habitus.db.pool import open_pool
from habitus.events import install_keyring
from habitus.projection import ApplyContext, Delivered, ProjectionRunner, RunnerConfig
from habitus.service.membership import Membership
from habitus.telemetry.logging import configure_logging
from tests.support.tally import TallyProjection


class HangsInApply(TallyProjection):
    """Blocks forever inside the transaction of the first batch reaching `hang_at`."""

    hang_at = 0

    async def apply_batch(self, cur: Any, batch: Sequence[Delivered], ctx: ApplyContext
                          ) -> None:
        await super().apply_batch(cur, batch, ctx)
        if self.hang_at and batch and batch[-1].seq >= self.hang_at:
            print(f"hung {batch[-1].seq}", flush=True)
            await asyncio.Event().wait()


class HangsBeforeAck(ProjectionRunner):
    """Blocks forever before acknowledging the first batch committed at or past `hang_at`."""

    hang_at = 0

    async def _ack(self, items: Sequence[Any]) -> None:
        if self.hang_at and self._checkpoint >= self.hang_at:
            print(f"hung {self._checkpoint}", flush=True)
            await asyncio.Event().wait()
        await super()._ack(items)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.tally_worker")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--batch-size", type=int, default=100)
    # Messages of a batch in flight when the process dies come back after ack_wait: keep it
    # short so a restarted worker does not sit idle for the 30 s default.
    parser.add_argument("--ack-wait", type=float, default=2.0)
    parser.add_argument("--hang-before-ack-at-seq", type=int, default=0)
    parser.add_argument("--hang-in-apply-at-seq", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=0)
    parser.add_argument("--member", default="")
    parser.add_argument("--lease", type=float, default=3.0)
    return parser.parse_args(argv)


def _env(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise SystemExit(f"tally_worker: {name} is not set")
    return value


async def main(args: argparse.Namespace) -> None:
    configure_logging("tally-worker", "INFO", json_logs=False)
    nats_url = _env("HABITUS_NATS_URL")
    database_url = _env("HABITUS_DATABASE_URL")
    projection = HangsInApply(args.schema, args.tenant)
    projection.hang_at = args.hang_in_apply_at_seq
    config = RunnerConfig(
        batch_size=args.batch_size,
        fetch_timeout=0.5,
        ack_wait=args.ack_wait,
        max_deliver=3,
        retry_delays=(0.1, 0.2, 0.5),
        transient_attempts=3,
        transient_max_wait=0.5,
        standby_poll=0.2,
        graceful_timeout=10.0,
    )
    # users' payloads are sealed: open them with the key store the test's services use
    install_keyring(keyring_from(Settings()))
    nc = await connect(nats_url, f"tally-worker-{os.getpid()}")
    pool = await open_pool(database_url, min_size=1, max_size=4, name="tally-worker")
    if args.partitions:
        try:
            await as_replica(args, projection, nc, pool, config)
        finally:
            await pool.close()
            with contextlib.suppress(Exception):
                await nc.drain()
        return
    runner = HangsBeforeAck(projection, nc, pool, config=config)
    runner.hang_at = args.hang_before_ack_at_seq

    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)

    async def announce_leadership() -> None:
        await runner.leader.wait()
        print("ready", flush=True)

    task = runner.start()
    announcer = asyncio.create_task(announce_leadership())
    stopper = asyncio.create_task(stop_requested.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # run() only returns when stopped; surface a crash
    finally:
        announcer.cancel()
        stopper.cancel()
        await runner.stop()
        await pool.close()
        with contextlib.suppress(Exception):
            await nc.drain()


async def as_replica(args: argparse.Namespace, projection: TallyProjection, nc: Any, pool: Any,
                     config: RunnerConfig) -> None:
    """One replica of a service of one projection: joins, reports its share, until stopped."""
    member = Membership("tally", projection.schema, [projection], nc, pool,
                        partitions=args.partitions, lease_seconds=args.lease,
                        member=args.member, runner_config=config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await member.start()
    print("ready", flush=True)
    shown: list[str] = []
    try:
        while not stop.is_set():
            owned = sorted(p.label for _, p in member.share)
            if owned != shown:
                shown = owned
                print("owns " + ",".join(owned), flush=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)
    finally:
        await member.stop()


if __name__ == "__main__":
    try:
        asyncio.run(main(parse_args()))
    except KeyboardInterrupt:
        sys.exit(130)
