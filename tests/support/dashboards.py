"""Checking the Grafana dashboards and the alert rules against a live Prometheus.

The queries come from `habitus.ops.dashboards.dashboard_queries()` when that module exists,
else straight from deploy/grafana/dashboards/*.json (every target's `expr`, nested rows
included), so the check does not depend on the module that generates the dashboards.

`check(prometheus_url, expositions, ...)` returns the problems, one line each:

* a metric a dashboard names that no service's /metrics exposition has (not even as a declared
  `# TYPE` with no sample yet);
* a panel query Prometheus refuses, or that returns no series (the panels of what a healthy
  system rarely does, dead letters or 5xx answers, read 0 until it happens, so every panel has
  data);
* an alert expression that does not evaluate.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.http import TLS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
METRIC = re.compile(r"\b(?:habitus|faststream)_[a-zA-Z0-9_]+")
SUFFIXES = ("_bucket", "_count", "_sum", "_created")
#: Grafana's built-in variables, as the live check substitutes them
BUILTINS = {"__rate_interval": "5m", "__interval": "15s", "__range": "5m",
            "__range_s": "300", "__interval_ms": "15000"}


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    expr: str


@dataclass
class Result:
    problems: list[str] = field(default_factory=list)
    checked: int = 0


def _panels(panels: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def queries_from_json(directory: Path = DASHBOARDS) -> list[Query]:
    found: list[Query] = []
    for path in sorted(directory.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        name = str(doc.get("title") or path.stem)
        for panel in _panels(doc.get("panels") or []):
            for target in panel.get("targets") or []:
                expr = str(target.get("expr") or "").strip()
                if expr:
                    found.append(Query(name, str(panel.get("title", "")), expr))
    return found


def dashboard_queries(directory: Path = DASHBOARDS) -> list[Query]:
    """The generator's queries when `habitus.ops.dashboards` exists (and `directory` is the
    repository's), else the JSON files'."""
    if directory == DASHBOARDS:
        try:
            module = importlib.import_module("habitus.ops.dashboards")
        except ImportError:
            module = None
        if module is not None and hasattr(module, "dashboard_queries"):
            return [Query(str(d), str(p), str(e)) for d, p, e in module.dashboard_queries()]
    return queries_from_json(directory)


def alert_exprs(path: Path = ALERTS) -> dict[str, str]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {str(r["alert"]): str(r["expr"]) for g in doc["groups"] for r in g["rules"]
            if "alert" in r}


def substitute(expr: str, variables: Mapping[str, str] | None = None) -> str:
    """Grafana variables replaced: the built-in intervals by durations, every other variable
    (`$service`, `${projection}`, `[[x]]`) by `.*`, which matches all under `=~`."""
    values = {**BUILTINS, **(variables or {})}

    def value(name: str) -> str:
        return values.get(name, ".*")

    expr = re.sub(r"\$\{(\w+)(?::[^}]*)?\}", lambda m: value(m.group(1)), expr)
    expr = re.sub(r"\[\[(\w+)\]\]", lambda m: value(m.group(1)), expr)
    return re.sub(r"\$(\w+)", lambda m: value(m.group(1)), expr)


def metric_names(expr: str) -> set[str]:
    return set(METRIC.findall(expr))


@dataclass(frozen=True)
class Exposition:
    """The metric names of some /metrics texts: `declared` (a # TYPE line, or any sample) and
    `sampled` (at least one sample line), sample names as exposed (`_bucket`, `_total`...)."""

    declared: frozenset[str]
    sampled: frozenset[str]

    @classmethod
    def parse(cls, texts: Iterable[str]) -> Exposition:
        declared: set[str] = set()
        sampled: set[str] = set()
        for text in texts:
            for line in text.splitlines():
                if line.startswith("# TYPE "):
                    name, kind = line.split()[2:4]
                    declared.add(name)
                    if kind == "counter":
                        declared.add(f"{name}_total")
                    if kind in {"histogram", "summary"}:
                        declared |= {f"{name}{s}" for s in SUFFIXES}
                elif line and not line.startswith("#"):
                    sampled.add(re.split(r"[{\s]", line, maxsplit=1)[0])
        return cls(frozenset(declared | sampled), frozenset(sampled))

    def exposes(self, name: str) -> bool:
        return name in self.declared

    def has_samples(self, name: str) -> bool:
        return name in self.sampled


def query(client: httpx.Client, expr: str) -> tuple[str, list[Any], str]:
    """(status, result, error) of an instant query."""
    response = client.get("/api/v1/query", params={"query": expr})
    try:
        body = response.json()
    except ValueError:
        return "error", [], f"HTTP {response.status_code}: {response.text[:200]}"
    data = body.get("data") or {}
    result = data.get("result")
    if data.get("resultType") == "scalar":
        result = [result]
    return str(body.get("status")), list(result or []), str(body.get("error") or "")


def missing_metrics(exposition: Exposition, queries: Iterable[Query]) -> list[str]:
    """A line per (panel, metric) where the panel names a metric no exposition has."""
    return [f"{q.dashboard} / {q.panel}: no service exposes {name} ({q.expr})"
            for q in queries for name in sorted(metric_names(q.expr))
            if not exposition.exposes(name)]


def check(prometheus_url: str, exposition: Exposition, queries: list[Query],
          alerts: Mapping[str, str]) -> Result:
    out = Result(problems=missing_metrics(exposition, queries))
    with httpx.Client(base_url=prometheus_url, timeout=30, trust_env=False, verify=TLS) as client:
        for q in queries:
            where = f"{q.dashboard} / {q.panel}"
            expr = substitute(q.expr)
            status, result, error = query(client, expr)
            out.checked += 1
            if status != "success":
                out.problems.append(f"{where}: Prometheus refused {expr!r}: {error}")
            elif not result:
                # every panel has data in a healthy run: the error and retry panels read 0
                # (`or vector(0)`) until something fails, so an empty one is a broken query or
                # a metric nobody updates
                out.problems.append(f"{where}: no data for {expr!r}")
        for name, expr in alerts.items():
            status, _, error = query(client, expr)
            out.checked += 1
            if status != "success":
                out.problems.append(f"alert {name}: does not evaluate: {error}")
    return out
