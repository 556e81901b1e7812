"""The live dashboard check's pure parts (tests/support/dashboards.py): which queries it reads,
how it substitutes Grafana variables, and that a panel naming a metric no service exposes is
reported (tests/e2e/test_live_dashboards.py runs the whole check against a live Prometheus)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import dashboards
from tests.support.dashboards import Exposition, Query

EXPOSITION = """\
# HELP habitus_projection_applied_events_total Events applied.
# TYPE habitus_projection_applied_events_total counter
habitus_projection_applied_events_total{projection="learning.cache"} 12.0
# HELP habitus_dlq_events_total Events sent to HABITUS_DLQ.
# TYPE habitus_dlq_events_total counter
# HELP habitus_gateway_http_request_duration_seconds Gateway HTTP request duration.
# TYPE habitus_gateway_http_request_duration_seconds histogram
habitus_gateway_http_request_duration_seconds_bucket{le="+Inf",status="200"} 3.0
"""


def fake_dashboard(directory: Path) -> None:
    directory.mkdir()
    (directory / "fake.json").write_text(json.dumps({
        "title": "Fake",
        "panels": [
            {"title": "Applied", "targets": [
                {"expr": 'sum(rate(habitus_projection_applied_events_total'
                         '{projection=~"$projection"}[$__rate_interval]))'}]},
            {"title": "A row", "type": "row", "panels": [
                {"title": "Nothing", "targets": [
                    {"expr": "sum(rate(habitus_no_such_metric[$__rate_interval]))"},
                    {"expr": ""}]}]},
        ],
    }))


def test_reads_every_target_of_every_panel_nested_rows_included(tmp_path: Path) -> None:
    fake_dashboard(tmp_path / "dashboards")
    found = dashboards.queries_from_json(tmp_path / "dashboards")
    assert [(q.dashboard, q.panel) for q in found] == [("Fake", "Applied"), ("Fake", "Nothing")]


def test_a_panel_naming_a_metric_no_service_exposes_is_reported(tmp_path: Path) -> None:
    fake_dashboard(tmp_path / "dashboards")
    found = dashboards.queries_from_json(tmp_path / "dashboards")
    problems = dashboards.missing_metrics(Exposition.parse([EXPOSITION]), found)
    assert len(problems) == 1
    assert problems[0].startswith("Fake / Nothing: no service exposes habitus_no_such_metric")


def test_declared_metrics_without_samples_are_exposed_but_not_sampled() -> None:
    exposition = Exposition.parse([EXPOSITION])
    assert exposition.exposes("habitus_dlq_events_total")
    assert not exposition.has_samples("habitus_dlq_events_total")
    assert exposition.exposes("habitus_gateway_http_request_duration_seconds_count")
    assert exposition.has_samples("habitus_gateway_http_request_duration_seconds_bucket")
    assert dashboards.missing_metrics(exposition, [Query("d", "p", (
        "sum(rate(habitus_gateway_http_request_duration_seconds_count[5m]))"
        " + sum(habitus_dlq_events_total)"))]) == []


def test_grafana_variables_are_substituted() -> None:
    expr = ('sum(rate(x{service=~"$service", p=~"${projection:regex}", q=~"[[q]]"}'
            '[$__rate_interval])) / increase(y[$__range])')
    assert dashboards.substitute(expr) == (
        'sum(rate(x{service=~".*", p=~".*", q=~".*"}[5m])) / increase(y[5m])')


def test_the_repository_alerts_and_dashboards_are_read() -> None:
    alerts = dashboards.alert_exprs()
    assert "HabitusTargetDown" in alerts and all(alerts.values())
    assert dashboards.dashboard_queries(), "no dashboard queries"
