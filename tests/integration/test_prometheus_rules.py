"""promtool on the Prometheus files: both configs load, the rules load, and the rule unit tests
(deploy/prometheus/tests/alerts_test.yml) pass, with a firing and a quiet case for every alert.

promtool comes from tests/support/prometheus.py: on PATH, or installed (apt-get, as root); when
it cannot be had these tests fail under CI and skip elsewhere, saying why.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from habitus.runtime.observe import scrape_config
from tests.support import prometheus

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "tests" / "alerts_test.yml"
#: what a promtool built without Kubernetes discovery (Debian's) says of kubernetes_sd_configs
NO_K8S_SD = "field kubernetes_sd_configs not found"


@pytest.fixture(scope="module")
def promtool() -> str:
    return prometheus.require().promtool


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)


def test_compose_config_is_valid(promtool: str) -> None:
    result = run(promtool, "check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


def test_k8s_config_is_valid(promtool: str, tmp_path: Path) -> None:
    config = PROMETHEUS_DIR / "prometheus-k8s.yml"
    result = run(promtool, "check", "config", str(config))
    if result.returncode == 0:
        return
    assert NO_K8S_SD in result.stdout + result.stderr, result.stdout + result.stderr
    # This promtool has no Kubernetes discovery: check everything else (relabel rules, their
    # regexes, the rule file) with the discovery swapped for a static target.
    doc: dict[str, Any] = yaml.safe_load(config.read_text())
    jobs = [j for j in doc["scrape_configs"] if "kubernetes_sd_configs" in j]
    assert {j["job_name"] for j in jobs} == {"habitus-gateway", "habitus-services"}
    for job in jobs:
        [sd] = job.pop("kubernetes_sd_configs")
        assert sd["role"] == "pod"
        job["static_configs"] = [{"targets": ["10.0.0.1:8080"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(doc))
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    again = run(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert again.returncode == 0, again.stdout + again.stderr


def test_generated_observe_config_is_valid(promtool: str, tmp_path: Path) -> None:
    config = scrape_config("127.0.0.1:8080", {"extractor": "127.0.0.1:9001"},
                           rule_files=[ALERTS], self_target="127.0.0.1:9090")
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = run(promtool, "check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_load(promtool: str) -> None:
    result = run(promtool, "check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_pass(promtool: str) -> None:
    result = run(promtool, "test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    rules = yaml.safe_load(ALERTS.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(RULE_TESTS.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test") or []:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts - firing == set(), "alerts never shown firing"
    assert alerts - quiet == set(), "alerts never shown quiet"
