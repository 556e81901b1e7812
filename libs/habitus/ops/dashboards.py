"""The Grafana dashboards, as code (grafana-foundation-sdk), and the files they are written to.

    python -m habitus.ops.dashboards --write     # regenerate deploy/grafana/dashboards/*.json
    python -m habitus.ops.dashboards --check     # exit 1 when a checked-in file differs

Every panel queries the one Prometheus datasource Grafana is provisioned with (uid
`prometheus`, deploy/grafana/provisioning/datasources/prometheus.yaml). Two template
variables filter most panels: `service` (the scrape target's `service` label, which Prometheus
adds) and `projection`. Rates use `$__rate_interval` only.

For checks against a live Prometheus: `dashboard_queries()` lists every panel query, and
`dashboard_metric_names()` every metric (sample) name the dashboards use, template variables
included; `runnable(expr)` turns a panel query into one Prometheus can run as is (variables
replaced by match-alls, `$__rate_interval` by one minute).

Long on purpose: the seven dashboards are data, panel after panel, read top to bottom beside
Grafana; the builder and the checks are the last 160 lines.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)

#: the provisioned datasource's fixed uid (provisioning/datasources/prometheus.yaml)
DATASOURCE_UID = "prometheus"
DATASOURCE = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
SCHEMA_VERSION = 39
#: deploy/grafana/dashboards, from the repository root
OUT_DIR = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "dashboards"

S = 'service=~"$service"'
PJ = 'projection=~"$projection"'
RI = "$__rate_interval"


def rate(metric: str, selector: str = S) -> str:
    return f"rate({metric}{{{selector}}}[{RI}])"


def quantile(q: float, metric: str, by: str = "", selector: str = S) -> str:
    labels = ", ".join(x for x in ("le", by) if x)
    return f"histogram_quantile({q}, sum by ({labels}) ({rate(metric + '_bucket', selector)}))"


@dataclass(frozen=True)
class Panel:
    title: str
    #: (PromQL, legend) per target
    queries: Sequence[tuple[str, str]]
    unit: str
    description: str = ""
    kind: str = "timeseries"  # or "stat"
    width: int = 12
    height: int = 8


@dataclass(frozen=True)
class Group:
    title: str
    #: what the group answers (deploy/grafana/README.md says it too)
    answers: str
    panels: Sequence[Panel]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    groups: Sequence[Group]
    variables: Sequence[str] = ("service", "projection")
    tags: Sequence[str] = field(default=("habitus",))


#: counters of what a healthy system rarely does (dead letters, retries, refusals): their
#: series appear only once it happens, so their panels read 0 until then, not "No data" (which
#: an operator cannot tell from a broken scrape)
QUIET_WHEN_HEALTHY = (
    "habitus_dlq_events_total", "habitus_projection_redelivered_events_total",
    "habitus_projection_republished_events_total", "habitus_projection_transient_retries_total",
    "habitus_projection_keys_unavailable_total", "habitus_extractor_quarantined_total",
    "habitus_habits_observations_skipped_total",
    "habitus_llm_budget_exhausted_total", "habitus_llm_structured_fallbacks_total",
)
#: filters that match only failures (a handler's non-acked messages, 5xx answers)
_FAILURE_FILTERS = ('status!="acked"', 'status=~"5.."')


def zero_when_quiet(expr: str) -> str:
    if any(m in expr for m in QUIET_WHEN_HEALTHY) or any(f in expr for f in _FAILURE_FILTERS):
        return f"({expr}) or vector(0)"
    return expr


def ts(title: str, *queries: tuple[str, str], unit: str, description: str = "",
       width: int = 12) -> Panel:
    return Panel(title, tuple((zero_when_quiet(q), legend) for q, legend in queries), unit,
                 description, "timeseries", width)


def st(title: str, query: str, *, unit: str, description: str = "") -> Panel:
    return Panel(title, ((zero_when_quiet(query), ""),), unit, description, "stat", 6, 4)


# --- The dashboards --------------------------------------------------------------------------

OVERVIEW = Dashboard(
    "habitus-overview", "Habitus overview",
    "Gateway ingest and RPC, projection throughput and lag, dead letters, message handlers.",
    [
        Group("Now", "Is anything on fire: ingest refused, projections behind, dead letters.", [
            st("Ingest items/s",
               f"sum({rate('habitus_gateway_ingest_items_total')})", unit="ops"),
            st("Items rejected/s",
               f"sum({rate('habitus_gateway_ingest_items_total', S + ',result=' + chr(34) + 'rejected' + chr(34))})",  # noqa: E501
               unit="ops"),
            st("Most pending events", f"max(habitus_projection_pending_events{{{S}}})",
               unit="short", description="The projection furthest behind (undelivered)."),
            st("Dead letters/s", f"sum({rate('habitus_dlq_events_total')})", unit="ops"),
        ]),
        Group("Gateway", "What clients send and how fast the gateway answers.", [
            ts("Ingest items by type and result",
               (f"sum by (type, result) ({rate('habitus_gateway_ingest_items_total')})",
                "{{type}} {{result}}"), unit="ops", width=8),
            ts("HTTP latency",
               (quantile(0.5, "habitus_gateway_http_request_duration_seconds"), "p50"),
               (quantile(0.99, "habitus_gateway_http_request_duration_seconds"), "p99"),
               unit="s", width=8),
            ts("RPC calls by outcome",
               (f"sum by (outcome) ({rate('habitus_gateway_rpc_requests_total')})",
                "{{outcome}}"), unit="ops", width=8),
            ts("Event loop lag p99 by process",
               (quantile(0.99, "habitus_event_loop_lag_seconds", "process"), "{{process}}"),
               unit="s", width=24,
               description="How late each process's event loop runs what is due: the wait "
                           "before any request or delivery it handles starts, for the loop "
                           "or for a core."),
        ]),
        Group("Projections", "Are the read models keeping up with the streams.", [
            ts("Applied events/s",
               (f"sum by (projection) ({rate('habitus_projection_applied_events_total', PJ)})",
                "{{projection}}"), unit="ops", width=8),
            ts("Batch duration p99",
               (quantile(0.99, "habitus_projection_batch_duration_seconds", "projection", PJ),
                "{{projection}}"), unit="s", width=8),
            ts("Pending events",
               (f"max by (projection) (habitus_projection_pending_events{{{PJ}}})",
                "{{projection}}"), unit="short", width=8),
            ts("Checkpoint (stream sequence)",
               (f"max by (projection) (habitus_projection_checkpoint_seq{{{PJ}}})",
                "{{projection}}"), unit="short"),
            ts("Redeliveries at or below the checkpoint",
               (f"sum by (projection) "
                f"({rate('habitus_projection_redelivered_events_total', PJ)})",
                "{{projection}}"), unit="ops"),
        ]),
        Group("Handlers and dead letters", "Which message handlers fail, and what is "
              "dead-lettered.", [
            ts("Dead letters by consumer and reason",
               (f"sum by (consumer, reason) ({rate('habitus_dlq_events_total')})",
                "{{consumer}} {{reason}}"), unit="ops", width=8),
            ts("Handled messages by status",
               (f"sum by (app_name, status) "
                f"({rate('faststream_received_processed_messages_total')})",
                "{{app_name}} {{status}}"), unit="ops", width=8),
            ts("Handler duration p99",
               (quantile(0.99, "faststream_received_processed_messages_duration_seconds",
                         "app_name"), "{{app_name}}"), unit="s", width=8),
            ts("Received messages",
               (f"sum by (app_name) ({rate('faststream_received_messages_total')})",
                "received {{app_name}}"), unit="ops", width=24),
        ]),
    ],
)

PIPELINE = Dashboard(
    "habitus-pipeline", "Habitus pipeline",
    "Per handler RED (FastStream), per projection throughput, consumer pending and "
    "ack-pending, checkpoint lag, retries, dead letters.",
    [
        Group("Handlers (RED)", "Rate, errors and duration of every message handler.", [
            ts("Messages received by handler",
               (f"sum by (app_name, handler) ({rate('faststream_received_messages_total')})",
                "{{app_name}} {{handler}}"), unit="ops", width=8),
            ts("Handler errors",
               (f"sum by (app_name, handler) ("
                f"{rate('faststream_received_processed_messages_total', S + ',status!=' + chr(34) + 'acked' + chr(34))})",  # noqa: E501
                "{{app_name}} {{handler}}"), unit="ops", width=8,
               description="Messages a handler did not acknowledge (nacked, rejected, error)."),
            ts("Handler duration p95",
               (quantile(0.95, "faststream_received_processed_messages_duration_seconds",
                         "app_name, handler"), "{{app_name}} {{handler}}"),
               unit="s", width=8),
        ]),
        Group("Projections", "Throughput and position of every projection.", [
            ts("Applied events/s",
               (f"sum by (projection) ({rate('habitus_projection_applied_events_total', PJ)})",
                "{{projection}}"), unit="ops", width=8),
            ts("Batch duration p50 / p99",
               (quantile(0.5, "habitus_projection_batch_duration_seconds", "projection", PJ),
                "p50 {{projection}}"),
               (quantile(0.99, "habitus_projection_batch_duration_seconds", "projection", PJ),
                "p99 {{projection}}"), unit="s", width=8),
            ts("Checkpoint lag",
               (f"max by (projection) (habitus_projection_lag_events{{{PJ}}})",
                "{{projection}}"), unit="short", width=8,
               description="The stream's last sequence on the projection's subjects minus "
                           "its checkpoint."),
            ts("Consumer pending",
               (f"max by (projection) (habitus_projection_pending_events{{{PJ}}})",
                "{{projection}}"), unit="short", width=8),
            ts("Consumer ack-pending",
               (f"max by (projection) (habitus_projection_ack_pending_events{{{PJ}}})",
                "{{projection}}"), unit="short", width=8),
            ts("Checkpoint (stream sequence)",
               (f"max by (projection) (habitus_projection_checkpoint_seq{{{PJ}}})",
                "{{projection}}"), unit="short", width=8),
        ]),
        Group("Retries and dead letters", "What was retried, seen twice or given up on.", [
            ts("Transient retries",
               (f"sum by (projection) "
                f"({rate('habitus_projection_transient_retries_total', PJ)})",
                "{{projection}}"),
               (f"sum by (projection) "
                f"({rate('habitus_projection_keys_unavailable_total', PJ)})",
                "keys unavailable {{projection}}"), unit="ops", width=8),
            ts("Redelivered and republished",
               (f"sum by (projection) "
                f"({rate('habitus_projection_redelivered_events_total', PJ)})",
                "redelivered {{projection}}"),
               (f"sum by (projection) "
                f"({rate('habitus_projection_republished_events_total', PJ)})",
                "republished {{projection}}"), unit="ops", width=8),
            ts("Dead letters by consumer and reason",
               (f"sum by (consumer, reason) ({rate('habitus_dlq_events_total')})",
                "{{consumer}} {{reason}}"), unit="ops", width=8),
        ]),
    ],
)

#: prompt.context answered from the context cache, by the renderer or by the gateway (either
#: may have no series yet: `or vector(0)` keeps the sum from going empty)
_context_hits = (
    f"(sum({rate('habitus_prompt_context_cache_hits_total')}) or vector(0)) + "
    f"(sum({rate('habitus_gateway_prompt_context_total', S + ',outcome=' + chr(34) + 'hit' + chr(34))}) "  # noqa: E501
    f"or vector(0))")

LEARNING = Dashboard(
    "habitus-learning", "Habitus learning",
    "Extraction, the learning cache's facets and rebuilds, PROFILE.md renders and "
    "prompt.context.",
    [
        Group("Extraction", "Are windows extracted, and what validation refuses.", [
            ts("Windows by kind and outcome",
               (f"sum by (kind, outcome) ({rate('habitus_extractor_windows_total')})",
                "{{kind}} {{outcome}}"), unit="ops", width=8),
            ts("Window backlog",
               (f"max by (state) (habitus_extractor_windows_backlog{{{S}}})", "{{state}}"),
               unit="short", width=8),
            ts("Candidates emitted and quarantined",
               (f"sum by (kind) ({rate('habitus_extractor_candidates_total')})",
                "candidates {{kind}}"),
               (f"sum by (reason) ({rate('habitus_extractor_quarantined_total')})",
                "quarantined {{reason}}"), unit="ops", width=8),
        ]),
        Group("Learning cache", "How many facets are held, and how long rebuilds take.", [
            ts("Facets by state",
               (f"sum by (state) (max by (state, class) (habitus_learning_facets{{{S}}}))",
                "{{state}}"), unit="short", width=8),
            ts("Active facets by class",
               (f'max by (class) (habitus_learning_facets{{{S},state="active"}})',
                "{{class}}"), unit="short", width=8),
            ts("Rebuild duration p50 / p95",
               (quantile(0.5, "habitus_learning_rebuild_duration_seconds", "trigger"),
                "p50 {{trigger}}"),
               (quantile(0.95, "habitus_learning_rebuild_duration_seconds", "trigger"),
                "p95 {{trigger}}"), unit="s", width=8),
            ts("Rebuilds/s by trigger",
               (f"sum by (trigger) "
                f"({rate('habitus_learning_rebuild_duration_seconds_count')})",
                "{{trigger}}"), unit="ops", width=24),
        ]),
        Group("Profile and prompt.context", "PROFILE.md versions written, and the agent's "
              "hot path: its latency and cache hit ratio.", [
            ts("PROFILE.md renders by origin",
               (f"sum by (origin) ({rate('habitus_profile_renders_total')})", "{{origin}}"),
               unit="ops", width=8),
            ts("prompt.context latency",
               (quantile(0.5, "habitus_prompt_context_duration_seconds"), "p50"),
               (quantile(0.95, "habitus_prompt_context_duration_seconds"), "p95"),
               (quantile(0.99, "habitus_prompt_context_duration_seconds"), "p99"),
               unit="s", width=8),
            # Hits are served by the gateway (most) and by the renderer (a call with a
            # request, or an entry cached between the gateway's read and the renderer's).
            ts("prompt.context cache hit ratio",
               (f"({_context_hits}) / (({_context_hits}) + "
                f"sum({rate('habitus_prompt_context_cache_misses_total')}))", "hit ratio"),
               unit="percentunit", width=8),
        ]),
    ],
    variables=("service",),
)

TOOLS_HABITS = Dashboard(
    "habitus-tools-habits", "Habitus tools and habits",
    "Tool rules captured, the habits ledger, review queue, Analyze and selection.",
    [
        Group("Tool memory", "Which tool rules are learned, and from where.", [
            ts("Tool rules by source",
               (f"sum by (source) ({rate('habitus_tool_rules_captured_total')})",
                "{{source}}"), unit="ops", width=24),
        ]),
        Group("Habits ledger", "How many habits there are and what waits for a person.", [
            st("Review queue", f"max(habitus_habits_review_queue{{{S}}})", unit="short"),
            st("Active habits", f'max(habitus_habits{{{S},status="active"}})', unit="short"),
            st("Observations captured/s",
               f"sum({rate('habitus_habits_observations_captured_total')})", unit="ops"),
            st("Selections steered/s",
               f"sum({rate('habitus_habits_selections_total', S + ',outcome=' + chr(34) + 'steered' + chr(34))})",  # noqa: E501
               unit="ops"),
            ts("Habits by status",
               (f"max by (status) (habitus_habits{{{S}}})", "{{status}}"), unit="short",
               width=8),
            ts("Ledger transitions by type",
               (f"sum by (type) ({rate('habitus_habits_transitions_total')})", "{{type}}"),
               unit="ops", width=8),
            ts("Observations skipped and expired",
               (f"sum by (reason) ({rate('habitus_habits_observations_skipped_total')})",
                "skipped {{reason}}"),
               (f"sum({rate('habitus_habits_observations_expired_total')})", "expired"),
               unit="ops", width=8),
        ]),
        Group("Analyze and selection", "What Analyze proposes, and how habits.select does.", [
            ts("Analyze batches by outcome",
               (f"sum by (outcome) ({rate('habitus_habits_analyze_batches_total')})",
                "{{outcome}}"), unit="ops", width=8),
            ts("Proposals by outcome",
               (f"sum by (outcome) ({rate('habitus_habits_proposals_total')})",
                "{{outcome}}"), unit="ops", width=8),
            ts("Selections by outcome",
               (f"sum by (outcome) ({rate('habitus_habits_selections_total')})",
                "{{outcome}}"), unit="ops", width=8),
            ts("habits.select latency",
               (quantile(0.5, "habitus_habits_select_seconds"), "p50"),
               (quantile(0.95, "habitus_habits_select_seconds"), "p95"),
               unit="s", width=24),
        ]),
    ],
    variables=("service",),
)

ROUTING = Dashboard(
    "habitus-routing", "Habitus routing",
    "router.select_model decisions by policy and model, and the reward of stored traces.",
    [
        Group("Decisions", "Which policies route, and to which models.", [
            ts("Decisions by policy",
               (f"sum by (policy) ({rate('habitus_router_decisions_total')})", "{{policy}}"),
               unit="ops"),
            ts("Decisions by model",
               (f"sum by (model) ({rate('habitus_router_decisions_total')})", "{{model}}"),
               unit="ops"),
        ]),
        Group("Reward", "Whether the routed models do well (reward in [0, 1]).", [
            ts("Mean reward by model",
               (f"sum by (model) ({rate('habitus_router_reward_sum')}) / "
                f"sum by (model) ({rate('habitus_router_reward_count')})", "{{model}}"),
               unit="percentunit", width=8),
            ts("Reward p10 / p50",
               (quantile(0.1, "habitus_router_reward"), "p10"),
               (quantile(0.5, "habitus_router_reward"), "p50"), unit="percentunit",
               width=8),
            ts("Rewarded traces/s by model",
               (f"sum by (model) ({rate('habitus_router_reward_count')})", "{{model}}"),
               unit="ops", width=8),
        ]),
    ],
    variables=("service",),
)

GATEWAY = Dashboard(
    "habitus-gateway", "Habitus gateway",
    "HTTP RED by route, ingest by type and result, rejected items by reason, RPC by method.",
    [
        Group("HTTP (RED)", "Request rate, errors and latency per route.", [
            ts("Requests by route and status",
               (f"sum by (route, status) "
                f"({rate('habitus_gateway_http_request_duration_seconds_count')})",
                "{{route}} {{status}}"), unit="reqps", width=8),
            ts("5xx ratio",
               (f"sum({rate('habitus_gateway_http_request_duration_seconds_count', S + ',status=~' + chr(34) + '5..' + chr(34))}) / "  # noqa: E501
                f"sum({rate('habitus_gateway_http_request_duration_seconds_count')})",
                "5xx"), unit="percentunit", width=8),
            ts("Latency p50 / p99 by route",
               (quantile(0.5, "habitus_gateway_http_request_duration_seconds", "route"),
                "p50 {{route}}"),
               (quantile(0.99, "habitus_gateway_http_request_duration_seconds", "route"),
                "p99 {{route}}"), unit="s", width=8),
        ]),
        Group("Ingest", "What is sent, and why items are refused.", [
            ts("Ingest items by type and result",
               (f"sum by (type, result) ({rate('habitus_gateway_ingest_items_total')})",
                "{{type}} {{result}}"), unit="ops"),
            ts("Rejected items by reason",
               (f"sum by (reason) ({rate('habitus_gateway_ingest_rejected_total')})",
                "{{reason}}"), unit="ops"),
        ]),
        Group("RPC", "Calls forwarded to the services, how they end, and the prompt.context hits "
              "the gateway served itself.", [
            ts("RPC calls by method",
               (f"sum by (method) ({rate('habitus_gateway_rpc_requests_total')})",
                "{{method}}"), unit="ops"),
            ts("RPC calls by outcome",
               (f"sum by (outcome) ({rate('habitus_gateway_rpc_requests_total')})",
                "{{outcome}}"), unit="ops"),
            ts("prompt.context by how the gateway served it",
               (f"sum by (outcome) ({rate('habitus_gateway_prompt_context_total')})",
                "{{outcome}}"),
               (f"sum({rate('habitus_gateway_prompt_context_local_total')})",
                "hit from memory"), unit="ops",
               description="hit: from the context cache, without the renderer (from memory: "
                           "the part the gateway answered without Redis); miss and "
                           "forwarded: answered by the renderer."),
            ts("Gateway processes told of context changes",
               (f"sum({'habitus_gateway_context_tracking_up{' + S + '}'})", "tracking"),
               unit="short",
               description="Processes whose Redis tracking connection is up: only they serve "
                           "prompt.context from memory; the others read Redis for every hit."),
        ]),
    ],
    variables=("service",),
)

LLM = Dashboard(
    "habitus-llm", "Habitus LLM",
    "Model calls, retries, tokens, latency, failures and budget, per calling service.",
    [
        Group("Calls", "How many calls, how many fail, how many HTTP attempts they take.", [
            st("Failure ratio",
               f"1 - sum({rate('habitus_llm_calls_total', S + ',outcome=' + chr(34) + 'ok' + chr(34))}) / sum({rate('habitus_llm_calls_total')})",  # noqa: E501
               unit="percentunit"),
            st("Lowest budget left (calls)",
               f'min(habitus_llm_budget_remaining_ratio{{{S},budget="calls"}})',
               unit="percentunit"),
            st("Lowest budget left (tokens)",
               f'min(habitus_llm_budget_remaining_ratio{{{S},budget="tokens"}})',
               unit="percentunit"),
            st("Budget refusals/s", f"sum({rate('habitus_llm_budget_exhausted_total')})",
               unit="ops"),
            ts("Calls by service and outcome",
               (f"sum by (service, outcome) ({rate('habitus_llm_calls_total')})",
                "{{service}} {{outcome}}"), unit="ops", width=8),
            ts("HTTP attempts by outcome",
               (f"sum by (service, outcome) ({rate('habitus_llm_attempts_total')})",
                "{{service}} {{outcome}}"), unit="ops", width=8),
            ts("Call duration p50 / p95",
               (quantile(0.5, "habitus_llm_call_duration_seconds", "service"),
                "p50 {{service}}"),
               (quantile(0.95, "habitus_llm_call_duration_seconds", "service"),
                "p95 {{service}}"), unit="s", width=8),
        ]),
        Group("Tokens and budget", "What the calls cost and how much of today is left.", [
            ts("Tokens by service and direction",
               (f"sum by (service, direction) ({rate('habitus_llm_tokens_total')})",
                "{{service}} {{direction}}"), unit="short", width=8),
            ts("Budget left by service",
               (f"min by (service, budget) (habitus_llm_budget_remaining_ratio{{{S}}})",
                "{{service}} {{budget}}"), unit="percentunit", width=8),
            ts("Budget refusals and structured-output fallbacks",
               (f"sum by (service, budget) ({rate('habitus_llm_budget_exhausted_total')})",
                "refused {{service}} {{budget}}"),
               (f"sum by (service) ({rate('habitus_llm_structured_fallbacks_total')})",
                "fallback {{service}}"), unit="ops", width=8),
        ]),
    ],
    variables=("service",),
)

DASHBOARDS: tuple[Dashboard, ...] = (OVERVIEW, PIPELINE, LEARNING, TOOLS_HABITS, ROUTING,
                                     GATEWAY, LLM)

VARIABLES = {
    "service": ("Service", "label_values(python_info, service)"),
    "projection": ("Projection", "label_values(habitus_projection_checkpoint_seq, projection)"),
}


# --- Building --------------------------------------------------------------------------------

def _target(expr: str, legend: str, ref: str) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE).range()
    return q.legend_format(legend) if legend else q


def _panel(p: Panel, panel_id: int) -> timeseries.Panel | stat.Panel:
    built: timeseries.Panel | stat.Panel
    if p.kind == "stat":
        built = (stat.Panel().graph_mode(common.BigValueGraphMode.AREA)
                 .reduce_options(common_builder.ReduceDataOptions().calcs(["lastNotNull"])))
    else:
        built = (timeseries.Panel().fill_opacity(10)
                 .legend(common_builder.VizLegendOptions().show_legend(True)
                         .display_mode(common.LegendDisplayMode.LIST)
                         .placement(common.LegendPlacement.BOTTOM)))
    built = (built.id(panel_id).title(p.title).datasource(DATASOURCE).unit(p.unit)
             .span(p.width).height(p.height))
    if p.description:
        built = built.description(p.description)
    for i, (expr, legend) in enumerate(p.queries):
        built = built.with_target(_target(expr, legend, chr(ord("A") + i)))
    return built


def _variable(name: str) -> dash.QueryVariable:
    label, query = VARIABLES[name]
    return (dash.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
            .include_all(True).multi(True).all_value(".*"))


def build(d: Dashboard) -> dict[str, object]:
    """The dashboard's JSON model (what Grafana provisions from the file)."""
    b = (dash.Dashboard(d.title).uid(d.uid).description(d.description).tags(list(d.tags))
         .readonly().tooltip(DashboardCursorSync.CROSSHAIR).time("now-1h", "now")
         .refresh("30s").timezone("browser"))
    for name in d.variables:
        b = b.with_variable(_variable(name))
    panel_id = 1
    for group in d.groups:
        row = dash.Row(group.title).id(panel_id)
        panel_id += 1
        for p in group.panels:
            row = row.with_panel(_panel(p, panel_id))
            panel_id += 1
        b = b.with_row(row)
    model = b.build()
    model.schema_version = SCHEMA_VERSION
    data: dict[str, object] = json.loads(json.dumps(model, cls=JSONEncoder))
    return _flatten_rows(data)


def _flatten_rows(data: dict[str, object]) -> dict[str, object]:
    """Expanded rows hold no panels in Grafana's model: the row's panels follow it."""
    flat: list[object] = []
    panels = data.get("panels")
    assert isinstance(panels, list)
    for panel in panels:
        assert isinstance(panel, dict)
        inner = panel.pop("panels", []) if panel.get("type") == "row" else []
        if panel.get("type") == "row":
            panel["panels"] = []
            panel["collapsed"] = False
        flat.append(panel)
        flat.extend(inner)
    data["panels"] = flat
    return data


def render(d: Dashboard) -> str:
    return json.dumps(build(d), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def file_name(d: Dashboard) -> str:
    return f"{d.uid}.json"


def write(out_dir: Path = OUT_DIR) -> list[Path]:
    """Write every dashboard; remove JSON files there that no dashboard writes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for d in DASHBOARDS:
        path = out_dir / file_name(d)
        path.write_text(render(d), encoding="utf-8")
        written.append(path)
    for stale in set(out_dir.glob("*.json")) - set(written):
        stale.unlink()
    return written


def stale(out_dir: Path = OUT_DIR) -> list[str]:
    """Files that differ from what `write` would write (missing and extra ones included)."""
    wanted = {file_name(d): render(d) for d in DASHBOARDS}
    found = {p.name: p.read_text(encoding="utf-8") for p in out_dir.glob("*.json")}
    return sorted(n for n in wanted.keys() | found.keys() if wanted.get(n) != found.get(n))


# --- For checks ------------------------------------------------------------------------------

#: metric (sample) names in PromQL: every family Habitus serves has one of these prefixes
METRIC_NAME = re.compile(r"\b(?:habitus|faststream|python|process)_[A-Za-z0-9_:]*")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, PromQL) of every panel query, in dashboard order."""
    return [(d.title, p.title, expr) for d in DASHBOARDS for g in d.groups for p in g.panels
            for expr, _ in p.queries]


def variable_queries() -> list[tuple[str, str, str]]:
    """(dashboard title, variable name, label_values query) of every template variable."""
    return [(d.title, name, VARIABLES[name][1]) for d in DASHBOARDS for name in d.variables]


def metric_names(expr: str) -> set[str]:
    """The metric names one PromQL expression reads (label values and strings ignored)."""
    return set(METRIC_NAME.findall(_QUOTED.sub('""', expr)))


def dashboard_metric_names() -> set[str]:
    """Every metric (sample) name the dashboards read: histogram `_bucket`/`_sum`/`_count`
    and counter `_total` names as written in the queries, template variables included."""
    names: set[str] = set()
    for _, _, expr in [*dashboard_queries(), *variable_queries()]:
        names |= metric_names(expr)
    return names


def runnable(expr: str, rate_interval: str = "1m") -> str:
    """The query as Prometheus can run it: every variable matches everything."""
    return (expr.replace("$__rate_interval", rate_interval).replace("$__range", "1h")
            .replace("$service", ".*").replace("$projection", ".*"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m habitus.ops.dashboards",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate the JSON files")
    action.add_argument("--check", action="store_true",
                        help="exit 1 when a checked-in file is not what --write writes")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="the dashboards directory")
    args = parser.parse_args(argv)
    if args.write:
        for path in write(args.out):
            print(path)
        return 0
    differ = stale(args.out)
    for name in differ:
        print(f"stale: {name} (run python -m habitus.ops.dashboards --write)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
