"""`python -m tests.load.run`: drive a running Habitus with the load mix and report how the whole
pipeline keeps up (what `make load` runs; docs/load.md).

The order of a run, and why:

1. Connect as the `habitus` CLI does (`HABITUS_*_URL`, else the `habitus up` on the data
   directory) and create one API key per tenant of the plan: fresh tenants each run, so what
   is counted per tenant afterwards is this run's and nothing else's.
2. Warm up (one batch per tenant, then wait until every projection caught up), so the idle
   latency is measured on users that have a profile, and the key cache is warm.
3. Idle `prompt.context` and `/healthz` latency; the first snapshot (CPU, statements,
   messages).
4. The burst: locust in a process of its own (gevent never enters this one), while this
   process samples every projection's lag each second and probes `prompt.context`.
5. The drain: sampling goes on until every projection caught up (or the drain timeout).
6. The second snapshot, then the raw acked publish baseline on the same NATS (after the
   drain, so the two do not compete), and report.md / report.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import typer

from tests.load import latency, probes, report, snapshot
from tests.load.baseline import raw_acked_publish
from tests.load.mix import ITEM_SHARES, READ_SHARES, Mix, Plan

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
#: the stream sequences sampled to size the baseline's messages like the run's own
SIZE_SAMPLES = 200


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.load.run", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=60, help="seconds of load (default 60)")
    p.add_argument("--rate", type=float, default=300,
                   help="ingest items per second in all (0: flat out; default 300)")
    p.add_argument("--users", type=int, default=4, help="locust ingest users (default 4)")
    p.add_argument("--readers", type=int, default=2, help="locust reader users (default 2)")
    p.add_argument("--read-rate", type=float, default=20,
                   help="reads per second in all (0: flat out; default 20)")
    p.add_argument("--batch", type=int, default=20, help="items per POST (default 20)")
    p.add_argument("--tenants", type=int, default=4)
    p.add_argument("--users-per-tenant", type=int, default=40)
    p.add_argument("--zipf", type=float, default=1.1, help="skew of tenants and users")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--drain-timeout", type=float, default=300)
    # The idle p99 is the line's denominator: of 50 calls it was their maximum, and it moved
    # between 5.4 and 18.6 ms from one run to the next on the same tree.
    p.add_argument("--idle-samples", type=int, default=400,
                   help="sequential idle calls of each kind (default 400)")
    p.add_argument("--projections", default="",
                   help="comma-separated projections to wait for (default: every installed one)")
    p.add_argument("--items", default=",".join(ITEM_SHARES),
                   help="comma-separated item types to send, in the mix's proportions "
                        "(default: all of them; `turn` alone is the chat-only load of four "
                        "clients sending turns)")
    p.add_argument("--reads", default=",".join(READ_SHARES),
                   help="comma-separated read methods (default: all four of the mix)")
    p.add_argument("--url", default=None,
                   help="the gateway (default HABITUS_URL, else `habitus up`'s)")
    p.add_argument("--out", type=Path, default=None, help="default var/load/<stamp>")
    p.add_argument("--probe-at", type=float, default=None,
                   help="seconds into the burst a quiet tenant says one sentence and its "
                        "prompt.context is polled until it shows (default: half the duration; "
                        "negative: no probe)")
    p.add_argument("--probe-timeout", type=float, default=60,
                   help="how long the quiet tenant's probe waits (default 60)")
    p.add_argument("--resources-every", type=float, default=5,
                   help="seconds between samples of RSS, descriptors, connections (default 5)")
    return p.parse_args(argv)


def _shares(option: str, names: str, known: Mapping[str, float]) -> dict[str, float]:
    """`known`'s shares of the names listed in `names` (comma-separated), or exit naming the
    option and what it knows."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(known))
    if unknown or not wanted:
        raise SystemExit(f"{option}: unknown {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(known)}")
    return {n: known[n] for n in wanted}


def item_shares(names: str) -> dict[str, float]:
    """The mix's item shares of the types named (their proportions kept)."""
    return _shares("--items", names, ITEM_SHARES)


def read_shares(names: str) -> dict[str, float]:
    """The mix's read shares of the methods named (a stack without tool memory or habits
    answers theirs with 503: leave them out rather than count them as errors)."""
    return _shares("--reads", names, READ_SHARES)


def connections() -> tuple[Any, dict[str, Any]]:
    """Settings as `habitus lag` gets them, and the `habitus up` children to measure: only when
    that `habitus up` is the one serving these servers (else CPU is "not measured")."""
    from habitus.cli.connect import bus_settings
    from habitus.runtime.state import lock_held, read_runtime

    settings = bus_settings("nats_url", "database_url")
    data_dir = settings.data_dir.resolve()
    doc = read_runtime(data_dir) or {}
    ours = lock_held(data_dir) and doc.get("nats_url") == str(settings.nats_url)
    return settings, (doc.get("children") or {}) if ours else {}


class Sampler:
    """Every projection's lag once a second, from the burst's start to the drain's end."""

    def __init__(self, nc: Any, database_url: str, names: list[str], t0: float,
                 children: dict[str, Any] | None = None, pool: Any = None,
                 resources_every: float = 5.0) -> None:
        self.nc, self.url, self.names, self.t0 = nc, database_url, names, t0
        self.samples: list[dict[str, Any]] = []
        #: RSS, descriptors and connections every `resources_every` s (the soak's figures)
        self.resources: list[dict[str, Any]] = []
        self._children, self._pool, self._every = children or {}, pool, resources_every
        self._last_resources = -math.inf
        #: Reading every process's memory map takes 0.2 s idle and up to a second under load,
        #: all of it holding this process's interpreter: on this event loop it stalled the
        #: latency probe's call in flight, which then counted the stall as the gateway's. A
        #: process of its own reads them while the loop goes on.
        self._reader: ProcessPoolExecutor | None = None

    async def sample(self) -> dict[str, Any]:
        from habitus.bus.streams import INGEST
        from habitus.ops.lag import measure

        lags = await measure(self.nc, self.url, self.names)
        info = await self.nc.jetstream().stream_info(INGEST)
        row: dict[str, Any] = {
               "t": round(time.time() - self.t0, 2), "ingest_last_seq": int(info.state.last_seq),
               "lag": {lag.projection: {"pending": lag.pending, "ack_pending": lag.ack_pending,
                                        "behind": lag.behind, "checkpoint": lag.checkpoint,
                                        "stream_seq": lag.stream_seq} for lag in lags}}
        self.samples.append(row)
        if self._children and row["t"] - self._last_resources >= self._every:
            self._last_resources = row["t"]
            if self._reader is None:
                self._reader = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(
                    "spawn"), initializer=os.setsid)
            try:
                processes = await asyncio.get_running_loop().run_in_executor(
                    self._reader, probes.resources, self._children)
            except Exception as exc:  # a worker lost (a signal): this sample has none
                say(f"load: reading the processes' memory failed ({exc!r}); starting anew")
                self._reader.shutdown(cancel_futures=True)
                self._reader = None
                processes = {}
            self.resources.append({"t": row["t"],
                                   "processes": processes,
                                   "db_connections": await probes.database_connections(
                                       self._pool) if self._pool is not None else None})
        return row

    def caught_up(self) -> bool:
        return bool(self.samples) and all(
            report.is_caught_up(e) for e in self.samples[-1]["lag"].values())

    async def until(self, stop: Any, every: float = 1.0) -> None:
        """Sample every `every` s until `stop()` (a sample is taken before each check)."""
        try:
            while True:
                started = time.monotonic()
                await self.sample()
                if stop():
                    return
                await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))
        finally:
            if self._reader is not None:
                self._reader.shutdown(cancel_futures=True)
                self._reader = None


async def caught_up(nc: Any, url: str, names: list[str], timeout: float) -> bool:
    sampler = Sampler(nc, url, names, time.time())
    deadline = time.monotonic() + timeout
    await sampler.until(lambda: sampler.caught_up() or time.monotonic() > deadline, 0.5)
    return sampler.caught_up()


async def take(js: Any, children: dict[str, Any], db: str, statements_ok: bool,
               tenants: list[str], url: str) -> dict[str, Any]:
    cpu, cpu_note = snapshot.cpu_seconds(children)
    stmts = await snapshot.statements(db) if statements_ok else {}
    msgs = await snapshot.messages(js, tenants)
    contexts, contexts_note = await snapshot.context_outcomes(url)
    return {"cpu": cpu, "cpu_note": cpu_note, "statements": stmts,
            "messages": [[s, k, n] for (s, k), n in sorted(msgs.items())],
            "own_cpu": snapshot.own_cpu(), "contexts": contexts, "contexts_note": contexts_note}


async def sized_bodies(js: Any, first: int, last: int) -> list[bytes]:
    """Stored ingest messages of the run, sampled evenly between two stream sequences: the
    baseline publishes bodies of exactly the sizes the pipeline carried."""
    from habitus.bus.streams import INGEST

    step = max(1, (last - first) // SIZE_SAMPLES)
    bodies = []
    for seq in range(first + 1, last + 1, step):
        with contextlib.suppress(Exception):
            bodies.append(bytes((await js.get_msg(INGEST, seq)).data or b""))
        if len(bodies) >= SIZE_SAMPLES:
            break
    return bodies or [b"{}"]


async def burst(args: argparse.Namespace, plan: Plan, keys: dict[str, str], url: str,
                out: Path) -> tuple[int, float, float]:
    """Start locust; returns (its exit code, the burst's start, its end) in epoch seconds."""
    ingest_users, readers = max(1, args.users), max(0, args.readers)
    per_batch = plan.batch * ingest_users
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HABITUS_LOAD_PLAN": plan.to_env(),
           "HABITUS_LOAD_KEYS": ",".join(f"{t}={k}" for t, k in keys.items()),
           "HABITUS_LOAD_OUT": str(out / "locust.json"),
           "HABITUS_LOAD_INGEST_USERS": str(ingest_users),
           "HABITUS_LOAD_READERS": str(readers),
           "HABITUS_LOAD_INGEST_RATE": str(args.rate / per_batch if args.rate else 0),
           "HABITUS_LOAD_READ_RATE": str(args.read_rate / readers
                                         if args.read_rate and readers else 0)}
    classes = ["IngestUser"] + (["ReaderUser"] if readers else [])
    users = ingest_users + readers
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
               "-u", str(users), "-r", str(users), "-t", f"{max(1, round(args.duration))}s",
               "--host", url, "--csv", str(out / "locust"), "--stop-timeout", "10",
               "--only-summary", "--loglevel", "WARNING", *classes]
    with (out / "locust.log").open("wb") as log:
        t0 = time.time()
        # A session of its own: Linux shares CPU between sessions first (`sched_autogroup`),
        # and in the runner's session a flat-out locust left the latency probe waiting for its
        # own session's turn on a core, time the probe then counted as the gateway's. Clients
        # of a real deployment do not share a machine with the load; the probe should not
        # share its CPU share with it either (docs/load.md).
        proc = await asyncio.create_subprocess_exec(*command, cwd=ROOT, env=env,
                                                    stdout=log, stderr=log,
                                                    start_new_session=True)
        try:
            code = await proc.wait()
        finally:  # Ctrl-C reaches the runner's session only: locust is stopped from here
            if proc.returncode is None:
                proc.terminate()
                with contextlib.suppress(ProcessLookupError, TimeoutError):
                    await asyncio.wait_for(proc.wait(), 15)
    return code, t0, time.time()


async def main(args: argparse.Namespace) -> Path:
    from habitus.auth.keys import create_key, revoke
    from habitus.bus import connect
    from habitus.cli.gateway import gateway_url
    from habitus.db.pool import open_pool
    from habitus.service.registry import services, topology

    settings, children = connections()
    url = gateway_url(args.url)
    db = str(settings.database_url)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or ROOT / "var" / "load" / stamp
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(prefix=f"load{int(time.time()) % 10**8}", tenants=args.tenants,
                users_per_tenant=args.users_per_tenant, zipf=args.zipf, batch=args.batch,
                seed=args.seed, item_shares=item_shares(args.items),
                read_shares=read_shares(args.reads))
    tenants = plan.tenant_ids()
    flow = {p.name: p for p in topology().in_flow_order()}
    names = [n.strip() for n in args.projections.split(",") if n.strip()] or list(flow)
    owner = {p.name: d.name for d in services() for p in d.projections}
    schemas = sorted({d.schema for d in services() if d.schema})

    say(f"load: gateway {url}, {len(names)} projections, report in {out}")
    pool = await open_pool(db, name="load")
    nc = await connect(str(settings.nats_url), "load")
    js = nc.jetstream()
    keys = {t: await create_key(pool, t, label="make load") for t in tenants}
    extra_keys: list[str] = []  # the quiet tenant's
    statements_note = await snapshot.enable_statements(db)
    quiet_db = snapshot.untracked_url(db) if statements_note is None else db
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            warm = Mix(plan, stream=99_999)
            for tenant in tenants:
                r = await client.post("/v1/events", json=warm.batch(tenant),
                                      headers={"Authorization": f"Bearer {keys[tenant]}"})
                r.raise_for_status()
            say("load: warm-up sent, waiting for every projection")
            if not await caught_up(nc, quiet_db, names, args.drain_timeout):
                say("load: the warm-up did not drain; measuring anyway")
            probe_users = plan.user_ids()[:5]
            idle_ctx, idle_from, idle_health = await latency.idle_apart(
                url, probe_users, keys[tenants[0]], args.idle_samples)
            before = await take(js, children, quiet_db, statements_note is None, tenants, url)
            ingest_first = int((await js.stream_info("HABITUS_INGEST")).state.last_seq)

            quiet = {"tenant": f"{plan.prefix}-quiet", "user": "newcomer"}
            quiet_key = await create_key(pool, quiet["tenant"], label="make load probe")
            extra_keys.append(quiet_key)
            t0 = time.time()
            sampler = Sampler(nc, quiet_db, names, t0, children, pool, args.resources_every)
            state = {"bursting": True}
            say(f"load: {args.duration:g} s of load")
            sampling = asyncio.create_task(sampler.until(
                lambda: (not state["bursting"] and sampler.caught_up())
                or time.time() - t0 > args.duration + args.drain_timeout + 30))
            probing = latency.Probe("while_running", url, probe_users,
                                    keys[tenants[0]]).start()
            probe_at = args.duration / 2 if args.probe_at is None else args.probe_at
            second = asyncio.create_task(_second_tenant(
                url, quiet_key, quiet["user"], probe_at, args.probe_timeout))
            code, _, end = await burst(args, plan, keys, url, out)
            state["bursting"] = False
            say(f"load: burst over (locust exit {code}), draining")
            loaded_ctx, loaded_from, loaded_health = await probing.result()
            second_result = {**quiet, "at_s": probe_at, **(await second)}
            await sampling
            after = await take(js, children, quiet_db, statements_note is None, tenants, url)
        ingest_last = int((await js.stream_info("HABITUS_INGEST")).state.last_seq)
        locust: dict[str, Any] = json.loads((out / "locust.json").read_text()) \
            if (out / "locust.json").exists() else {"totals": {}, "errors": [
                f"locust wrote no totals (exit {code}): see {out / 'locust.log'}"]}
        accepted = int(locust.get("totals", {}).get("accepted", 0))
        bodies = await sized_bodies(js, ingest_first, ingest_last)
        say(f"load: raw acked publish baseline of {accepted:,} messages")
        raw_rate, raw_n = await raw_acked_publish(js, bodies, accepted or 1,
                                                  settings.stream_storage)
    finally:
        with contextlib.suppress(Exception):
            for key in [*keys.values(), *extra_keys]:
                await revoke(pool, key)
        await pool.close()
        await nc.close()

    raw: dict[str, Any] = {
        "stamp": stamp, "target": f"{url} (NATS {where(str(settings.nats_url))})",
        "plan": asdict(plan), "args": {k: (str(v) if isinstance(v, Path) else v)
                                       for k, v in vars(args).items()},
        "locust_exit": code, "locust": locust, "t0": t0, "burst_end_t": round(end - t0, 2),
        "drain_timeout_s": args.drain_timeout, "samples": sampler.samples,
        "resources": sampler.resources, "second_tenant": second_result,
        "projections": {n: {"service": owner.get(n, "?"), "schema": flow[n].schema,
                            "filters": flow[n].filter_subjects()} for n in names if n in flow},
        "services": {s: [p for p, o in owner.items() if o == s and p in names]
                     for s in set(owner.values())},
        "idle": {"prompt_context_s": idle_ctx, "prompt_context_from": idle_from,
                 "healthz_s": idle_health},
        "under_load": {"prompt_context_s": loaded_ctx, "prompt_context_from": loaded_from,
                       "healthz_s": loaded_health},
        "cpu": {"before": before["cpu"], "after": after["cpu"], "note": before["cpu_note"]},
        "load_cpu_s": after["own_cpu"] - before["own_cpu"],
        "statements": {"note": statements_note,
                       "by_schema": snapshot.by_schema(before["statements"],
                                                       after["statements"], schemas)},
        "messages": {"before": before["messages"], "after": after["messages"]},
        "contexts": {"before": before["contexts"], "after": after["contexts"],
                     "note": before["contexts_note"] or after["contexts_note"]},
        "baseline": {"raw_acked_publish_per_s": round(raw_rate, 1), "messages": raw_n,
                     "mean_bytes": round(sum(map(len, bodies)) / len(bodies))},
    }
    figures = report.summarise(raw)
    (out / "report.json").write_text(json.dumps({"figures": figures, "raw": raw}, indent=1))
    (out / "report.md").write_text(report.markdown(raw, figures))
    headline(figures, out)
    return out


async def _second_tenant(url: str, key: str, user: str, at: float, timeout: float
                         ) -> dict[str, Any]:
    """The quiet tenant's probe, `at` seconds into the burst, on a client of its own (so it
    never queues behind the latency probe's calls)."""
    if at < 0:
        return {"seconds": None, "status": None, "error": "not run (--probe-at < 0)"}
    await asyncio.sleep(at)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await probes.second_tenant(client, key, user, timeout=timeout)


def where(url: str) -> str:
    from habitus.cli.connect import where as strip

    return strip(url)


def say(message: str) -> None:
    print(message, flush=True)


def headline(f: dict[str, Any], out: Path) -> None:
    lat = f["latency"]
    say(f"load: accepted {f['accepted_per_s']:,} items/s ({f['turns_per_s']:,} turns/s), "
        f"{f['rate_limited']} x 429, {f['errors']} errors; drain "
        f"{f['drain_s'] if f['drain_s'] is not None else 'NOT caught up'} s; pipeline/raw "
        f"publish {f['ratio_turns_to_raw']}; prompt.context p50/p99 idle "
        f"{lat['idle_prompt_context']['p50']}/{lat['idle_prompt_context']['p99']} ms, "
        f"under load {lat['load_prompt_context']['p50']}/"
        f"{lat['load_prompt_context']['p99']} ms")
    say(f"load: report {out / 'report.md'}")


def cli(argv: list[str] | None = None) -> int:
    args = parse(argv)
    item_shares(args.items), read_shares(args.reads)  # a typo is refused before anything runs
    try:
        out = asyncio.run(main(args))
    except KeyboardInterrupt:
        return 130
    except typer.Exit as stop:  # the CLI's helpers said why (no `habitus up`, a bad URL)
        return int(stop.exit_code)
    figures = json.loads((out / "report.json").read_text())["figures"]
    return 0 if figures["all_caught_up"] and not figures["errors"] else 1


if __name__ == "__main__":
    sys.exit(cli())
