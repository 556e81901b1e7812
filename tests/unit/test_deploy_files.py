"""The deploy files agree with the system they deploy.

Checks the Dockerfile, docker-compose.yml, the Prometheus scrape config and alert rules, the
Grafana provisioning and dashboard, and the kustomize base and dev overlay against the facts the
code fixes: commands, ports, environment, probe paths and metric names, and the replicas'
placement (two of each, spread, a disruption budget each). Where the docker compose plugin or
kubectl is installed, their own validators run too (and every resource kubectl renders is
checked against the Kubernetes API's schemas, the custom ones against their own:
`deploy_check.validate_resource`); otherwise those tests skip. The generated ScaledObjects and
NACK streams are tests/unit/test_k8s_scaling.py's.

Which services exist comes from the service descriptors (`habitus.service.registry`), never from
a list here: `tests/support/deploy_check.deploy_problems` names every deploy file, entry point
and list where a service is missing or extra, and resolves the kustomize layout itself (compared
with `kubectl kustomize` where kubectl is installed).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from habitus.config import Settings
from habitus.service import registry
from habitus.service.descriptor import ServiceDescriptor
from tests.support import deploy_check
from tests.support.deploy_check import (
    COMPOSE_FILE,
    GATEWAY_PORT,
    K8S_BASE,
    METRICS_PORT,
    PLACES,
    SERVICES_PROFILE,
    deploy_problems,
    kustomization,
    kustomize_build,
    planned_compose_services,
    scrape_targets,
    validate_resource,
)
from tests.support.deploy_check import compose_command as command_of
from tests.support.deploy_check import compose_env as env_of
from tests.support.deploy_check import generator_literals as generator
from tests.support.example_service.main import service as example_service

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
DASHBOARD_FILE = GRAFANA_DIR / "dashboards" / "habitus-overview.json"
K8S_DEV = ROOT / "k8s" / "overlays" / "dev"
K8S_SERVICE_BASE = K8S_BASE / "service"
K8S_SERVICES = K8S_BASE / "services"
#: the generated KEDA ScaledObject in a service's directory (habitus.ops.k8s_scaling)
SCALED_OBJECT_FILE = "scaledobject.yaml"
#: replicas in the base: the partitions are shared, so a lost pod's are taken over
BASE_REPLICAS = 2
#: the topology keys every long-running Habitus pod is spread over
SPREAD_KEYS = ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]

# --- Facts fixed by the code --------------------------------------------------------------------

#: the services in code; the gateway is the one serving the public HTTP API
SERVICES = registry.services()
[GATEWAY] = [s for s in SERVICES if s.public_http]
#: the bus services in code (every one but the gateway)
BUILT = [s for s in SERVICES if not s.public_http]
INFRA_SERVICES = {"nats", "postgres", "redis", "nats-exporter", "prometheus", "grafana"}

GRACEFUL_TIMEOUT_SECONDS = 30

COMPOSE_ENV = {
    "HABITUS_NATS_URL": "nats://nats:4222",
    "HABITUS_DATABASE_URL": "postgresql://habitus:habitus@postgres:5432/habitus",
    "HABITUS_REDIS_URL": "redis://redis:6379/0",
    "HABITUS_DATA_DIR": "/var/lib/habitus",
    "HABITUS_HTTP_HOST": "0.0.0.0",
    "HABITUS_BOOTSTRAP_KEYS": "demo:dev-key-change-me",
}
COMPOSE_ENV_PRESENT = {"HABITUS_ADMIN_KEYS", "HABITUS_LOG_LEVEL"}
SECRET_SETTINGS = {
    "HABITUS_DATABASE_URL",
    "HABITUS_BOOTSTRAP_KEYS",
    "HABITUS_ADMIN_KEYS",
    "HABITUS_LLM_API_KEY",
    "HABITUS_KEK",
}

EXPORTED_METRICS = frozenset(
    {
        "faststream_received_messages_total",
        "faststream_received_processed_messages_total",
        "faststream_received_processed_messages_duration_seconds_bucket",
        # not faststream_published_messages_total: events are published through
        # habitus.bus.publisher (JetStream acks awaited), never FastStream's publisher, so that
        # series never has a sample
        "habitus_projection_applied_events_total",
        "habitus_projection_batch_duration_seconds_bucket",
        "habitus_projection_checkpoint_seq",
        "habitus_projection_pending_events",
        "habitus_dlq_events_total",
        "habitus_projection_redelivered_events_total",
        "habitus_gateway_ingest_items_total",
        "habitus_gateway_http_request_duration_seconds_bucket",
        "habitus_gateway_rpc_requests_total",
        "habitus_event_loop_lag_seconds_bucket",
    }
)
METRIC_NAME = re.compile(r"\b(?:habitus|faststream)_\w+")
#: the NATS exporter's JetStream series the alerts read (docker-compose.yml's nats-exporter)
EXPORTER_METRICS = frozenset({"jetstream_stream_total_messages"})
SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum")


def metrics_defined_in_code() -> set[str]:
    """Every `habitus_*` metric name a Counter/Gauge/Histogram in libs/ or services/ defines."""
    defined: set[str] = set()
    for path in [*ROOT.joinpath("libs").rglob("*.py"), *ROOT.joinpath("services").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        defined |= set(re.findall(r"(?:Counter|Gauge|Histogram)\(\s*\"(habitus_\w+)\"", text))
    return defined


def is_defined(name: str, defined: set[str]) -> bool:
    if name in defined or name in EXPORTED_METRICS:
        return True
    return any(name.endswith(s) and name.removesuffix(s) in defined for s in SAMPLE_SUFFIXES)
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}


# --- Loading ------------------------------------------------------------------------------------


def load_yaml_all(text: str) -> list[Any]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def read_yaml(path: Path) -> Any:
    assert path.is_file(), f"missing {path.relative_to(ROOT)}"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = read_yaml(COMPOSE_FILE)
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict)
    return doc


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def bus_services(compose: dict[str, Any]) -> dict[str, str]:
    """Compose name -> `habitus serve` argument of every bus service: the ones in code, and the
    planned ones behind the `services` profile."""
    planned = planned_compose_services(compose, (s.name for s in SERVICES))
    return {s.deploy_name: s.name for s in BUILT} | planned


@pytest.fixture(scope="module")
def habitus_containers(bus_services: dict[str, str]) -> set[str]:
    return {"migrate", GATEWAY.deploy_name, *bus_services}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    assert DASHBOARD_FILE.is_file()
    return json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def prometheus_config() -> dict[str, Any]:
    return read_yaml(PROMETHEUS_DIR / "prometheus.yml")


@pytest.fixture(scope="module")
def alert_rules() -> dict[str, Any]:
    return read_yaml(PROMETHEUS_DIR / "alerts.yml")


def depends_of(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def mounts_of(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source, for short-syntax volume entries."""
    mounts: dict[str, str] = {}
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            mounts[entry["target"]] = entry.get("source", "")
            continue
        parts = entry.split(":")
        mounts[parts[1]] = parts[0]
    return mounts


def healthcheck_text(service: dict[str, Any]) -> str:
    test = (service.get("healthcheck") or {}).get("test")
    return " ".join(test) if isinstance(test, list) else str(test or "")


# --- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        out.append((op.upper(), rest.strip()))
    return out


def dockerfile_uid() -> int:
    users = [rest for op, rest in dockerfile_instructions() if op == "USER"]
    assert users, "the image must switch to a non-root USER"
    return int(users[-1].split(":")[0])


def test_dockerfile_builds_one_runtime_image() -> None:
    instructions = dockerfile_instructions()
    froms = [rest for op, rest in instructions if op == "FROM"]
    assert froms == ["python:3.11-slim"]
    runs = " ".join(rest for op, rest in instructions if op == "RUN")
    assert re.search(r"pip install (--\S+ )*\.(\s|$|&)", runs), "expected `pip install .`"
    assert "[dev]" not in runs and "-e " not in runs
    assert any(op == "COPY" and rest.split()[0] == "." for op, rest in instructions)
    assert dockerfile_uid() != 0
    entry = [rest for op, rest in instructions if op == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["habitus"]


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    entries = {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for required in (".venv", "var", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"):
        assert required in entries, required
    assert "**/__pycache__" in entries or "__pycache__" in entries


# --- docker-compose.yml -------------------------------------------------------------------------


def test_every_service_is_named_everywhere_it_must_be() -> None:
    assert deploy_problems(SERVICES) == []


def test_a_new_service_is_reported_missing_in_every_place() -> None:
    # The example service of the contract tests: a descriptor, a projection, a migration.
    problems = deploy_problems(registry.services(extra=[example_service]))
    for place in PLACES:
        found = [p for p in problems if p.startswith(f"{place}:")]
        assert len(found) == 1, (place, problems)
        assert example_service.name in found[0], found
    assert len(problems) == len(PLACES), problems


def test_a_service_named_but_not_in_code_is_reported() -> None:
    # Without the stability detector's descriptor, every place that names it is extra.
    others = [s for s in SERVICES if s.name != "stability_detector"]
    problems = deploy_problems(others)
    for place in PLACES:
        found = [p for p in problems if p.startswith(f"{place}:")]
        assert len(found) == 1, (place, problems)
        assert "stability_detector" in found[0], found
    assert len(problems) == len(PLACES), problems


def test_compose_defines_every_service(
    services: dict[str, dict[str, Any]], habitus_containers: set[str]
) -> None:
    assert set(services) == INFRA_SERVICES | habitus_containers


def test_only_unbuilt_services_are_behind_the_services_profile(
    services: dict[str, dict[str, Any]], bus_services: dict[str, str]
) -> None:
    built = {s.deploy_name for s in BUILT}
    assert {"producers", "stability-detector"} <= built
    for name, service in services.items():
        profiles = service.get("profiles") or []
        if name in bus_services and name not in built:
            assert profiles == [SERVICES_PROFILE], name
        else:
            assert not profiles, f"{name} must start with a plain `docker compose up`"


def test_every_habitus_container_runs_the_same_image(
    services: dict[str, dict[str, Any]], habitus_containers: set[str]
) -> None:
    builds = {json.dumps(services[n].get("build"), sort_keys=True) for n in habitus_containers}
    images = {services[n].get("image") for n in habitus_containers}
    assert len(builds) == 1 and len(images) == 1, (builds, images)
    build = services["gateway"]["build"]
    context = build if isinstance(build, str) else build.get("context")
    assert (ROOT / context).resolve() == ROOT
    if isinstance(build, dict) and build.get("dockerfile"):
        assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE
    image = images.pop()
    for name in INFRA_SERVICES:
        assert "build" not in services[name]
        assert services[name].get("image") != image


def test_habitus_commands(
    services: dict[str, dict[str, Any]], bus_services: dict[str, str]
) -> None:
    assert command_of(services["migrate"]) == ["migrate"]
    assert command_of(services[GATEWAY.deploy_name]) == ["serve", GATEWAY.name]
    for name, package in bus_services.items():
        assert command_of(services[name]) == ["serve", package], name
        # Compose names are DNS names (hyphens); the CLI uses the package names.
        assert package.replace("_", "-") == name, name


def test_habitus_environment(
    services: dict[str, dict[str, Any]],
    habitus_containers: set[str],
    bus_services: dict[str, str],
) -> None:
    for name in habitus_containers:
        env = env_of(services[name])
        for key, value in COMPOSE_ENV.items():
            assert env.get(key) == value, f"{name}: {key}={env.get(key)!r}"
        assert COMPOSE_ENV_PRESENT <= set(env), name
        assert env["HABITUS_DATA_DIR"] in mounts_of(services[name]), f"{name}: data dir volume"
    assert env_of(services["gateway"]).get("HABITUS_HTTP_PORT") == str(GATEWAY_PORT)
    for name in bus_services:
        assert env_of(services[name]).get("HABITUS_METRICS_PORT") == str(METRICS_PORT), name


def test_startup_order(services: dict[str, dict[str, Any]], bus_services: dict[str, str]) -> None:
    migrate = services["migrate"]
    assert depends_of(migrate).get("postgres") == "service_healthy"
    assert str(migrate.get("restart", "no")) in {"no", "on-failure"}, "migrate is one-shot"
    for name in (GATEWAY.deploy_name, *bus_services):
        deps = depends_of(services[name])
        assert deps.get("migrate") == "service_completed_successfully", name
        assert deps.get("nats") == "service_healthy", name
        assert deps.get("redis") == "service_healthy", name
    # Every service waited on as healthy has a healthcheck.
    for service in services.values():
        for dep, condition in depends_of(service).items():
            if condition == "service_healthy":
                assert services[dep].get("healthcheck"), f"{dep} has no healthcheck"


def test_published_ports(services: dict[str, dict[str, Any]], bus_services: dict[str, str]) -> None:
    def published(name: str) -> set[str]:
        return {str(p) for p in services[name].get("ports") or []}

    assert f"{GATEWAY_PORT}:{GATEWAY_PORT}" in published("gateway")
    assert "9090:9090" in published("prometheus")
    assert "3000:3000" in published("grafana")
    for name in bus_services:
        assert str(METRICS_PORT) in {str(p) for p in services[name].get("expose") or []}, name


def test_infrastructure(services: dict[str, dict[str, Any]]) -> None:
    nats = services["nats"]
    match = re.fullmatch(r"nats:2\.(\d+)(?:\.\d+)?-alpine", nats["image"])
    assert match and int(match.group(1)) >= 10, nats["image"]
    command = command_of(nats)
    assert "-js" in command
    assert command[command.index("-sd") + 1] == "/data" and "/data" in mounts_of(nats)
    assert command[command.index("-m") + 1] == "8222"
    assert "http://localhost:8222/healthz" in healthcheck_text(nats)

    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16"
    url = urlsplit(COMPOSE_ENV["HABITUS_DATABASE_URL"])
    env = env_of(postgres)
    assert env["POSTGRES_USER"] == url.username
    assert env["POSTGRES_PASSWORD"] == url.password
    assert env["POSTGRES_DB"] == url.path.lstrip("/")
    assert "/var/lib/postgresql/data" in mounts_of(postgres)
    assert "pg_isready" in healthcheck_text(postgres)

    assert services["redis"]["image"] == "redis:7-alpine"

    exporter = services["nats-exporter"]
    assert exporter["image"].startswith("natsio/prometheus-nats-exporter")
    assert {"-jsz=all", "-varz", "http://nats:8222"} <= set(command_of(exporter))


def test_observability_containers(services: dict[str, dict[str, Any]]) -> None:
    prometheus = services["prometheus"]
    assert prometheus["image"].startswith("prom/prometheus")
    mounts = mounts_of(prometheus)
    assert mounts["/etc/prometheus/prometheus.yml"] == "./deploy/prometheus/prometheus.yml"
    assert mounts["/etc/prometheus/alerts.yml"] == "./deploy/prometheus/alerts.yml"

    grafana = services["grafana"]
    assert grafana["image"].startswith("grafana/grafana")
    mounts = mounts_of(grafana)
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    assert mounts["/var/lib/grafana/dashboards"] == "./deploy/grafana/dashboards"
    env = env_of(grafana)
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


def test_bind_mount_sources_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for source in mounts_of(service).values():
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source}"


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_docker_compose_config_validates() -> None:
    if shutil.which("docker") is None or _run(["docker", "compose", "version"]).returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    for extra in ([], ["--profile", SERVICES_PROFILE]):
        result = _run(["docker", "compose", "-f", str(COMPOSE_FILE), *extra, "config", "-q"])
        assert result.returncode == 0, result.stderr


# --- Prometheus ---------------------------------------------------------------------------------


def test_prometheus_scrapes_every_habitus_process(
    prometheus_config: dict[str, Any],
    services: dict[str, dict[str, Any]],
    bus_services: dict[str, str],
) -> None:
    jobs = scrape_targets(prometheus_config)
    assert len(jobs) == len(prometheus_config["scrape_configs"]), "duplicate job names"
    targets = set().union(*jobs.values())
    assert f"gateway:{GATEWAY_PORT}" in targets
    for name in bus_services:
        assert f"{name}:{METRICS_PORT}" in targets, name
    assert "nats-exporter:7777" in targets
    for target in targets:
        host = target.rsplit(":", 1)[0]
        assert host == "localhost" or host in services, f"{target} is not a compose service"
    for job in prometheus_config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"


def test_prometheus_loads_the_mounted_rule_files(
    prometheus_config: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    mounts = mounts_of(services["prometheus"])
    rule_files = prometheus_config.get("rule_files") or []
    assert rule_files
    for path in rule_files:
        container_path = path if path.startswith("/") else f"/etc/prometheus/{path}"
        assert container_path in mounts, path
        assert (ROOT / mounts[container_path]).is_file()


def promql_is_balanced(expr: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    quote = ""
    for ch in expr:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'`":
            quote = ch
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack and not quote


def test_alert_rules(alert_rules: dict[str, Any]) -> None:
    defined = metrics_defined_in_code()
    rules = [rule for group in alert_rules["groups"] for rule in group["rules"]]
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert len({group["name"] for group in alert_rules["groups"]}) == len(alert_rules["groups"])
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
        expr = rule["expr"]
        assert promql_is_balanced(expr), rule["alert"]
        for name in METRIC_NAME.findall(expr):
            assert is_defined(name, defined), f"{rule['alert']}: no code defines {name}"
        for name in re.findall(r"\bjetstream_\w+", expr):
            assert name in EXPORTER_METRICS, f"{rule['alert']}: {name}"
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"]
        assert rule["annotations"]["runbook"], f"{rule['alert']}: no runbook line"
        if "for" in rule:
            assert re.fullmatch(r"(\d+[smh])+", str(rule["for"])), rule["for"]

    def find(predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        found = [rule for rule in rules if predicate(rule)]
        assert found, f"no alert for {what}"
        return found[0]

    find(lambda r: "habitus_dlq_events_total" in r["expr"], "dead-lettered events")
    lag = find(
        lambda r: (
            "habitus_projection_pending_events" in r["expr"] and "applied_events" not in r["expr"]
        ),
        "consumer lag",
    )
    assert lag.get("for") == "10m"
    find(
        lambda r: (
            "habitus_projection_pending_events" in r["expr"]
            and "habitus_projection_applied_events_total" in r["expr"]
        ),
        "a stalled projection",
    )
    find(
        lambda r: (
            "habitus_gateway_http_request_duration_seconds_bucket" in r["expr"]
            and "5.." in r["expr"]
        ),
        "gateway 5xx ratio",
    )
    find(lambda r: re.search(r"\bup\s*==\s*0", r["expr"]) is not None, "a target down")
    growing = find(lambda r: "deriv(habitus_projection_pending_events" in r["expr"],
                   "a growing lag")
    assert growing.get("for") == "10m"
    find(lambda r: 'stream_name="HABITUS_DLQ"' in r["expr"], "a non-empty DLQ")
    find(
        lambda r: (
            "habitus_extractor_candidates_total" in r["expr"]
            and "habitus_learning_rebuild_duration_seconds_count" in r["expr"]
            and "[1h]" in r["expr"]  # two periodic intervals (HABITUS_LEARNING_PERIODIC_SECONDS)
        ),
        "no rebuild while candidates arrive",
    )
    find(lambda r: "habitus_llm_budget_exhausted_total" in r["expr"], "an exhausted LLM budget")
    find(lambda r: "up{" in r["expr"] and "offset" in r["expr"], "a service gone from discovery")


def test_k8s_prometheus_config_scrapes_the_annotated_pods() -> None:
    """deploy/prometheus/prometheus-k8s.yml finds pods by the annotations every Deployment in
    k8s/base carries, and labels them like the compose config (job names, `service`)."""
    config = read_yaml(PROMETHEUS_DIR / "prometheus-k8s.yml")
    compose_config = read_yaml(PROMETHEUS_DIR / "prometheus.yml")
    assert config["rule_files"] == compose_config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    habitus_jobs = {n for n in jobs if n.startswith("habitus-")}
    assert habitus_jobs == {j["job_name"] for j in compose_config["scrape_configs"]
                            if j["job_name"].startswith("habitus-")}

    def keeps(job: dict[str, Any], labels: dict[str, str]) -> bool:
        for rule in job["relabel_configs"]:
            if rule.get("action") not in {"keep", "drop"}:
                continue
            value = ";".join(labels.get(label, "") for label in rule["source_labels"])
            matched = re.fullmatch(rule["regex"], value) is not None
            if matched != (rule["action"] == "keep"):
                return False
        return True

    def meta(pod: dict[str, Any]) -> dict[str, str]:
        out = {"__meta_kubernetes_pod_phase": "Running"}
        for key, value in pod["metadata"]["annotations"].items():
            out["__meta_kubernetes_pod_annotation_" + re.sub(r"[^\w]", "_", key)] = value
        for key, value in pod["metadata"]["labels"].items():
            out["__meta_kubernetes_pod_label_" + re.sub(r"[^\w]", "_", key)] = value
        # The base's common label, which kustomize adds to the pod templates too.
        out["__meta_kubernetes_pod_label_app_kubernetes_io_part_of"] = "habitus"
        return out

    for name in habitus_jobs:
        job = jobs[name]
        [sd] = job["kubernetes_sd_configs"]
        assert sd["role"] == "pod"
        assert sd["namespaces"]["names"] == [kustomization(K8S_DEV)["namespace"]]
        targets = {rule.get("target_label") for rule in job["relabel_configs"]}
        assert {"__metrics_path__", "__address__", "service"} <= targets, name
    deployments = [d for (kind, _), d in base_resources().items() if kind == "Deployment"]
    for deployment in deployments:
        labels = meta(deployment["spec"]["template"])
        scraped_by = [n for n in sorted(habitus_jobs) if keeps(jobs[n], labels)]
        name = deployment["metadata"]["name"]
        expected = "habitus-gateway" if name == GATEWAY_DEPLOYMENT else "habitus-services"
        assert scraped_by == [expected], name


# --- Grafana ------------------------------------------------------------------------------------


def test_grafana_provisioning(services: dict[str, dict[str, Any]]) -> None:
    datasources = read_yaml(GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yaml")
    assert datasources["apiVersion"] == 1
    [source] = datasources["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == "prometheus"
    url = urlsplit(source["url"])
    assert url.hostname == "prometheus" and url.hostname in services and url.port == 9090

    providers = read_yaml(GRAFANA_DIR / "provisioning" / "dashboards" / "habitus.yaml")
    assert providers["apiVersion"] == 1
    [provider] = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    assert provider["options"]["path"] in mounts_of(services["grafana"])


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels") or [])


def function_calls(expr: str, names: tuple[str, ...]) -> Iterator[tuple[str, int, int]]:
    """(function, start, end) of every call of `names`, end at the closing parenthesis."""
    for match in re.finditer(r"\b(" + "|".join(names) + r")\s*\(", expr):
        depth, pos = 1, match.end()
        while depth and pos < len(expr):
            depth += {"(": 1, ")": -1}.get(expr[pos], 0)
            pos += 1
        yield match.group(1), match.start(), pos


def test_dashboard_identity(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "habitus-overview"
    assert dashboard["schemaVersion"] == 39
    assert dashboard["title"]
    assert "__inputs" not in dashboard, "provisioned dashboards need the fixed datasource uid"
    ids = [panel["id"] for panel in all_panels(dashboard["panels"])]
    assert len(ids) == len(set(ids))


def test_every_panel_queries_the_prometheus_datasource(dashboard: dict[str, Any]) -> None:
    panels = [p for p in all_panels(dashboard["panels"]) if p["type"] != "row"]
    assert len(panels) >= 9
    for panel in panels:
        title = panel["title"]
        assert panel["datasource"] == DATASOURCE, title
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{title}: no unit"
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), title
        assert panel["targets"], title
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), title
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, title
            assert target["expr"].strip(), title
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [
        target["expr"]
        for panel in all_panels(dashboard["panels"])
        for target in panel.get("targets") or []
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        exprs.append(query.get("query", "") if isinstance(query, dict) else str(query or ""))
    return exprs


def test_dashboard_uses_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    used: set[str] = set()
    for expr in dashboard_exprs(dashboard):
        names = set(METRIC_NAME.findall(expr))
        assert names <= EXPORTED_METRICS, f"unknown metric in {expr!r}: {names - EXPORTED_METRICS}"
        used |= names
    assert used == EXPORTED_METRICS, f"not shown: {EXPORTED_METRICS - used}"


def test_dashboard_rates_use_the_rate_interval(dashboard: dict[str, Any]) -> None:
    for expr in dashboard_exprs(dashboard):
        assert promql_is_balanced(expr), expr
        calls = list(function_calls(expr, ("rate", "irate", "increase")))
        for function, start, end in calls:
            windows = re.findall(r"\[([^\]]+)\]", expr[start:end])
            assert windows, f"{function}() without a range in {expr!r}"
            allowed = {"$__rate_interval"} | ({"$__range"} if function == "increase" else set())
            assert set(windows) <= allowed, f"{function}() window {windows} in {expr!r}"
        # No hard-coded windows anywhere, and no counter or bucket shown without a rate.
        assert set(re.findall(r"\[([^\]]+)\]", expr)) <= {"$__rate_interval", "$__range"}, expr
        for match in METRIC_NAME.finditer(expr):
            if match.group().endswith(("_total", "_bucket")):
                assert any(s < match.start() < e for _, s, e in calls), f"raw counter in {expr!r}"


def test_dashboard_covers_the_required_views(dashboard: dict[str, Any]) -> None:
    exprs = dashboard_exprs(dashboard)

    def shown(pattern: str) -> bool:
        return any(re.search(pattern, expr) for expr in exprs)

    assert shown(r"by \(type, result\) \(rate\(habitus_gateway_ingest_items_total")
    assert shown(r"histogram_quantile\(0\.5, .*habitus_gateway_http_request_duration")
    assert shown(r"histogram_quantile\(0\.99, .*habitus_gateway_http_request_duration")
    assert shown(r"by \(outcome\) \(rate\(habitus_gateway_rpc_requests_total")
    assert shown(r"by \(projection\) \(rate\(habitus_projection_applied_events_total")
    assert shown(r"histogram_quantile\(0\.99, .*habitus_projection_batch_duration_seconds")
    assert shown(r"habitus_projection_checkpoint_seq")
    assert shown(r"habitus_projection_pending_events")
    assert shown(r"by \([^)]*reason[^)]*\) \(rate\(habitus_dlq_events_total")
    assert shown(r"by \([^)]*status[^)]*\) \(rate\(faststream_received_processed_messages_total")


# --- Kubernetes ---------------------------------------------------------------------------------

GATEWAY_DEPLOYMENT = deploy_check.deployment_name(GATEWAY)
MIGRATE_JOB = "habitus-migrate"


def deployment_name(service: ServiceDescriptor) -> str:
    return deploy_check.deployment_name(service)


def base_resources() -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> the resource, as k8s/base builds (generators left out)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in kustomize_build(K8S_BASE):
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in out, f"{key} defined twice in base"
        out[key] = doc
    return out


def gateway_deployment() -> dict[str, Any]:
    return base_resources()[("Deployment", GATEWAY_DEPLOYMENT)]


def workloads() -> dict[tuple[str, str], dict[str, Any]]:
    """Every Deployment and Job in base: everything that runs the Habitus image."""
    return {key: doc for key, doc in base_resources().items() if key[0] in {"Deployment", "Job"}}


def container_of(resource: dict[str, Any]) -> dict[str, Any]:
    [container] = resource["spec"]["template"]["spec"]["containers"]
    return container


def env_sources(container: dict[str, Any]) -> tuple[set[str], set[str]]:
    config_maps = {s["configMapRef"]["name"] for s in container["envFrom"] if "configMapRef" in s}
    secrets = {s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s}
    return config_maps, secrets


def check_pod(deployment: dict[str, Any], port: int) -> None:
    """What every long-running Habitus pod has: health probes, scrape annotations, a grace
    period longer than the graceful shutdown, resources, non-root, a matching selector."""
    name = deployment["metadata"]["name"]
    pod = deployment["spec"]["template"]
    container = container_of(deployment)
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert port in ports.values(), name

    def probe_path(kind: str) -> str:
        probe = container[kind]["httpGet"]
        assert ports.get(probe["port"], probe["port"]) == port, f"{name}: {kind} port"
        return probe["path"]

    assert probe_path("readinessProbe") == "/readyz", name
    assert probe_path("livenessProbe") == "/healthz", name
    assert probe_path("startupProbe") in {"/healthz", "/readyz"}, name
    assert pod["spec"]["terminationGracePeriodSeconds"] > GRACEFUL_TIMEOUT_SECONDS, name
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][section]), f"{name}: {section}"
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true", name
    assert annotations["prometheus.io/port"] == str(port), name
    assert annotations.get("prometheus.io/path", "/metrics") == "/metrics", name
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, name
    assert pod["spec"]["securityContext"]["runAsUser"] == dockerfile_uid(), name
    assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items(), name


def scaled(service: ServiceDescriptor) -> bool:
    """Whether a bus service has a ScaledObject (one with projections to measure the lag of)."""
    return bool(service.projections)


def test_base_lists_only_what_exists() -> None:
    expected = {
        ("Deployment", GATEWAY_DEPLOYMENT),
        ("Service", GATEWAY_DEPLOYMENT),
        ("PodDisruptionBudget", GATEWAY_DEPLOYMENT),
        ("Job", MIGRATE_JOB),
        ("PersistentVolumeClaim", "habitus-keys"),
    }
    for s in BUILT:
        expected |= {("Deployment", deployment_name(s)),
                     ("PodDisruptionBudget", deployment_name(s))}
        if scaled(s):
            expected.add(("ScaledObject", deployment_name(s)))
    assert set(base_resources()) == expected
    assert any(scaled(s) for s in BUILT)


def spread_problems(deployment: dict[str, Any]) -> list[str]:
    """What keeps a Deployment's pods from being spread over nodes and zones, each constraint
    selecting exactly the Deployment's own pods (what its selector selects)."""
    name = deployment["metadata"]["name"]
    constraints = deployment["spec"]["template"]["spec"].get("topologySpreadConstraints") or []
    own = deployment["spec"]["selector"]["matchLabels"]
    problems = []
    if [c["topologyKey"] for c in constraints] != SPREAD_KEYS:
        problems.append(f"{name}: spread over {[c['topologyKey'] for c in constraints]}")
    for c in constraints:
        if c["labelSelector"] != {"matchLabels": own}:
            problems.append(f"{name}: {c['topologyKey']} selects {c['labelSelector']}, not {own}")
        if c["whenUnsatisfiable"] != "ScheduleAnyway" or c["maxSkew"] != 1:
            problems.append(f"{name}: {c['topologyKey']} must be preferred, skew 1")
        if c.get("matchLabelKeys") != ["pod-template-hash"]:
            problems.append(f"{name}: {c['topologyKey']} compares other revisions' pods")
    return problems


def check_budget(resources: dict[tuple[str, str], dict[str, Any]], name: str) -> None:
    """The Deployment `name` has a budget keeping one of its pods, selecting them exactly."""
    budget = resources[("PodDisruptionBudget", name)]
    deployment = resources[("Deployment", name)]
    assert budget["spec"]["minAvailable"] == 1, name
    assert "maxUnavailable" not in budget["spec"], name
    assert budget["spec"]["selector"] == deployment["spec"]["selector"], name
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow", name


def test_bus_services_share_one_deployment() -> None:
    """k8s/base/services/<deploy name> per bus service in code, each the shared Deployment and
    PodDisruptionBudget (k8s/base/service) with a name suffix, labels and a patch of the
    container name and args, plus the service's generated ScaledObject and nothing else."""
    assert {p.name for p in K8S_SERVICES.iterdir()} == {s.deploy_name for s in BUILT}
    base = kustomization(K8S_BASE)["resources"]
    assert [r for r in base if r.startswith("services/")] == sorted(
        f"services/{s.deploy_name}" for s in BUILT
    )
    assert kustomization(K8S_SERVICE_BASE)["resources"] == ["deployment.yaml", "pdb.yaml"]
    shared = {d["kind"]: d for d in kustomize_build(K8S_SERVICE_BASE)}
    assert set(shared) == {"Deployment", "PodDisruptionBudget"}
    for service in BUILT:
        directory = K8S_SERVICES / service.deploy_name
        generated = [SCALED_OBJECT_FILE] if scaled(service) else []
        assert sorted(p.name for p in directory.iterdir()) == sorted(
            ["kustomization.yaml", *generated]), directory
        spec = kustomization(directory)
        assert spec["resources"] == ["../../service", *generated], directory
        assert spec["nameSuffix"] == f"-{service.deploy_name}", directory
        assert len(directory.joinpath("kustomization.yaml").read_text().splitlines()) < 40
        built = {d["kind"]: d for d in kustomize_build(directory)}
        assert set(built) == set(shared) | ({"ScaledObject"} if generated else set())
        text = json.dumps(built)
        assert "SERVICE" not in text, f"{directory}: a placeholder is left"
        name = deployment_name(service)
        assert {d["metadata"]["name"] for d in built.values()} == {name}

        def named(doc: dict[str, Any], name: str = name) -> Any:
            """The shared resource with the service's name label in its selectors."""
            return json.loads(json.dumps(doc).replace('"habitus-SERVICE"', json.dumps(name)))

        # Only the name, the labels, the container name and args differ from the shared one.
        deployment, shared_deployment = built["Deployment"], named(shared["Deployment"])
        container, shared_container = container_of(deployment), container_of(shared_deployment)
        assert {k: v for k, v in container.items() if k not in {"name", "args"}} == {
            k: v for k, v in shared_container.items() if k not in {"name", "args"}
        }
        assert container["name"] == service.deploy_name
        assert deployment["spec"]["template"]["spec"] | {"containers": []} == (
            shared_deployment["spec"]["template"]["spec"] | {"containers": []}
        )
        assert built["PodDisruptionBudget"]["spec"] == named(shared["PodDisruptionBudget"])[
            "spec"]


def test_kustomize_build_agrees_with_kubectl() -> None:
    tool = shutil.which("kubectl")
    if tool is None:
        pytest.skip("kubectl is not installed")
    result = _run([tool, "kustomize", str(K8S_BASE)])
    assert result.returncode == 0, result.stderr
    docs = load_yaml_all(result.stdout)
    # The resolver leaves generators out; kubectl names the ConfigMap with a content hash.
    generated = {
        d["metadata"]["name"]: d["metadata"]["name"].rsplit("-", 1)[0]
        for d in docs
        if d["kind"] == "ConfigMap"
    }
    text = json.dumps([d for d in docs if d["kind"] != "ConfigMap"], sort_keys=True)
    for name, plain in generated.items():
        text = text.replace(f'"{name}"', f'"{plain}"')
    by_kubectl = {(d["kind"], d["metadata"]["name"]): d for d in json.loads(text)}
    assert by_kubectl == base_resources()


def test_kustomize_build_applies_patches_and_labels(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "kustomization.yaml").write_text("resources: [d.yaml]\n")
    (tmp_path / "base" / "d.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "x"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"a": "1"}},
                    "template": {
                        "metadata": {"labels": {"a": "1"}},
                        "spec": {
                            "containers": [{"name": "c", "image": "i", "args": ["old"]}],
                            "topologySpreadConstraints": [
                                {"topologyKey": "k", "labelSelector": {"matchLabels": {"a": "1"}}},
                                {"topologyKey": "z", "labelSelector": {"matchExpressions": []}},
                            ],
                        },
                    },
                },
            }
        )
        + "---\n"
        + yaml.safe_dump({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                          "metadata": {"name": "x"},
                          "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "1"}}}})
        + "---\n"
        + yaml.safe_dump({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                          "metadata": {"name": "x"}, "spec": {"scaleTargetRef": {"name": "x"}}})
    )
    (tmp_path / "smp.yaml").write_text(
        yaml.safe_dump(
            {
                "kind": "Deployment",
                "metadata": {"name": "x"},
                "spec": {
                    "replicas": 3,
                    "template": {"spec": {"containers": [{"name": "c", "image": "j"}]}},
                },
            }
        )
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["base"],
                "namePrefix": "p-",
                "nameSuffix": "-s",
                "labels": [
                    {"pairs": {"sel": "y"}, "includeSelectors": True},
                    {"pairs": {"tpl": "z"}, "includeTemplates": True},
                    {"pairs": {"meta": "m"}},
                ],
                "patches": [
                    {"path": "smp.yaml"},
                    {
                        "target": {"kind": "Deployment", "name": "x"},
                        "patch": "- op: replace\n  path: /spec/template/spec/containers/0/args\n"
                        "  value: [new]\n",
                    },
                ],
            }
        )
    )
    d, budget, scaled_object = kustomize_build(tmp_path)
    assert d["metadata"] == {"name": "p-x-s", "labels": {"sel": "y", "tpl": "z", "meta": "m"}}
    # Selector labels reach the spread constraints' selectors that have matchLabels, and the
    # budget's; a custom resource gets metadata labels only, its reference keeps its name.
    spread = d["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["labelSelector"] for c in spread] == [
        {"matchLabels": {"a": "1", "sel": "y"}}, {"matchExpressions": []}]
    assert budget["spec"]["selector"] == {"matchLabels": {"a": "1", "sel": "y"}}
    assert budget["metadata"]["labels"] == {"sel": "y", "tpl": "z", "meta": "m"}
    assert scaled_object == {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                             "metadata": {"name": "p-x-s",
                                          "labels": {"sel": "y", "tpl": "z", "meta": "m"}},
                             "spec": {"scaleTargetRef": {"name": "x"}}}
    assert d["spec"]["replicas"] == 3
    assert d["spec"]["selector"]["matchLabels"] == {"a": "1", "sel": "y"}
    assert d["spec"]["template"]["metadata"]["labels"] == {"a": "1", "sel": "y", "tpl": "z"}
    assert d["spec"]["template"]["spec"]["containers"] == [
        {"name": "c", "image": "j", "args": ["new"]}
    ]
    (tmp_path / "kustomization.yaml").write_text("resources: [base]\nimages: []\n")
    with pytest.raises(ValueError, match="images"):
        kustomize_build(tmp_path)
    # A kind whose selectors it does not know is refused, not guessed.
    (tmp_path / "base" / "d.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x"},
         "spec": {"selector": {"matchLabels": {"a": "1"}}}}))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(
        {"resources": ["base"], "labels": [{"pairs": {"sel": "y"}, "includeSelectors": True}]}))
    with pytest.raises(ValueError, match="StatefulSet"):
        kustomize_build(tmp_path)


def test_gateway_deployment() -> None:
    deployment = gateway_deployment()
    assert container_of(deployment)["args"] == ["serve", GATEWAY.name]
    check_pod(deployment, GATEWAY_PORT)
    assert deployment["spec"]["replicas"] == BASE_REPLICAS
    assert spread_problems(deployment) == []
    check_budget(base_resources(), GATEWAY_DEPLOYMENT)


@pytest.mark.parametrize("service", BUILT, ids=lambda s: s.deploy_name)
def test_bus_service_deployment(service: ServiceDescriptor) -> None:
    resources = base_resources()
    deployment = resources[("Deployment", deployment_name(service))]
    container = container_of(deployment)
    assert container["args"] == ["serve", service.name]
    assert container["image"] == container_of(gateway_deployment())["image"]
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert ports.get("metrics") == METRICS_PORT
    check_pod(deployment, METRICS_PORT)
    # The replicas share the projections' partitions; a lost one's are taken over in a lease.
    assert deployment["spec"]["replicas"] == BASE_REPLICAS
    # Each replica is a member of the service's membership by its pod's name.
    assert container["env"] == [{
        "name": "HABITUS_MEMBER",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
    }]
    assert spread_problems(deployment) == []
    check_budget(resources, deployment_name(service))
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == deployment_name(service)
    assert labels["app.kubernetes.io/component"] == service.deploy_name
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": deployment_name(service)
    }
    # No other workload's selector, budget or spread, nor the gateway Service's, picks up
    # these pods.
    for (kind, name), doc in resources.items():
        if name == deployment_name(service):
            continue
        if kind == "Deployment":
            assert not doc["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
            for c in doc["spec"]["template"]["spec"].get("topologySpreadConstraints") or []:
                assert not c["labelSelector"]["matchLabels"].items() <= labels.items(), name
        elif kind == "PodDisruptionBudget":
            assert not doc["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        elif kind == "Service":
            assert not doc["spec"]["selector"].items() <= labels.items(), name


def test_gateway_service_routes_to_the_pods() -> None:
    resources = base_resources()
    service = resources[("Service", GATEWAY_DEPLOYMENT)]
    deployment = resources[("Deployment", GATEWAY_DEPLOYMENT)]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p.get("name"): p["containerPort"] for p in container_of(deployment)["ports"]}
    [port] = service["spec"]["ports"]
    assert ports.get(port["targetPort"], port["targetPort"]) == GATEWAY_PORT


def test_config_comes_from_the_configmap_and_secret() -> None:
    base = kustomization(K8S_BASE)
    [config_name] = [g["name"] for g in base["configMapGenerator"]]
    [secret_name] = [g["name"] for g in kustomization(K8S_DEV)["secretGenerator"]]
    running = workloads()
    assert len(running) == 2 + len(BUILT)
    for key, resource in running.items():
        config_maps, secrets = env_sources(container_of(resource))
        assert config_maps == {config_name}, key
        assert secrets == {secret_name}, key

    config = generator(K8S_BASE, "configMapGenerator", config_name)
    assert config["HABITUS_HTTP_HOST"] == "0.0.0.0"
    assert config["HABITUS_HTTP_PORT"] == str(GATEWAY_PORT)
    assert config["HABITUS_METRICS_PORT"] == str(METRICS_PORT)
    assert config["HABITUS_NATS_URL"].startswith("nats://")
    assert config["HABITUS_REDIS_URL"].startswith("redis://")
    assert not SECRET_SETTINGS & set(config), "secrets belong in the Secret"
    # Each projection split four ways, at most one replica per partition (test_k8s_scaling);
    # a dead replica's partitions taken over within the lease.
    assert config["HABITUS_PARTITIONS"] == "4"
    assert config["HABITUS_LEASE_SECONDS"] == "10"
    Settings.model_validate({"partitions": config["HABITUS_PARTITIONS"],
                             "lease_seconds": config["HABITUS_LEASE_SECONDS"]})
    for key, resource in running.items():
        mounts = {m["mountPath"] for m in container_of(resource).get("volumeMounts", [])}
        assert config["HABITUS_DATA_DIR"] in mounts, f"{key}: data dir must be writable"
        if resource["kind"] == "Deployment":
            # every pod opens what another sealed: one key store, the shared claim
            spec = resource["spec"]["template"]["spec"]
            claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
                      for v in spec["volumes"]}
            [keys] = [m for m in container_of(resource)["volumeMounts"]
                      if m["mountPath"] == config["HABITUS_KEYSTORE_DIR"]]
            assert claims[keys["name"]] == "habitus-keys", key

    secret = generator(K8S_DEV, "secretGenerator", secret_name)
    assert {"HABITUS_DATABASE_URL", "HABITUS_BOOTSTRAP_KEYS"} <= set(secret)
    assert set(secret) <= SECRET_SETTINGS
    for setting, value in secret.items():
        assert "change-me" in value, f"{setting}: only placeholders are committed"


def test_gateway_readiness_waits_for_the_deployed_services(
    services: dict[str, dict[str, Any]],
) -> None:
    [config_name] = [g["name"] for g in kustomization(K8S_BASE)["configMapGenerator"]]
    config = generator(K8S_BASE, "configMapGenerator", config_name)
    expected = config.get("HABITUS_EXPECTED_SERVICES", "")
    # The gateway pings `<cli name>.ping`: exactly the bus services that have a Deployment.
    assert expected == ",".join(sorted(s.name for s in BUILT))
    assert env_of(services[GATEWAY.deploy_name])["HABITUS_EXPECTED_SERVICES"] == expected


def test_migrate_job() -> None:
    job = base_resources()[("Job", MIGRATE_JOB)]
    container = container_of(job)
    assert container["args"] == ["migrate"]
    assert container["image"] == container_of(gateway_deployment())["image"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in {"Never", "OnFailure"}


def test_dev_overlay() -> None:
    overlay = kustomization(K8S_DEV)
    assert overlay["namespace"] == "habitus-dev"
    assert "../../base" in overlay["resources"]
    image = container_of(gateway_deployment())["image"]
    [entry] = [i for i in overlay["images"] if i["name"] == image.split(":")[0]]
    assert entry.get("newTag")


def test_kubectl_kustomize_builds_the_dev_overlay() -> None:
    tool = shutil.which("kubectl")
    if tool is None:
        pytest.skip("kubectl is not installed")
    result = _run([tool, "kustomize", str(K8S_DEV)])
    assert result.returncode == 0, result.stderr
    docs = load_yaml_all(result.stdout)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "habitus-dev", doc["metadata"]["name"]
        # The overlay also includes k8s/observability (Prometheus, Grafana; checked by
        # tests/unit/test_k8s_observability.py): what follows is about Habitus's own resources.
        labels = doc["metadata"].get("labels") or {}
        if labels.get("app.kubernetes.io/part-of") == "habitus-observability":
            continue
        by_kind.setdefault(doc["kind"], []).append(doc)
    [config_map] = by_kind["ConfigMap"]
    [secret] = by_kind["Secret"]
    assert config_map["metadata"]["name"].startswith("habitus-config-")
    assert secret["metadata"]["name"].startswith("habitus-secrets-")
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    assert set(deployments) == {GATEWAY_DEPLOYMENT} | {deployment_name(s) for s in BUILT}
    assert [job["metadata"]["name"] for job in by_kind["Job"]] == [MIGRATE_JOB]
    for resource in [*by_kind["Deployment"], *by_kind["Job"]]:
        name = resource["metadata"]["name"]
        container = container_of(resource)
        # The generated (hash-suffixed) names are what the workloads refer to.
        assert env_sources(container) == (
            {config_map["metadata"]["name"]},
            {secret["metadata"]["name"]},
        ), name
        assert container["image"].endswith(":dev"), name
    # One node (overlays/dev/README.md): one replica each, KEDA may add a second, and the
    # budgets let a drain of the node through.
    for name, deployment in deployments.items():
        assert deployment["spec"]["replicas"] == 1, f"{name}: one replica in dev"
    scaled_objects = {d["metadata"]["name"]: d for d in by_kind["ScaledObject"]}
    assert set(scaled_objects) == {deployment_name(s) for s in BUILT if scaled(s)}
    for name, scaled_object in scaled_objects.items():
        assert scaled_object["metadata"]["namespace"] == "habitus-dev", name
        assert scaled_object["spec"]["scaleTargetRef"]["name"] in deployments, name
        assert scaled_object["spec"]["minReplicaCount"] == 1, name
        assert scaled_object["spec"]["maxReplicaCount"] == 2, name
    budgets = {d["metadata"]["name"]: d for d in by_kind["PodDisruptionBudget"]}
    assert set(budgets) == set(deployments)
    for name, budget in budgets.items():
        assert budget["spec"]["minAvailable"] == 0, name
        assert budget["spec"]["selector"] == deployments[name]["spec"]["selector"], name
    # The second replica has partitions to take: the overlay keeps the base's count.
    assert "HABITUS_PARTITIONS" not in generator(K8S_DEV, "configMapGenerator", "habitus-config")
    readme = (K8S_DEV / "README.md").read_text()
    for fact in ("`minReplicaCount`", "`maxReplicaCount`", "`minAvailable`", "KEDA"):
        assert fact in readme, fact


@pytest.mark.parametrize("directory", [K8S_BASE, K8S_DEV], ids=["base", "dev"])
def test_kubectl_renders_only_valid_resources(directory: Path) -> None:
    """Every resource kubectl renders passes the Kubernetes API's schemas (strict: a
    misspelt field fails), the ScaledObjects and anything else custom their own schemas."""
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    tool = shutil.which("kubectl")
    if tool is None:
        pytest.skip("kubectl is not installed")
    result = _run([tool, "kustomize", str(directory)])
    assert result.returncode == 0, result.stderr
    docs = load_yaml_all(result.stdout)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "PodDisruptionBudget", "ScaledObject", "Job", "Service"} <= kinds
    for doc in docs:
        try:
            validate_resource(doc)
        except Exception as exc:  # name the resource, then the schema's complaint
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {exc}")


def test_validation_rejects_what_the_cluster_would() -> None:
    """The validators are strict: a misspelt field of a core kind or of a ScaledObject, a
    trigger of another type, a custom kind without a schema all fail."""
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    resources = base_resources()
    deployment = json.loads(json.dumps(resources[("Deployment", GATEWAY_DEPLOYMENT)]))
    validate_resource(deployment)
    deployment["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["maxskew"] = 1
    budget = json.loads(json.dumps(resources[("PodDisruptionBudget", GATEWAY_DEPLOYMENT)]))
    budget["spec"]["minAvailable"] = [1]
    name = deployment_name(next(s for s in BUILT if scaled(s)))
    scaled_object = resources[("ScaledObject", name)]
    validate_resource(scaled_object)
    misspelt = json.loads(json.dumps(scaled_object))
    misspelt["spec"]["minReplicas"] = 2
    other_type = json.loads(json.dumps(scaled_object))
    other_type["spec"]["triggers"][0]["type"] = "prometheus"
    extra_key = json.loads(json.dumps(scaled_object))
    extra_key["spec"]["triggers"][0]["metadata"]["stram"] = "x"
    no_consumer = json.loads(json.dumps(scaled_object))
    del no_consumer["spec"]["triggers"][0]["metadata"]["consumer"]
    numeric = json.loads(json.dumps(scaled_object))
    numeric["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 2000
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    for bad in (deployment, budget, misspelt, other_type, extra_key, no_consumer, numeric,
                unknown):
        with pytest.raises(Exception):  # noqa: B017 (jsonschema's or kubernetes-validate's)
            validate_resource(bad)


def test_every_deploy_file_is_valid_yaml() -> None:
    paths = [COMPOSE_FILE, *sorted((ROOT / "deploy").rglob("*.y*ml"))]
    paths += sorted((ROOT / "k8s").rglob("*.yaml"))
    for path in paths:
        assert load_yaml_all(path.read_text(encoding="utf-8")), path.relative_to(ROOT)


def test_the_dev_overlay_readme_names_every_server_it_expects() -> None:
    # The overlay deploys no NATS, Postgres or Redis: its README must say where each is
    # expected, at the very address the pods are given (Redis was missing once).
    literals = [line.strip().removeprefix("- ") for path in (
        ROOT / "k8s" / "base" / "kustomization.yaml",
        ROOT / "k8s" / "overlays" / "dev" / "kustomization.yaml")
        for line in path.read_text().splitlines()]
    urls = dict(line.split("=", 1) for line in literals
                if line.startswith(("HABITUS_NATS_URL=", "HABITUS_DATABASE_URL=",
                                    "HABITUS_REDIS_URL=")))
    assert set(urls) == {"HABITUS_NATS_URL", "HABITUS_DATABASE_URL", "HABITUS_REDIS_URL"}
    readme = (ROOT / "k8s" / "overlays" / "dev" / "README.md").read_text()
    for name, url in urls.items():
        assert f"`{url}`" in readme and f"`{name}`" in readme, name
    for server in ("NATS", "PostgreSQL", "Redis"):
        assert f"| {server}" in readme, server


def test_the_compose_header_describes_the_profiles_it_has(compose: dict[str, Any]) -> None:
    header = COMPOSE_FILE.read_text().split("\nx-habitus-env", 1)[0]
    profiles = {p for spec in compose["services"].values() for p in spec.get("profiles") or []}
    if profiles:
        for profile in profiles:
            assert f"--profile {profile}" in header, profile
    else:
        assert "no profiles" in header
