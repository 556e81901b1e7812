"""From what a load run measured (`raw`, as `run` collects it) to the figures and report.md.

Pure: no clock, no network, so the arithmetic of a report (rates, percentiles, drain, the cost
per turn) is unit-tested on made-up measurements and a report can be re-rendered from its
report.json. A figure that was not measured is said so, with why, never shown as a zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: what the quiet tenant's probe says (tests/load/probes.py)
SENTENCE = "Please keep answers short."
#: one row of the lag-over-time table per this many seconds of samples
TABLE_EVERY_S = 5.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def by_source(seconds: Sequence[float], sources: Sequence[str]
              ) -> dict[str, dict[str, float | int | None]]:
    """The probe's latencies split by where each answer came from (memory, cache, renderer);
    empty when the gateway did not say (an older gateway, or a run before it did)."""
    if len(sources) != len(seconds):
        return {}
    split: dict[str, list[float]] = {}
    for value, source in zip(seconds, sources, strict=True):
        if source:
            split.setdefault(source, []).append(value)
    return {source: latency_ms(values) for source, values in sorted(split.items())}


def latency_ms(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p95/p99 in milliseconds of latencies given in seconds, and how many there were."""
    def ms(q: float) -> float | None:
        p = percentile(values, q)
        return None if p is None else round(p * 1000, 2)

    return {"n": len(values), "p50": ms(50), "p95": ms(95), "p99": ms(99)}


def lag_of(entry: Mapping[str, Any]) -> int:
    """Messages a projection still has to apply at one sample: undelivered plus unacked, or its
    stream distance when it has no consumer yet (never started)."""
    if entry.get("pending") is None:
        return int(entry.get("behind") or 0)
    return int(entry.get("pending") or 0) + int(entry.get("ack_pending") or 0)


def is_caught_up(entry: Mapping[str, Any]) -> bool:
    """A projection has applied everything on its subjects: checkpoint at the stream's last
    sequence there and nothing pending (a checkpoint not yet written counts when its subjects
    are still empty)."""
    if entry.get("checkpoint") is None and int(entry.get("stream_seq") or 0) > 0:
        return False
    return int(entry.get("behind") or 0) == 0 and lag_of(entry) == 0


def caught_up_at(samples: Sequence[Mapping[str, Any]], after: float,
                 names: Sequence[str] | None = None) -> float | None:
    """The time of the first sample at or after `after` (seconds since the burst began) at
    which every projection (or those `names`) was caught up and stayed so to the end."""
    found: float | None = None
    for sample in samples:
        lag = sample["lag"]
        wanted = names if names is not None else list(lag)
        ok = all(is_caught_up(lag[n]) for n in wanted if n in lag)
        if sample["t"] >= after and ok:
            found = sample["t"] if found is None else found
        elif sample["t"] >= after:
            found = None
    return found


def deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Per key, what was added between two snapshots (keys present in both)."""
    return {k: after[k] - before[k] for k in after if k in before}


def per_kind(before: Sequence[Sequence[Any]], after: Sequence[Sequence[Any]]
             ) -> dict[tuple[str, str], int]:
    """(stream, kind) -> messages added, from two snapshots' [stream, kind, n] rows."""
    start = {(s, k): int(n) for s, k, n in before}
    out = {}
    for s, k, n in after:
        added = int(n) - start.get((s, k), 0)
        if added:
            out[(s, k)] = added
    return out


def kinds_of(filters: Sequence[str]) -> list[tuple[str, str]]:
    """The (root, kind) tokens of a projection's filter subjects (`habitus.v1.ingest.turn.*.*`)."""
    out = []
    for subject in filters:
        parts = subject.split(".")
        out.append((".".join(parts[:3]), parts[3]))
    return out


STREAM_OF_ROOT = {"habitus.v1.ingest": "HABITUS_INGEST", "habitus.v1.event": "HABITUS_EVENTS",
                  "habitus.v1.dlq": "HABITUS_DLQ"}


def summarise(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The report's figures, computed from the run's measurements."""
    loc = raw["locust"]
    totals = loc.get("totals", {})
    accepted = int(totals.get("accepted", 0))
    turns = int(loc.get("accepted_by_type", {}).get("TurnRecorded", 0))
    window = max(1e-9, float(loc.get("last_at") or 0) - float(loc.get("first_at") or 0))
    burst_end = float(raw["burst_end_t"])
    names = list(raw["projections"])
    done = caught_up_at(raw["samples"], burst_end, names)
    first_t = float(loc.get("first_at") or raw["t0"]) - float(raw["t0"])
    pipeline_s = (done - first_t) if done is not None else None
    pipeline_turns = turns / pipeline_s if pipeline_s else None
    raw_rate = (raw.get("baseline") or {}).get("raw_acked_publish_per_s")
    msgs = per_kind(raw["messages"]["before"], raw["messages"]["after"])
    out: dict[str, Any] = {
        "accepted": accepted, "turns": turns,
        "accepted_per_s": round(accepted / window, 1), "turns_per_s": round(turns / window, 1),
        "send_window_s": round(window, 1),
        "rate_limited": int(totals.get("rate_limited", 0)),
        "read_rate_limited": int(totals.get("read_rate_limited", 0)),
        "errors": int(totals.get("errors", 0)),
        "rejected": int(totals.get("rejected", 0)),
        "duplicates": int(totals.get("duplicates", 0)),
        "reads": int(totals.get("reads", 0)),
        "all_caught_up": done is not None,
        "drain_s": None if done is None else round(max(0.0, done - burst_end), 1),
        "pipeline_turns_per_s": None if pipeline_turns is None else round(pipeline_turns, 1),
        "raw_acked_publish_per_s": raw_rate,
        "ratio_turns_to_raw": (round(pipeline_turns / raw_rate, 4)
                               if pipeline_turns and raw_rate else None),
        "ratio_accepted_to_raw": (round(accepted / window / raw_rate, 4)
                                  if raw_rate else None),
        "latency": {
            "idle_prompt_context": latency_ms(raw["idle"]["prompt_context_s"]),
            "idle_prompt_context_by_source": by_source(
                raw["idle"]["prompt_context_s"], raw["idle"].get("prompt_context_from") or []),
            "idle_healthz": latency_ms(raw["idle"]["healthz_s"]),
            "load_prompt_context": latency_ms(raw["under_load"]["prompt_context_s"]),
            "load_healthz": latency_ms(raw["under_load"].get("healthz_s") or []),
            "load_prompt_context_by_source": by_source(
                raw["under_load"]["prompt_context_s"],
                raw["under_load"].get("prompt_context_from") or []),
            "readers": {m: latency_ms(v) for m, v in
                        sorted(loc.get("read_latencies_s", {}).items())},
        },
    }
    second = raw.get("second_tenant") or {}
    out["second_tenant"] = {"seconds": second.get("seconds"), "at_s": second.get("at_s"),
                            "error": second.get("error")}
    out["soak"] = soak(raw.get("resources") or [], raw["samples"], burst_end)
    out["contexts"] = context_outcomes(raw.get("contexts") or {})
    out["projections"] = _projections(raw, msgs, burst_end, first_t)
    out["cost"] = _cost(raw, msgs, turns)
    return out


def context_outcomes(contexts: Mapping[str, Any]) -> dict[str, Any]:
    """How the gateway served `prompt.context` between the two snapshots (the burst and the
    drain): hits from the context cache (and how many of them from the gateway's memory),
    misses and calls with a request forwarded to the renderer, and the hits' share of the calls
    that could be hits."""
    if contexts.get("note") or not contexts.get("after"):
        return {"note": contexts.get("note") or "not measured"}
    before = contexts.get("before") or {}
    served = {k: v - before.get(k, 0.0) for k, v in contexts["after"].items()}  # 0 unseen
    hit, miss = served.get("hit", 0.0), served.get("miss", 0.0)
    return {"hit": int(hit), "local": int(served.get("local", 0.0)), "miss": int(miss),
            "forwarded": int(served.get("forwarded", 0.0)),
            "hit_ratio": round(hit / (hit + miss), 3) if hit + miss else None}


def growth(first: float, last: float) -> float | None:
    """How much `last` grew over `first`, as a fraction (None when `first` is 0)."""
    return None if not first else round((last - first) / first, 4)


def soak(resources: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, Any]],
         burst_end: float, settle_s: float = 60.0) -> dict[str, Any]:
    """Whether the processes stayed flat under the load: per process RSS and descriptors at the
    first sample after `settle_s` (caches and pools fill in the first minute) and the last one
    before the burst ended, and their growth; database connections likewise; and the pipeline's
    lag (all projections' pending, summed) averaged over the first and the last third of that
    span (a backlog that grows shows there)."""
    during = [r for r in resources if r["t"] <= burst_end]
    settled = [r for r in during if r["t"] >= settle_s] or during
    out: dict[str, Any] = {"samples": len(during), "from_s": None, "to_s": None,
                           "processes": [], "db_connections": None, "lag": None}
    if len(settled) >= 2:
        first, last = settled[0], settled[-1]
        out["from_s"], out["to_s"] = first["t"], last["t"]
        for name in sorted(set(first["processes"]) & set(last["processes"])):
            a, b = first["processes"][name], last["processes"][name]
            out["processes"].append({
                "process": name, "rss_mb_first": round(a["rss"] / 2**20, 1),
                "rss_mb_last": round(b["rss"] / 2**20, 1),
                "rss_growth": growth(a["rss"], b["rss"]),
                "rss_mb_peak": round(max(r["processes"].get(name, {}).get("rss", 0)
                                         for r in settled) / 2**20, 1),
                "pss_mb_first": round(a.get("pss", a["rss"]) / 2**20, 1),
                "pss_mb_last": round(b.get("pss", b["rss"]) / 2**20, 1),
                "pss_growth": growth(a.get("pss", a["rss"]), b.get("pss", b["rss"])),
                "fds_first": a["fds"], "fds_last": b["fds"]})
        if first.get("db_connections") is not None and last.get("db_connections") is not None:
            out["db_connections"] = {"first": first["db_connections"],
                                     "last": last["db_connections"],
                                     "peak": max(r.get("db_connections") or 0
                                                 for r in settled)}
        span = [s for s in samples if out["from_s"] <= s["t"] <= out["to_s"]]
        third = max(1, len(span) // 3)
        def mean_lag(part: Sequence[Mapping[str, Any]]) -> float:
            return round(sum(sum(lag_of(e) for e in s["lag"].values()) for s in part)
                         / max(1, len(part)), 1)
        if span:
            out["lag"] = {"first_third_mean": mean_lag(span[:third]),
                          "last_third_mean": mean_lag(span[-third:])}
    return out


def _projections(raw: Mapping[str, Any], msgs: Mapping[tuple[str, str], int],
                 burst_end: float, first_t: float) -> list[dict[str, Any]]:
    rows = []
    for name, info in raw["projections"].items():
        events = sum(msgs.get((STREAM_OF_ROOT.get(root, root), kind), 0)
                     for root, kind in kinds_of(info["filters"]))
        own = caught_up_at(raw["samples"], burst_end, [name])
        peak = max((lag_of(s["lag"][name]) for s in raw["samples"] if name in s["lag"]),
                   default=0)
        busy = (own - first_t) if own is not None else None
        rows.append({"projection": name, "service": info["service"], "events": events,
                     "peak_lag": peak,
                     "caught_up_after_burst_s": None if own is None
                     else round(max(0.0, own - burst_end), 1),
                     "events_per_s": round(events / busy, 1) if busy and events else None})
    return rows


def _cost(raw: Mapping[str, Any], msgs: Mapping[tuple[str, str], int], turns: int
          ) -> dict[str, Any]:
    per_k = 1000 / turns if turns else 0.0
    per_1 = 1 / turns if turns else 0.0
    cpu = raw["cpu"]
    cpu_rows = [{"process": name, "projections": raw["services"].get(name, []),
                 "cpu_s": round(s, 2), "cpu_s_per_1k_turns": round(s * per_k, 3)}
                for name, s in sorted(deltas(cpu["before"], cpu["after"]).items(),
                                      key=lambda kv: -kv[1])]
    if raw.get("load_cpu_s") is not None:
        cpu_rows.append({"process": "(load generator: locust and this runner)",
                         "projections": [], "cpu_s": round(raw["load_cpu_s"], 2),
                         "cpu_s_per_1k_turns": round(raw["load_cpu_s"] * per_k, 3)})
    st = raw["statements"]
    st_rows = [{"schema": schema, "statements": n, "per_turn": round(n * per_1, 2)}
               for schema, n in sorted(st.get("by_schema", {}).items(), key=lambda kv: -kv[1])]
    msg_rows = [{"stream": s, "kind": k, "messages": n, "per_turn": round(n * per_1, 3)}
                for (s, k), n in sorted(msgs.items(), key=lambda kv: (kv[0][0], -kv[1]))]
    return {"cpu": cpu_rows, "cpu_note": cpu.get("note"), "statements": st_rows,
            "statements_note": st.get("note"), "messages": msg_rows}


# -- markdown ----------------------------------------------------------------------------------

def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table: numeric columns right-aligned, text columns left."""
    def numeric(i: int) -> bool:
        return all(isinstance(r[i], int | float) or r[i] is None for r in rows)

    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if rows and numeric(i) else "---"
                            for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines


def lag_table(raw: Mapping[str, Any]) -> list[str]:
    """Lag over time: a row every ~5 s, a column per projection that was ever behind, plus
    the ingest stream's growth (what the gateway stored per second) over the same interval."""
    samples = raw["samples"]
    busy = [n for n in raw["projections"]
            if any(lag_of(s["lag"].get(n, {})) for s in samples)]
    rows, last_t, last_seq = [], None, None
    for s in samples:
        if last_t is not None and s["t"] - last_t < TABLE_EVERY_S and s is not samples[-1]:
            continue
        rate = None
        if last_t is not None and last_seq is not None and s["t"] > last_t:
            rate = round((s["ingest_last_seq"] - last_seq) / (s["t"] - last_t), 1)
        phase = "load" if s["t"] <= raw["burst_end_t"] else "drain"
        rows.append([round(s["t"], 1), phase, rate,
                     *[lag_of(s["lag"].get(n, {})) for n in busy]])
        last_t, last_seq = s["t"], s["ingest_last_seq"]
    return _table(["t (s)", "phase", "ingest msgs/s", *busy], rows)


def _soak_lines(soak_fig: Mapping[str, Any]) -> list[str]:
    if not soak_fig.get("processes"):
        return []
    lines = ["", "## Memory, descriptors, connections (the soak)", "",
             f"From {soak_fig['from_s']:g} s (after the first minute) to {soak_fig['to_s']:g} s "
             f"of the burst, {soak_fig['samples']} samples.", ""]
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1%}"

    lines += _table(["process", "RSS MB first", "RSS MB last", "RSS growth", "RSS MB peak",
                     "PSS MB first", "PSS MB last", "PSS growth", "fds first", "fds last"],
                    [[p["process"], p["rss_mb_first"], p["rss_mb_last"], pct(p["rss_growth"]),
                      p["rss_mb_peak"], p.get("pss_mb_first"), p.get("pss_mb_last"),
                      pct(p.get("pss_growth")), p["fds_first"], p["fds_last"]]
                     for p in soak_fig["processes"]])
    lines += ["", "PSS counts a shared page once among the processes that map it (Postgres's "
              "shared buffers, the fork server's pages its services share); RSS summed over "
              "a process's children counts it once per child."]
    db = soak_fig.get("db_connections")
    if db:
        lines += ["", f"Database connections: {db['first']} first, {db['last']} last, "
                  f"{db['peak']} at most."]
    lag = soak_fig.get("lag")
    if lag:
        lines += [f"Pending messages, all projections: {lag['first_third_mean']:,} on average "
                  f"in the first third, {lag['last_third_mean']:,} in the last."]
    return lines


def markdown(raw: Mapping[str, Any], fig: Mapping[str, Any]) -> str:
    """report.md: the headline, then latency, projections, lag over time, the cost table."""
    plan, args = raw["plan"], raw["args"]
    lines = [f"# Load run {raw['stamp']}", "",
             f"Target: {raw['target']}. Plan: {plan['tenants']} tenants x "
             f"{plan['users_per_tenant']} users (Zipf s={plan['zipf']}), batches of "
             f"{plan['batch']}, seed {plan['seed']}; {args['users']} ingest users at "
             f"{'flat out' if not args['rate'] else str(args['rate']) + ' items/s'}, "
             f"{args['readers']} readers at {args['read_rate']} reads/s; "
             f"{args['duration']} s.", ""]
    drain = fig["drain_s"]
    lines += _table(["figure", "value"], [
        ["accepted items/s (send window)", fig["accepted_per_s"]],
        ["accepted turns/s", fig["turns_per_s"]],
        ["accepted items / turns", f"{fig['accepted']:,} / {fig['turns']:,}"],
        ["429 responses (ingest / reads), waited out and resent",
         f"{fig['rate_limited']:,} / {fig['read_rate_limited']:,}"],
        ["errors (non-2xx but 429, connection)", fig["errors"]],
        ["rejected / duplicate items", f"{fig['rejected']:,} / {fig['duplicates']:,}"],
        ["every projection caught up", "yes" if fig["all_caught_up"] else
         f"NO (within the {raw['drain_timeout_s']} s drain timeout)"],
        ["drain time after the burst (s)", drain],
        ["pipeline turns/s (first send to all caught up)", fig["pipeline_turns_per_s"]],
        ["raw acked JetStream publish/s (same NATS, same count and sizes)",
         fig["raw_acked_publish_per_s"]],
        ["**pipeline turns/s / raw acked publish/s**", fig["ratio_turns_to_raw"]],
        ["accepted items/s / raw acked publish/s", fig["ratio_accepted_to_raw"]],
    ])
    second = fig.get("second_tenant") or {}
    if second.get("at_s") is not None:
        lines += ["", f"A quiet tenant's \"{SENTENCE}\" sent {second['at_s']:g} s into the "
                  "burst reached its `prompt.context` in "
                  + (f"**{second['seconds']:.2f} s**." if second.get("seconds") is not None
                     else "**not within the probe's timeout** "
                     f"({second.get('error') or 'no error'}).")]
    if args["rate"]:
        lines += ["", f"At a set rate ({args['rate']} items/s) the pipeline ratio measures the "
                  "offered rate, not the ceiling: `--rate 0` (with enough tenants that the per-key "
                  "rate limit does not stop it first: see the 429s) measures that."]
    if raw["locust"].get("errors"):
        lines += ["", "Errors seen (a sample):", ""]
        lines += [f"- `{e}`" for e in raw["locust"]["errors"][:10]]
    lat = fig["latency"]
    lines += ["", "## Read latency (ms)", "",
              "The probe is the same client calling `prompt.context` for the same users, "
              "idle (before the burst) and under load; the other rows are locust's readers.", ""]
    calls = [("`prompt.context`, probe, idle", lat["idle_prompt_context"]),
             *[(f"`prompt.context`, probe, idle, answered from {source}", v)
               for source, v in (lat.get("idle_prompt_context_by_source") or {}).items()],
             ("`/healthz`, probe, idle", lat["idle_healthz"]),
             ("`prompt.context`, probe, under load", lat["load_prompt_context"]),
             *[(f"`prompt.context`, probe, under load, answered from {source}", v)
               for source, v in (lat.get("load_prompt_context_by_source") or {}).items()],
             *([("`/healthz`, probe, under load", lat["load_healthz"])]
               if (lat.get("load_healthz") or {}).get("n") else []),
             *[(f"`{m}`, locust readers, under load", v) for m, v in lat["readers"].items()]]
    lines += _table(["call", "n", "p50", "p95", "p99"],
                    [[name, v["n"], v["p50"], v["p95"], v["p99"]] for name, v in calls])
    served = fig.get("contexts") or {}
    if served.get("note"):
        lines += ["", f"How the gateway served `prompt.context` under load: {served['note']}."]
    elif served:
        lines += ["", "How the gateway served `prompt.context` from the burst to the drain: "
                      f"{served['hit']:,} from the context cache ({served['local']:,} of them "
                      f"from the gateway's memory), {served['miss']:,} misses "
                      f"built by the renderer, {served['forwarded']:,} with a request "
                      f"(forwarded); hits {_fmt(served['hit_ratio'])} of the calls that could "
                      "be."]
    lines += ["", "## Projections", ""]
    lines += _table(["projection", "service", "events", "peak lag", "caught up after burst (s)",
                     "events/s (first send to caught up)"],
                    [[r["projection"], r["service"], r["events"], r["peak_lag"],
                      r["caught_up_after_burst_s"], r["events_per_s"]]
                     for r in fig["projections"] if r["events"] or r["peak_lag"]])
    idle = [r["projection"] for r in fig["projections"] if not (r["events"] or r["peak_lag"])]
    if idle:
        lines += ["", f"No events for: {', '.join(idle)}."]
    lines += ["", "## Lag over time (messages pending per projection)", ""]
    lines += lag_table(raw)
    cost = fig["cost"]
    lines += _soak_lines(fig.get("soak") or {})
    lines += ["", "## Cost per turn", "", "### CPU seconds per 1,000 turns, per process", ""]
    if cost["cpu_note"]:
        lines.append(cost["cpu_note"])
    lines += _table(["process", "projections", "CPU s", "CPU s / 1k turns"],
                    [[r["process"], ", ".join(r["projections"]), r["cpu_s"],
                      r["cpu_s_per_1k_turns"]] for r in cost["cpu"]])
    lines += ["", "### Postgres statements per turn, per schema", ""]
    if cost["statements_note"]:
        lines.append(cost["statements_note"])
    else:
        lines += _table(["schema", "statements", "per turn"],
                        [[r["schema"], r["statements"], r["per_turn"]]
                         for r in cost["statements"]])
    lines += ["", "### Messages per turn, per stream and subject kind", ""]
    lines += _table(["stream", "kind", "messages", "per turn"],
                    [[r["stream"], r["kind"], r["messages"], r["per_turn"]]
                     for r in cost["messages"]])
    lines += ["", "Per turn means per accepted `TurnRecorded` of the burst; the other items of the "
              "mix are in the same totals (docs/load.md).", ""]
    return "\n".join(lines)
