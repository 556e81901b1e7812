"""The Grafana dashboards are generated (habitus.ops.dashboards): the checked-in JSON is what the
generator writes, every panel queries the provisioned datasource, and every query reads only
metrics that some service exports."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from faststream.nats.prometheus import NatsPrometheusMiddleware
from prometheus_client import CollectorRegistry

from habitus.ops import dashboards
from habitus.service import registry as services
from habitus.telemetry import metrics

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"


def exported_sample_names() -> set[str]:
    """Every sample name the services can expose: their own families (every service's
    modules imported, so each registers its metrics) and FastStream's middleware."""
    for d in services.services():  # every installed service's modules, its metrics included
        importlib.import_module(f"services.{d.name}.main")
    importlib.import_module("habitus.llm.metrics")
    fresh = CollectorRegistry()
    NatsPrometheusMiddleware(registry=fresh, app_name="audit")
    names: set[str] = set()
    for family in [*metrics.registry.collect(), *fresh.collect()]:
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        elif family.type == "summary":
            names |= {family.name + s for s in ("_sum", "_count")}
        elif family.type == "info":
            names.add(family.name + "_info")
        else:
            names.add(family.name)
    return names


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_sample_names()


@pytest.fixture(scope="module")
def models() -> dict[str, dict[str, Any]]:
    return {d.uid: dashboards.build(d) for d in dashboards.DASHBOARDS}


def test_regenerating_changes_nothing() -> None:
    assert dashboards.stale() == [], "run: python -m habitus.ops.dashboards --write"
    files = sorted(p.name for p in (GRAFANA / "dashboards").glob("*.json"))
    assert files == sorted(dashboards.file_name(d) for d in dashboards.DASHBOARDS)


def test_the_check_command_notices_a_stale_file(tmp_path: Path) -> None:
    dashboards.write(tmp_path)
    assert dashboards.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "habitus-llm.json").write_text("{}", encoding="utf-8")
    (tmp_path / "old.json").write_text("{}", encoding="utf-8")
    assert dashboards.stale(tmp_path) == ["habitus-llm.json", "old.json"]
    assert dashboards.main(["--check", "--out", str(tmp_path)]) == 1


def test_the_seven_dashboards() -> None:
    titles = [d.title for d in dashboards.DASHBOARDS]
    assert titles == ["Habitus overview", "Habitus pipeline", "Habitus learning",
                      "Habitus tools and habits", "Habitus routing", "Habitus gateway",
                      "Habitus LLM"]
    assert len({d.uid for d in dashboards.DASHBOARDS}) == len(titles)


def test_the_datasource_is_the_provisioned_one() -> None:
    provisioned = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    (source,) = provisioned["datasources"]
    assert (source["type"], source["uid"]) == ("prometheus", dashboards.DATASOURCE_UID)


def test_every_panel_has_a_query_a_unit_and_the_datasource(
        models: dict[str, dict[str, Any]]) -> None:
    wanted = {"type": "prometheus", "uid": dashboards.DATASOURCE_UID}
    for uid, model in models.items():
        assert model["schemaVersion"] == dashboards.SCHEMA_VERSION
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids)), uid
        panels = [p for p in model["panels"] if p["type"] != "row"]
        assert len(panels) >= 5, uid
        for panel in panels:
            where = f"{uid}: {panel['title']}"
            assert panel["datasource"] == wanted, where
            assert panel["fieldConfig"]["defaults"].get("unit"), where
            assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), where
            assert panel["targets"], where
            for target in panel["targets"]:
                assert target["datasource"] == wanted, where
                assert target["expr"].strip(), where
        names = {v["name"] for v in model["templating"]["list"]}
        assert "service" in names, uid
        for variable in model["templating"]["list"]:
            assert variable["datasource"] == wanted, variable["name"]


def test_queries_read_only_exported_metrics(exported: set[str]) -> None:
    queries = dashboards.dashboard_queries()
    assert len(queries) >= 60
    for dashboard, title, expr in queries:
        names = dashboards.metric_names(expr)
        assert names, f"{dashboard}: {title}: no metric in {expr!r}"
        assert names <= exported, f"{dashboard}: {title}: unknown {names - exported}"
    assert dashboards.dashboard_metric_names() <= exported | {"python_info"}
    # the names parsed are the queries' own, and nothing else
    assert dashboards.metric_names(
        'sum(rate(habitus_a_total{reason="habitus_not_a_metric"}[$__rate_interval]))'
    ) == {"habitus_a_total"}


def test_the_new_metrics_are_shown() -> None:
    used = dashboards.dashboard_metric_names()
    for name in ("habitus_projection_lag_events", "habitus_projection_ack_pending_events",
                 "habitus_learning_facets", "habitus_learning_rebuild_duration_seconds_bucket",
                 "habitus_profile_renders_total", "habitus_prompt_context_cache_hits_total",
                 "habitus_prompt_context_duration_seconds_bucket",
                 "habitus_tool_rules_captured_total", "habitus_router_decisions_total",
                 "habitus_router_reward_bucket", "habitus_habits", "habitus_habits_review_queue",
                 "habitus_llm_budget_remaining_ratio", "habitus_gateway_ingest_rejected_total"):
        assert name in used, name


def test_rates_use_the_rate_interval_and_counters_are_rated() -> None:
    for dashboard, title, expr in dashboards.dashboard_queries():
        assert expr.count("(") == expr.count(")"), (dashboard, title)
        assert set(re.findall(r"\[([^\]]+)\]", expr)) <= {"$__rate_interval"}, expr
        for name in dashboards.metric_names(expr):
            if name.endswith(("_total", "_bucket", "_sum", "_count")):
                assert re.search(rf"rate\({name}\{{", expr), f"raw counter in {expr!r}"


def test_runnable_queries_have_no_variables() -> None:
    for _, _, expr in dashboards.dashboard_queries():
        assert "$" not in dashboards.runnable(expr), expr


def test_the_files_are_valid_json_with_the_generator_uid() -> None:
    for d in dashboards.DASHBOARDS:
        data = json.loads((GRAFANA / "dashboards" / dashboards.file_name(d)).read_text())
        assert data["uid"] == d.uid and data["title"] == d.title
