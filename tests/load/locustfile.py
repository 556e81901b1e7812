"""What locust runs: agents posting batches to `POST /v1/events`, and agents reading back.

Thin on purpose: the traffic is `tests.load.mix`'s, the measuring and the report are
`tests.load.run`'s. Locust monkeypatches the standard library for gevent when it starts, so
this module is only ever loaded by `locust -f` in a process of its own (`run` starts it);
nothing else may import it (pytest and `run` never do).

Configured by environment variables that `run` sets: HABITUS_LOAD_PLAN (the `Plan`),
HABITUS_LOAD_KEYS (`tenant=key,...`), HABITUS_LOAD_OUT (where the totals are written at the
end), HABITUS_LOAD_INGEST_USERS / HABITUS_LOAD_READERS (how many of each),
HABITUS_LOAD_INGEST_RATE / HABITUS_LOAD_READ_RATE (requests per second per user; 0: flat out).

A 429 is the gateway's rate limit, not an error: the user waits out its Retry-After and sends
the same batch again (as `habitus.client` does), and 429s are counted on their own.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, constant, constant_throughput, events, task

from tests.load.mix import Mix, Plan

PLAN = Plan.from_env(os.environ.get("HABITUS_LOAD_PLAN", "{}"))
KEYS = dict(pair.split("=", 1) for pair in os.environ.get("HABITUS_LOAD_KEYS", "").split(",")
            if "=" in pair)
INGEST_RATE = float(os.environ.get("HABITUS_LOAD_INGEST_RATE", "0"))
READ_RATE = float(os.environ.get("HABITUS_LOAD_READ_RATE", "1"))
#: at most this long a 429's Retry-After is waited out before the batch is counted lost
MAX_RETRY_AFTER = 30.0

_senders = itertools.count()
totals: Counter[str] = Counter()
accepted_by_type: Counter[str] = Counter()
latencies: dict[str, list[float]] = {}
errors: list[str] = []
#: when the first ingest request was sent and the last answer came: the send window
window: dict[str, float] = {}


def _pace(rate: float) -> Any:
    return constant_throughput(rate) if rate > 0 else constant(0)


def _error(what: str) -> None:
    totals["errors"] += 1
    if len(errors) < 20:  # a sample to read, not a log
        errors.append(what[:300])


def _retry_after(response: Any) -> float:
    try:
        return min(MAX_RETRY_AFTER, max(0.1, float(response.headers.get("Retry-After", "1"))))
    except (TypeError, ValueError):
        return 1.0


class IngestUser(FastHttpUser):
    """An agent platform's reporter: one tenant's batch at a time, at the plan's size."""

    fixed_count = int(os.environ.get("HABITUS_LOAD_INGEST_USERS", "1"))
    wait_time = _pace(INGEST_RATE)

    def on_start(self) -> None:
        self.mix = Mix(PLAN, next(_senders))

    @task
    def ingest(self) -> None:
        tenant = self.mix.tenant()
        body = json.dumps(self.mix.batch(tenant)).encode()
        headers = {"Authorization": f"Bearer {KEYS[tenant]}",
                   "Content-Type": "application/json"}
        waited = 0.0
        window.setdefault("first_at", time.time())
        while True:
            with self.client.post("/v1/events", data=body,  # type: ignore[arg-type]
                                  headers=headers, name="/v1/events",
                                  catch_response=True) as response:
                window["last_at"] = time.time()
                totals["ingest_requests"] += 1
                if response.status_code == 429:
                    totals["rate_limited"] += 1
                    pause = _retry_after(response)
                    response.success()  # the limit working, not a failure
                elif response.status_code == 200:
                    self._count(response.json())
                    response.success()
                    return
                else:
                    _error(f"POST /v1/events {response.status_code}: {response.text}")
                    response.failure(f"status {response.status_code}")
                    return
            if waited + pause > MAX_RETRY_AFTER * 4:
                _error(f"POST /v1/events: still rate limited after {waited:.0f} s")
                return
            waited += pause
            gevent.sleep(pause)

    @staticmethod
    def _count(answer: dict[str, Any]) -> None:
        for name in ("accepted", "duplicates", "rejected", "conflicts", "failed"):
            totals[name] += int(answer.get(name, 0))
        for result in answer.get("results") or ():
            if result.get("status") == "accepted":
                accepted_by_type[str(result.get("type"))] += 1


class ReaderUser(FastHttpUser):
    """An agent before and around its turns: the prompt's context, facets, tool rules, habits."""

    fixed_count = int(os.environ.get("HABITUS_LOAD_READERS", "0"))
    wait_time = _pace(READ_RATE)

    def on_start(self) -> None:
        self.mix = Mix(PLAN, 10_000 + next(_senders))

    @task
    def read(self) -> None:
        tenant = self.mix.tenant()
        method, params = self.mix.read(tenant)
        started = time.perf_counter()
        with self.client.post(f"/v1/rpc/{method}", json=params, name=f"rpc {method}",
                              headers={"Authorization": f"Bearer {KEYS[tenant]}"},
                              catch_response=True) as response:
            elapsed = time.perf_counter() - started
            totals["reads"] += 1
            if response.status_code == 429:
                totals["read_rate_limited"] += 1
                response.success()
                gevent.sleep(_retry_after(response))
            elif response.status_code == 200:
                latencies.setdefault(method, []).append(elapsed)
                response.success()
            else:
                _error(f"rpc {method} {response.status_code}: {response.text}")
                response.failure(f"status {response.status_code}")


@events.test_stop.add_listener  # type: ignore[untyped-decorator]
def _write_totals(environment: Any, **_: Any) -> None:
    """The run's totals, for `tests.load.run` to read once locust has exited."""
    out = os.environ.get("HABITUS_LOAD_OUT")
    if not out:
        return
    doc = {"totals": dict(totals), "accepted_by_type": dict(accepted_by_type),
           "read_latencies_s": latencies, "errors": errors, "written_at": time.time(),
           **window}
    Path(out).write_text(json.dumps(doc))
