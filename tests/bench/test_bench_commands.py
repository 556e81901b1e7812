"""Command latency (read-your-writes): p50 and p99 of a command RPC's round trip, as ratios to
the raw cost such a command cannot avoid, measured in the same run on the same servers.

A command publishes its event and answers only once every projection reading it (and those
reading what they emit) applied it: `learning.pin_facet` / `learning.unpin_facet` wait for the
learning cache and then for the profile renderer; `profile.save_notes` waits for the profile
renderer. The waiting is what this measures, so the figure can be compared before and after a
change of how a command learns that its projections caught up.

The stability detector (scheduler off, as in `tests/integration/test_commands.py`) and the
profile renderer run in-process, on the real embedded NATS, Postgres and Redis; the client calls
over the bus with `RpcClient`, one command after another, from the same process. One user with
one Active facet (two Explicit candidates and a rebuild) is pinned, unpinned and has its notes
saved, in turn.

Baseline: one NATS request/reply to a trivial responder (its own connection, same process) plus
one JetStream publish waiting for its PubAck (a stream configured like `HABITUS_EVENTS`, that no
projection reads), the same number of times, sequentially: half before the commands, half after.

Knobs: HABITUS_BENCH_COMMANDS (default 200 timed commands).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from typing import Any

import pytest

from habitus.bus import EventPublisher, RpcClient, connect
from habitus.bus.publisher import MSG_ID
from habitus.bus.streams import EVENTS, stream_configs
from habitus.events import CATALOG
from habitus.events.domain import CandidateEmitted
from habitus.service.migrations import migrate
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.bench.test_bench_prompt_context import percentile
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import running

pytestmark = pytest.mark.asyncio
N = int(os.environ.get("HABITUS_BENCH_COMMANDS", "200"))
WARMUP = 12
USER = "alice"
FACET = {"class": "style", "key": "tone"}
BASELINE_STREAM = "BENCH_COMMAND_BASELINE"
BASELINE_SUBJECT = "bench.command.baseline"


def candidate(tenant: str, n: int) -> Any:
    at = time.time() - 5  # observed before the seeding rebuild's as_of
    return CATALOG.new(CandidateEmitted.model_validate({
        **FACET, "value": "formal", "cue_family": "explicit",
        "evidence": [{"type": "turn", "session_id": "s", "turn_id": f"t{n}"}],
        "initial_confidence": 0.9, "observed_at": at, "producer": "bench",
    }), tenant_id=tenant, user_id=USER, producer="bench", occurred_at=at)


class Commands:
    """Pin, unpin, save the notes, in turn; each answer checked."""

    def __init__(self, rpc: RpcClient, tenant: str, markdown: str, version: int):
        self.rpc, self.tenant = rpc, tenant
        self.markdown, self.version = markdown, version
        self.n = 0

    async def next(self) -> tuple[str, float]:
        kind = ("learning.pin_facet", "learning.unpin_facet", "profile.save_notes")[self.n % 3]
        self.n += 1
        params: dict[str, Any] = {"user_id": USER}
        if kind == "profile.save_notes":
            # the notes saved last are the base; facet renders in between are no conflict
            params |= {"markdown": f"{self.markdown}\nBench note {self.n}.\n",
                       "base_version": self.version}
        else:
            params |= FACET
        started = time.perf_counter()
        result = await self.rpc.call(kind, self.tenant, params)
        elapsed = time.perf_counter() - started
        if kind == "profile.save_notes":
            assert result["version"] > self.version, result
            self.version = result["version"]
        else:
            expected = "pinned" if kind == "learning.pin_facet" else "auto"
            assert result["user_state"] == expected and result["value"] == "formal", result
        return kind, elapsed


async def baseline(nc: Any, count: int) -> list[float]:
    """`count` sequential (request/reply to a trivial responder + one acked JetStream
    publish), in seconds each."""
    js = nc.jetstream()
    request = json.dumps({"tenant_id": "bench", "params": {"user_id": USER, **FACET}}).encode()
    event = json.dumps({"type": "FacetPinned", "payload": {**FACET, "value": "formal"},
                        "tenant_id": "bench", "user_id": USER}).encode()
    out = []
    for _ in range(count):
        started = time.perf_counter()
        reply = await nc.request(BASELINE_SUBJECT, request, timeout=10)
        ack = await js.publish(f"{BASELINE_SUBJECT}.{USER}", event, stream=BASELINE_STREAM,
                               headers={MSG_ID: unique("m")})
        out.append(time.perf_counter() - started)
        assert reply.data == b'{"result": {}}' and ack.seq > 0
    return out


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


@pytest.mark.timeout(600)
async def test_command_latency_ratio(servers: ServerUrls, nc: Any, record: Any) -> None:
    migrate(servers.database)
    settings = servers.settings(log_level="WARNING")
    tenant = unique("cmd")
    rpc = RpcClient(nc, timeout=30)

    # the baseline's trivial responder and stream (configured like the event log)
    responder = await connect(servers.nats, "bench-responder")

    async def answer(msg: Any) -> None:
        await msg.respond(b'{"result": {}}')

    await responder.subscribe(BASELINE_SUBJECT, cb=answer)
    await responder.flush()
    js = nc.jetstream()
    events_config = next(c for c in stream_configs(settings) if c.name == EVENTS)
    await js.add_stream(dataclasses.replace(
        events_config, name=BASELINE_STREAM, subjects=[f"{BASELINE_SUBJECT}.>"],
        description="bench baseline", deny_delete=False))

    timings: dict[str, list[float]] = {}
    try:
        async with running(learning(LearningSettings(scheduler_enabled=False)), settings), \
                running(profile_renderer(), settings):
            publisher = EventPublisher(js)
            await publisher.publish_many([candidate(tenant, n) for n in range(2)])
            await rpc.call("learning.rebuild_cache", tenant, {"user_id": USER})
            facet = await rpc.call("learning.get_facet", tenant, {"user_id": USER, **FACET})
            assert facet["state"] == "active" and facet["user_state"] == "auto", facet
            doc = await rpc.call("profile.get", tenant, {"user_id": USER})
            assert "formal" in doc["markdown"], doc
            commands = Commands(rpc, tenant, doc["markdown"], doc["version"])

            await baseline(nc, WARMUP)  # warm-up: connections, code paths
            for _ in range(WARMUP):
                await commands.next()

            base = await baseline(nc, N // 2)
            for _ in range(N):
                kind, seconds = await commands.next()
                timings.setdefault(kind, []).append(seconds)
            base += await baseline(nc, N - N // 2)
    finally:
        await js.delete_stream(BASELINE_STREAM)
        await responder.drain()

    every = [x for xs in timings.values() for x in xs]
    assert len(every) == N and len(base) == N  # every command answered (and was checked)
    p50_b, p99_b = statistics.median(base), percentile(base, 0.99)
    p50_c, p99_c = statistics.median(every), percentile(every, 0.99)
    per_kind = {f"{kind.split('.')[-1]}_p50_ms": ms(statistics.median(xs))
                for kind, xs in sorted(timings.items())}
    assert p50_c / p50_b > 0 and p99_c / p99_b > 0
    record("command_latency", commands=N, baseline_p50_ms=ms(p50_b), baseline_p99_ms=ms(p99_b),
           command_p50_ms=ms(p50_c), command_p99_ms=ms(p99_c), command_max_ms=ms(max(every)),
           **per_kind, p50_ratio=round(p50_c / p50_b, 2), p99_ratio=round(p99_c / p99_b, 2))
