"""The load mix and the report's arithmetic (tests/load): pure, no servers.

The mix must be reproducible (a report's change is the system's, not the dice's), skewed like a
shared platform's traffic, valid against the ingest contract the gateway enforces, and made
of what the brief of `make load` asks for (statements, corrections, tool calls, every item type);
the report must compute its figures from what was measured, never show an unmeasured one as 0.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from habitus.events.catalog import CATALOG
from tests.load import report
from tests.load.mix import CORRECTIONS, STATEMENTS, Mix, Plan, count_types, zipf_weights
from tests.load.snapshot import by_schema, context_outcomes_in, schema_of, untracked_url

CLOCK = itertools.count(1_764_460_800.0, 0.25)


def fixed_clock() -> float:
    return next(CLOCK)


def mix(stream: int = 0, **plan: Any) -> Mix:
    return Mix(Plan(prefix="t", **plan), stream, clock=lambda: 1_764_460_800.0)


def test_the_same_plan_and_stream_send_the_same_items_and_another_stream_others() -> None:
    first = [mix().batch("t-t0") for _ in range(5)]
    again = [mix().batch("t-t0") for _ in range(5)]
    other = [mix(stream=1).batch("t-t0") for _ in range(5)]
    assert first == again
    assert first != other


def test_zipf_weights_sum_to_one_and_fall_with_rank() -> None:
    weights = zipf_weights(10, 1.1)
    assert sum(weights) == pytest.approx(1.0)
    assert weights == sorted(weights, reverse=True)
    assert zipf_weights(4, 0.0) == [0.25] * 4
    with pytest.raises(ValueError):
        zipf_weights(0, 1.0)


def test_tenants_and_users_are_skewed() -> None:
    m = mix(tenants=4, users_per_tenant=40)
    tenants = Counter(m.tenant() for _ in range(4000))
    users = Counter(item["user_id"] for item in m.batch("t-t0", 4000))
    assert tenants.most_common(1)[0][0] == "t-t0"
    assert tenants["t-t0"] > 3 * tenants["t-t3"]
    assert users["u000"] > 10 * users["u039"] > 0


def test_a_batch_is_every_item_type_with_statements_corrections_and_tool_calls() -> None:
    items = mix().batch("t-t0", 2000)
    types = count_types(items)
    assert set(types) == {"TurnRecorded", "TraceCompleted", "EmailObserved", "DocumentIngested",
                          "FeedbackGiven", "ProviderProfileSynced"}
    assert 0.5 < types["TurnRecorded"] / len(items) < 0.7
    turns = [i["payload"] for i in items if i["type"] == "TurnRecorded"]
    assert any(any(s in t["user_message"] for s in STATEMENTS) for t in turns)
    corrections = [t for t in turns if "previous_assistant_at" in t]
    assert corrections and all(t["user_message"] in CORRECTIONS for t in corrections)
    assert all(t["previous_assistant_at"] < t["user_at"] <= t["assistant_at"]
               for t in corrections)
    assert any(t["tool_calls"] and not t["tool_calls"][0]["ok"] for t in turns)


def test_every_item_is_valid_for_the_ingest_contract() -> None:
    """As the gateway parses them (the catalog's payload models, strict)."""
    for item in mix().batch("t-t0", 600):
        CATALOG.spec(item["type"]).payload.model_validate(item["payload"], strict=True)


def test_feedback_is_about_a_trace_or_turn_the_same_user_sent_before() -> None:
    items = mix().batch("t-t0", 1500)
    seen: dict[str, set[str]] = {}
    for item in items:
        p, user = item["payload"], item["user_id"]
        if item["type"] == "TraceCompleted":
            seen.setdefault(user, set()).add(p["trace_id"])
        elif item["type"] == "TurnRecorded":
            seen.setdefault(user, set()).add(p["turn_id"])
        elif item["type"] == "FeedbackGiven":
            assert (p.get("trace_id") or p.get("turn_id")) in seen.get(user, set())
            assert item["event_id"]  # a retried batch stores a score once


def test_reads_are_the_four_calls_with_a_user() -> None:
    m = mix()
    calls = [m.read("t-t0") for _ in range(400)]
    assert {method for method, _ in calls} == {"prompt.context", "learning.list_facets",
                                                "memory.tool_rule_list", "habits.list"}
    assert all(params["user_id"].startswith("u") for _, params in calls)
    assert any("request" in params for method, params in calls if method == "prompt.context")


def test_the_plan_survives_its_trip_through_the_environment() -> None:
    plan = Plan(prefix="x", tenants=3, zipf=0.8, batch=7, seed=11)
    assert Plan.from_env(plan.to_env()) == plan
    assert plan.tenant_ids() == ["x-t0", "x-t1", "x-t2"]


# -- the report's arithmetic -------------------------------------------------------------------

def test_percentiles_by_nearest_rank() -> None:
    values = [i / 1000 for i in range(1, 101)]
    assert report.percentile(values, 50) == 0.05
    assert report.percentile(values, 99) == 0.099
    assert report.percentile([], 50) is None
    assert report.latency_ms([0.002, 0.004])["p50"] == 2.0


def test_the_probe_under_load_is_split_by_where_each_answer_came_from() -> None:
    split = report.by_source([0.001, 0.002, 0.090, 0.003, 0.050],
                             ["memory", "memory", "renderer", "cache", ""])
    assert {s: v["n"] for s, v in split.items()} == {"cache": 1, "memory": 2, "renderer": 1}
    assert split["renderer"]["p99"] == 90.0
    assert split["memory"]["p50"] == 1.0
    # a run whose gateway did not say, or whose lists do not pair up, is not split
    assert report.by_source([0.001], []) == {}


def entry(pending: int, seq: int = 10, checkpoint: int | None = 10) -> dict[str, Any]:
    behind = None if checkpoint is None else max(0, seq - checkpoint)
    return {"pending": pending, "ack_pending": 0, "behind": behind, "checkpoint": checkpoint,
            "stream_seq": seq}


def test_caught_up_is_the_first_sample_after_the_burst_that_stays_caught_up() -> None:
    samples = [{"t": t, "lag": {"a": entry(p), "b": entry(0)}}
               for t, p in [(0, 0), (1, 5), (2, 0), (3, 4), (4, 0), (5, 0)]]
    assert report.caught_up_at(samples, after=1.5) == 4
    assert report.caught_up_at(samples, after=1.5, names=["b"]) == 2
    samples.append({"t": 6, "lag": {"a": entry(1), "b": entry(0)}})
    assert report.caught_up_at(samples, after=1.5) is None


def test_a_projection_that_never_claimed_its_subjects_is_not_caught_up() -> None:
    assert not report.is_caught_up(entry(0, seq=10, checkpoint=None))
    assert report.is_caught_up(entry(0, seq=0, checkpoint=None))
    assert not report.is_caught_up(entry(0, seq=12, checkpoint=10))


def test_statements_are_charged_to_the_schema_they_name() -> None:
    schemas = ["learning", "profile", "tools"]
    assert schema_of("SELECT * FROM learning.facets WHERE x = $1", schemas) == "learning"
    assert schema_of('INSERT INTO "profile".documents VALUES ($1)', schemas) == "profile"
    assert schema_of("SELECT tools_count FROM x.learning_notes", schemas) != "tools"
    assert schema_of("BEGIN", schemas) == "(transaction control)"
    assert schema_of("SELECT $1", schemas) == "(SELECT 1: liveness checks)"
    before = {(1, "SELECT 1 FROM tools.rules"): 5}
    after = {(1, "SELECT 1 FROM tools.rules"): 8, (2, "COMMIT"): 4}
    assert by_schema(before, after, schemas) == {"tools": 3, "(transaction control)": 4}


def test_the_runners_own_statements_are_left_out_by_its_connection_options() -> None:
    url = untracked_url("postgresql://postgres@127.0.0.1:5/habitus?sslmode=disable")
    assert "sslmode=disable" in url
    assert "options=-c%20pg_stat_statements.track%3Dnone" in url


def raw_run(cpu: dict[str, Any]) -> dict[str, Any]:
    lag = {"producers.candidates": entry(0)}
    return {
        "stamp": "s", "target": "http://gw", "t0": 1000.0, "burst_end_t": 10.0,
        "drain_timeout_s": 60, "plan": {"tenants": 2, "users_per_tenant": 3, "zipf": 1.1,
                                        "batch": 20, "seed": 7},
        "args": {"users": 2, "rate": 100, "readers": 1, "read_rate": 5, "duration": 10},
        "locust": {"totals": {"accepted": 1000, "rate_limited": 3, "errors": 0},
                   "accepted_by_type": {"TurnRecorded": 500}, "first_at": 1000.0,
                   "last_at": 1010.0, "read_latencies_s": {"prompt.context": [0.01, 0.02]},
                   "errors": []},
        "samples": [{"t": 5.0, "ingest_last_seq": 400,
                     "lag": {"producers.candidates": entry(30)}},
                    {"t": 10.0, "ingest_last_seq": 1000, "lag": lag},
                    {"t": 12.5, "ingest_last_seq": 1000, "lag": lag}],
        "projections": {"producers.candidates": {
            "service": "producers", "schema": "producers",
            "filters": ["habitus.v1.ingest.turn.*.*", "habitus.v1.ingest.email.*.*"]}},
        "services": {"producers": ["producers.candidates"]},
        "idle": {"prompt_context_s": [0.004], "healthz_s": [0.001]},
        "under_load": {"prompt_context_s": [0.008, 0.002], "prompt_context_from": ["renderer",
                                                                                 "memory"],
                       "healthz_s": [0.003, 0.005]},
        "cpu": cpu, "load_cpu_s": 2.0,
        "statements": {"note": None, "by_schema": {"producers": 1500}},
        "messages": {"before": [], "after": [["HABITUS_INGEST", "turn", 500],
                                             ["HABITUS_INGEST", "email", 100],
                                             ["HABITUS_EVENTS", "CandidateEmitted", 250]]},
        "baseline": {"raw_acked_publish_per_s": 10_000.0, "messages": 1000},
    }


def test_the_figures_come_from_the_measurements() -> None:
    raw = raw_run({"before": {"producers": 1.0}, "after": {"producers": 3.0}, "note": None})
    fig = report.summarise(raw)
    assert fig["accepted_per_s"] == 100.0 and fig["turns_per_s"] == 50.0
    assert fig["rate_limited"] == 3 and fig["all_caught_up"]
    assert fig["drain_s"] == 0.0  # caught up at the sample that ended the burst
    assert fig["pipeline_turns_per_s"] == 50.0
    assert fig["ratio_turns_to_raw"] == 0.005
    (row,) = fig["projections"]
    assert row["events"] == 600 and row["peak_lag"] == 30
    cost = fig["cost"]
    assert cost["cpu"][0] == {"process": "producers", "projections": ["producers.candidates"],
                              "cpu_s": 2.0, "cpu_s_per_1k_turns": 4.0}
    assert cost["statements"] == [{"schema": "producers", "statements": 1500, "per_turn": 3.0}]
    assert {"stream": "HABITUS_EVENTS", "kind": "CandidateEmitted", "messages": 250,
            "per_turn": 0.5} in cost["messages"]
    text = report.markdown(raw, fig)
    assert "| producers | producers.candidates | 2 | 4 |" in text
    assert "| `prompt.context`, probe, under load, answered from renderer | 1 | 8 |" in text
    assert "**pipeline turns/s / raw acked publish/s** | 0.005 |" in text
    assert "| `/healthz`, probe, under load | 2 | 3 |" in text


def test_cpu_not_measured_is_said_not_zeroed() -> None:
    raw = raw_run({"before": {}, "after": {}, "note": "not measured: no pids"})
    fig = report.summarise(raw)
    text = report.markdown(raw, fig)
    assert "not measured: no pids" in text
    assert all(r["process"].startswith("(load generator") for r in fig["cost"]["cpu"])


def _resources(t: float, rss_mb: float, fds: int, conns: int) -> dict[str, Any]:
    return {"t": t, "processes": {"gateway": {"rss": int(rss_mb * 2**20), "fds": fds,
                                              "processes": 1}},
            "db_connections": conns}


def _pending(t: float, n: int) -> dict[str, Any]:
    return {"t": t, "lag": {"learning.cache": {"pending": n, "ack_pending": 0, "behind": n,
                                               "checkpoint": 1, "stream_seq": 1 + n}}}


def test_the_soak_compares_the_first_settled_sample_with_the_last_of_the_burst() -> None:
    resources = [_resources(5, 80, 30, 12),     # the first minute: pools and caches filling
                 _resources(60, 100, 40, 20), _resources(900, 104, 40, 21),
                 _resources(1800, 108, 41, 20),
                 _resources(1830, 300, 90, 40)]  # after the burst: not counted
    samples = [_pending(t, 10) for t in range(60, 601, 60)] + \
              [_pending(t, 500) for t in range(660, 1801, 60)]
    fig = report.soak(resources, samples, burst_end=1800.0)
    (gateway,) = fig["processes"]
    assert (fig["from_s"], fig["to_s"]) == (60, 1800)
    assert gateway["rss_growth"] == pytest.approx(0.08)
    assert gateway["rss_mb_peak"] == 108.0 and (gateway["fds_first"], gateway["fds_last"]) == (
        40, 41)
    assert fig["db_connections"] == {"first": 20, "last": 20, "peak": 21}
    # a backlog that grew: the last third's mean is far above the first's
    assert fig["lag"]["first_third_mean"] < 100 < fig["lag"]["last_third_mean"]
    assert "+8.0%" in "\n".join(report._soak_lines(fig))


def test_a_short_run_has_no_soak_figures() -> None:
    fig = report.soak([_resources(1, 80, 30, 12)], [], burst_end=10.0)
    assert fig["processes"] == [] and report._soak_lines(fig) == []


METRICS_TEXT = """# HELP habitus_gateway_prompt_context_total prompt.context calls by how served.
# TYPE habitus_gateway_prompt_context_total counter
habitus_gateway_prompt_context_total{outcome="miss"} 703.0
habitus_gateway_prompt_context_total{outcome="hit"} 890.0
habitus_gateway_prompt_context_total{outcome="forwarded"} 200.0
# HELP habitus_gateway_prompt_context_local_total hits from memory.
# TYPE habitus_gateway_prompt_context_local_total counter
habitus_gateway_prompt_context_local_total 850.0
# HELP habitus_http_requests_total other
# TYPE habitus_http_requests_total counter
habitus_http_requests_total{route="/healthz"} 5.0
"""


def test_how_the_gateway_served_contexts_is_the_difference_of_its_counters() -> None:
    before = context_outcomes_in(METRICS_TEXT)
    assert before == {"miss": 703.0, "hit": 890.0, "forwarded": 200.0, "local": 850.0}
    after = {"miss": 803.0, "hit": 1_190.0, "forwarded": 250.0, "local": 1_100.0}
    assert report.context_outcomes({"before": before, "after": after}) == {
        "hit": 300, "local": 250, "miss": 100, "forwarded": 50, "hit_ratio": 0.75}
    # a label first seen during the burst counts from zero
    assert report.context_outcomes({"before": {"hit": 10.0}, "after": {"hit": 12.0,
                                                                      "miss": 2.0}}) == {
        "hit": 2, "local": 0, "miss": 2, "forwarded": 0, "hit_ratio": 0.5}
    assert report.context_outcomes({"note": "not measured: no gateway"}) == {
        "note": "not measured: no gateway"}
