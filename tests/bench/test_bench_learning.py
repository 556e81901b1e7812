"""Learning cache benchmarks.

1. Candidate intake: CandidateEmitted events applied to the evidence projection, as a ratio to
   raw JetStream pull+ack of the same messages in the same run.
2. Periodic rebuild: the cost of one periodic RebuildRequested must follow the users that are
   due, not the users that exist. Measured at 1,000 and 100,000 users, (a) with the same
   number of users due (10) and (b) with 1% due, reported per due user.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from habitus.bus.streams import EVENTS
from habitus.events import CATALOG
from habitus.events.domain import CandidateEmitted, RebuildRequested
from habitus.projection import ApplyContext, Delivered, ProjectionRunner
from habitus.service.migrations import migrate
from habitus.telemetry.gc_tuning import tune_gc
from services.stability_detector.main import build
from services.stability_detector.projection import LearningProjection
from services.stability_detector.settings import LearningSettings
from tests.bench.test_bench_runner import raw_pull_ack
from tests.conftest import ServerUrls
from tests.integration.runner_support import publish
from tests.support.factories import unique

pytestmark = pytest.mark.asyncio
N = 20_000
NOW = 1_790_000_000.0


def candidate(tenant: str, i: int) -> Any:
    return CATALOG.new(CandidateEmitted.model_validate({
        "class": "style", "key": f"k{i % 7}", "value": "v", "cue_family": "behavioral",
        "evidence": [{"type": "turn", "session_id": "s", "turn_id": f"t{i}"}],
        "initial_confidence": 0.7, "observed_at": NOW - i, "producer": "bench",
    }), tenant_id=tenant, user_id=f"u{i % 200}", producer="bench", occurred_at=NOW)


async def test_candidate_intake_ratio(servers: ServerUrls, nc: Any, pool: Any, record: Any
                                      ) -> None:
    migrate(servers.database)
    tenant = unique("bench")
    events = [candidate(tenant, i) for i in range(N)]
    for i in range(0, N, 2000):
        await publish(nc, events[i : i + 2000])
    subject = f"habitus.v1.event.CandidateEmitted.{tenant}.>"
    before = await raw_pull_ack(nc, subject, N, stream=EVENTS)

    projection = LearningProjection(LearningSettings(scheduler_enabled=False))
    config = build(LearningSettings(scheduler_enabled=False)).runner_config  # the service's
    runner = ProjectionRunner(projection, nc, pool, config=config)
    tune_gc()  # as ServiceHost does once a service has started
    started = time.perf_counter()
    await runner.run_until_caught_up(timeout=300)
    rate = N / (time.perf_counter() - started)
    baseline = (before + await raw_pull_ack(nc, subject, N, stream=EVENTS)) / 2
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM learning.evidence WHERE tenant_id = %s",
                                 (tenant,))
        row = await cur.fetchone()
    assert row is not None and row[0] == N
    record("learning_candidate_intake", events=N, batch=config.batch_size,
           raw_pull_ack_per_s=round(baseline), intake_per_s=round(rate),
           ratio=round(rate / baseline, 3), target=">= 0.5")


async def seed_users(pool: Any, tenant: str, total: int, due: int) -> None:
    """`total` users, the first `due` of them with a threshold crossing due and evidence."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            """INSERT INTO learning.users (tenant_id, user_id, dirty, last_as_of, next_due_at)
               SELECT %s, 'u' || g, false, %s,
                      CASE WHEN g < %s THEN %s ELSE %s END
               FROM generate_series(0, %s - 1) g""",
            (tenant, NOW - 3600, due, NOW - 1, NOW + 30 * 86400, total),
        )
        await conn.execute(
            """INSERT INTO learning.evidence (tenant_id, user_id, event_id, seq, class, key,
                   value, cue_family, observed_at, confidence, producer, refs)
               SELECT %s, 'u' || g, 'e' || g || '-' || k, g * 5 + k, 'style', 'verbosity',
                      'terse',
                      'explicit', %s - 86400 * 10, 0.9, 'bench', '[]'
               FROM generate_series(0, %s - 1) g, generate_series(1, 5) k""",
            (tenant, NOW, due),
        )


async def periodic_rebuild_seconds(pool: Any) -> tuple[float, int]:
    projection = LearningProjection(LearningSettings(scheduler_enabled=False))
    event = CATALOG.new(RebuildRequested(as_of=NOW, scope="periodic"), tenant_id="_system",
                        user_id="_all", producer="bench", occurred_at=NOW)
    ctx = ApplyContext()
    async with pool.connection() as conn:
        async with conn.cursor() as cur:
            started = time.perf_counter()
            await projection.apply_batch(cur, [Delivered(event, 1, "", 1)], ctx)
            elapsed = time.perf_counter() - started
        await conn.rollback()  # measure only; leave the seeded users as they were
    return elapsed, len(ctx.emitted)


async def reset_learning(pool: Any) -> None:
    async with pool.connection() as conn:
        await conn.execute("TRUNCATE learning.users, learning.evidence, learning.facets, "
                           "learning.commands")
        await conn.execute("ANALYZE learning.users")
        await conn.commit()


async def measure(pool: Any, total: int, due: int) -> tuple[float, int]:
    await reset_learning(pool)
    await seed_users(pool, unique("p"), total, due)
    async with pool.connection() as conn:
        await conn.execute("ANALYZE learning.users")
        await conn.commit()
    await periodic_rebuild_seconds(pool)  # warm-up
    runs = [await periodic_rebuild_seconds(pool) for _ in range(3)]
    return min(r[0] for r in runs), runs[0][1]


async def test_periodic_rebuild_follows_due_users(servers: ServerUrls, pool: Any, record: Any
                                                  ) -> None:
    migrate(servers.database)
    small_same, n1 = await measure(pool, 1_000, 10)
    large_same, n2 = await measure(pool, 100_000, 10)
    small_pct, n3 = await measure(pool, 1_000, 10)
    large_pct, n4 = await measure(pool, 100_000, 1_000)
    await reset_learning(pool)
    assert (n1, n2, n3, n4) == (10, 10, 10, 1000)  # every due user was rebuilt (and changed)
    per_small, per_large = small_pct / 10, large_pct / 1000
    record("learning_periodic_rebuild",
           same_due_1k_s=round(small_same, 4), same_due_100k_s=round(large_same, 4),
           same_due_ratio=round(large_same / small_same, 2),
           pct_due_1k_s=round(small_pct, 4), pct_due_100k_s=round(large_pct, 3),
           per_due_user_ratio=round(per_large / per_small, 2), target="<= 3")


HISTORY_KEYS = [("style", "verbosity"), ("style", "tone"), ("style", "format"),
                ("tooling", "package_manager"), ("tooling", "editor"), ("tooling", "language"),
                ("channel", "preferred"), ("goal", "current_project"), ("identity", "name"),
                ("veto", "never_email"), ("style", "language"), ("tooling", "test_runner")]


async def seed_history(pool: Any, tenant: str, user: str, pieces: int) -> None:
    """`pieces` of evidence over a dozen keys, two or three values each, mixed cues, spread over
    the last 90 days, in log order (seq 1..pieces), each with its turn ref."""
    classes = [c for c, _ in HISTORY_KEYS]
    keys = [k for _, k in HISTORY_KEYS]
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            """INSERT INTO learning.evidence (tenant_id, user_id, event_id, seq, class, key,
                   value, cue_family, observed_at, confidence, producer, refs)
               SELECT %s, %s, 'h' || g, g, (%s::text[])[1 + g %% 12], (%s::text[])[1 + g %% 12],
                      'v' || (g / 12) %% 3,
                      (ARRAY['explicit','behavioral','recurrence','structural'])[1 + g %% 4],
                      %s - 90 * 86400 + g * (90 * 86400.0 / %s), 0.8, 'bench',
                      jsonb_build_array(jsonb_build_object('type', 'turn',
                          'session_id', 's' || g / 20, 'turn_id', 't' || g))
               FROM generate_series(1, %s) g""",
            (tenant, user, classes, keys, NOW, pieces, pieces))


def intake_batch(tenant: str, user: str, i: int, seq: int) -> list[Delivered]:
    """One new candidate and the rebuild the scheduler requests for it, as one batch."""
    at = NOW + i
    new = CATALOG.new(CandidateEmitted.model_validate({
        "class": "style", "key": "verbosity", "value": "v1", "cue_family": "explicit",
        "evidence": [{"type": "turn", "session_id": "new", "turn_id": f"n{i}"}],
        "initial_confidence": 0.9, "observed_at": at, "producer": "bench",
    }), tenant_id=tenant, user_id=user, producer="bench", occurred_at=at)
    rebuild = CATALOG.new(RebuildRequested(as_of=at, scope="user"), tenant_id=tenant,
                          user_id=user, producer="bench", occurred_at=at)
    return [Delivered(new, seq, "", 1), Delivered(rebuild, seq + 1, "", 1)]


async def intake_seconds(pool: Any, projection: LearningProjection, tenant: str, user: str,
                         rounds: int, first_seq: int, *, from_log: bool = False) -> float:
    """Seconds per (candidate + rebuild), committed, over `rounds` rounds. `from_log`: the
    user's summaries are dropped before each round (what every rebuild cost before them)."""
    total = 0.0
    for i in range(rounds):
        async with pool.connection() as conn:
            if from_log:
                await conn.execute("UPDATE learning.users SET folded_seq = NULL "
                                   "WHERE tenant_id = %s AND user_id = %s", (tenant, user))
                await conn.commit()
            batch = intake_batch(tenant, user, i, first_seq + 2 * i)
            started = time.perf_counter()
            async with conn.cursor() as cur:
                await projection.apply_batch(cur, batch, ApplyContext())
            await conn.commit()
            total += time.perf_counter() - started
    return total / rounds


async def test_learning_intake_follows_what_is_new_not_history(servers: ServerUrls, pool: Any,
                                                               record: Any) -> None:
    """Acceptance (issue 25): intake per candidate (its evidence row and the user's rebuild)
    for a user with 10,000 pieces of evidence <= 1.5 x that for a user with 10, same run."""
    migrate(servers.database)
    projection = LearningProjection(LearningSettings(scheduler_enabled=False))
    tenant = unique("hist")
    await seed_history(pool, tenant, "small", 10)
    await seed_history(pool, tenant, "large", 10_000)
    async with pool.connection() as conn:
        await conn.execute("ANALYZE learning.evidence")
        await conn.commit()
    rounds, seq = 150, 20_000
    for user in ("small", "large"):  # first rebuilds (summaries from the log), then warm
        await intake_seconds(pool, projection, tenant, user, 5, seq)
        seq += 10
    small, large = [], []
    for _ in range(3):  # interleaved, so both sides share the machine's moments
        small.append(await intake_seconds(pool, projection, tenant, "small", rounds, seq))
        seq += 2 * rounds
        large.append(await intake_seconds(pool, projection, tenant, "large", rounds, seq))
        seq += 2 * rounds
    old_small = await intake_seconds(pool, projection, tenant, "small", 30, seq, from_log=True)
    seq += 60
    old_large = await intake_seconds(pool, projection, tenant, "large", 30, seq, from_log=True)
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT user_id, count(*) FROM learning.value_stats WHERE tenant_id = %s "
            "GROUP BY user_id ORDER BY user_id", (tenant,))
        summaries = dict(await cur.fetchall())
    per_small, per_large = min(small), min(large)
    record("learning_intake_history",
           small_evidence=10, large_evidence=10_000, summaries=summaries,
           per_candidate_small_ms=round(per_small * 1000, 2),
           per_candidate_large_ms=round(per_large * 1000, 2),
           ratio=round(per_large / per_small, 2), target="<= 1.5",
           from_log_small_ms=round(old_small * 1000, 2),
           from_log_large_ms=round(old_large * 1000, 2),
           from_log_ratio=round(old_large / old_small, 1))
