"""`habitus up --observe`: a local Prometheus beside the system, scraping every process.

The scrape config is generated for the ports this run gave its processes (the gateway's HTTP
port, each bus service's HABITUS_METRICS_PORT), with the same job names and `service` labels as
the compose and Kubernetes configs (deploy/prometheus), so the dashboards' and alerts' queries
work unchanged. Prometheus keeps its data under `<data dir>/prometheus` and runs as one more
supervised child of `habitus up`: restarted if it dies, stopped with the rest.

The live dashboard check (tests/e2e/test_live_dashboards.py) uses the same config generator.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from habitus.runtime.embedded import free_port
from habitus.runtime.state import port_in_use
from habitus.runtime.supervisor import ProcessSpec

DEFAULT_PORT = 9090
#: the alert rules of a source checkout (absent from an installed wheel: then no rules)
ALERTS_FILE = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "alerts.yml"
GATEWAY_JOB = "habitus-gateway"
SERVICES_JOB = "habitus-services"

INSTALL_HINT = ("install Prometheus 2.x (Debian/Ubuntu: `sudo apt-get install prometheus`; or "
                "the release tarball from prometheus.io/download) so `prometheus` is on PATH")


class PrometheusMissing(RuntimeError):
    """No `prometheus` binary to run."""


def scrape_config(
    gateway: str | None,
    services: Mapping[str, str],
    *,
    scrape_interval: str = "5s",
    rule_files: list[Path] | None = None,
    self_target: str | None = None,
) -> dict[str, Any]:
    """A Prometheus config scraping `gateway` (host:port, /metrics on its API port) and
    `services` (`service` label -> host:port of its /metrics)."""
    jobs: list[dict[str, Any]] = []
    if gateway:
        jobs.append({
            "job_name": GATEWAY_JOB, "metrics_path": "/metrics",
            "static_configs": [{"targets": [gateway], "labels": {"service": "gateway"}}],
        })
    if services:
        jobs.append({
            "job_name": SERVICES_JOB, "metrics_path": "/metrics",
            "static_configs": [{"targets": [target], "labels": {"service": name}}
                               for name, target in sorted(services.items())],
        })
    if self_target:
        jobs.append({"job_name": "prometheus", "static_configs": [{"targets": [self_target]}]})
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                   "external_labels": {"deployment": "habitus-up"}},
        "scrape_configs": jobs,
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    return config


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin")
    if found is None:
        raise PrometheusMissing(f"`prometheus` is not on PATH: {INSTALL_HINT}")
    return found


def pick_port(host: str) -> int:
    return DEFAULT_PORT if not port_in_use(host, DEFAULT_PORT) else free_port()


def prometheus_argv(binary: str, config_file: Path, data: Path, listen: str) -> list[str]:
    return [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address={listen}",
        "--storage.tsdb.retention.time=7d",
        "--log.level=warn",
    ]


def prometheus_spec(
    data_dir: Path,
    host: str,
    gateway: str | None,
    services: Mapping[str, str],
    env: Mapping[str, str],
    port: int | None = None,
) -> tuple[ProcessSpec, str]:
    """The supervised Prometheus of `habitus up --observe` and its URL. Writes its config to
    `<data_dir>/prometheus/prometheus.yml`; raises PrometheusMissing without a binary."""
    binary = prometheus_binary()
    home = data_dir / "prometheus"
    (home / "data").mkdir(parents=True, exist_ok=True)
    port = port or pick_port(host)
    listen = f"{host}:{port}"
    rules = [ALERTS_FILE] if ALERTS_FILE.is_file() else []
    config = scrape_config(gateway, services, rule_files=rules, self_target=listen)
    config_file = home / "prometheus.yml"
    # JSON is YAML: no YAML writer needed at run time. Rewritten on every start.
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    spec = ProcessSpec("prometheus", prometheus_argv(binary, config_file, home / "data", listen),
                       dict(env), data_dir / "logs" / "prometheus.log")
    return spec, f"http://{listen}"
