"""The deploy files agree with the system they deploy.

Checks the Dockerfile, docker-compose.yml, the Prometheus scrape config and alert rules, the
Grafana provisioning and dashboard, and the kustomize base and dev overlay against the facts the
code fixes: commands, ports, environment, probe paths and metric names. Where the docker compose
plugin or kubectl is installed, their own validators run too; otherwise those two tests skip.

PyYAML is used when it is importable. It is not a project dependency, so a small reader for the
block-style YAML these files use is included; when PyYAML is present the two are compared on
every file, which keeps the reader honest.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
DASHBOARD_FILE = GRAFANA_DIR / "dashboards" / "habitus-overview.json"
K8S_BASE = ROOT / "k8s" / "base"
K8S_DEV = ROOT / "k8s" / "overlays" / "dev"

# --- Facts fixed by the code --------------------------------------------------------------------

# Compose service name -> the `habitus serve <name>` argument, for the services that are not the
# gateway. Compose names use hyphens (they are DNS names); the CLI uses the package names.
BUS_SERVICES = {
    "producers": "producers",
    "extractor": "extractor",
    "stability-detector": "stability_detector",
    "profile-renderer": "profile_renderer",
    "tool-memory": "tool_memory",
    "trace-router": "trace_router",
    "habits": "habits",
}
INFRA_SERVICES = {"nats", "postgres", "redis", "nats-exporter", "prometheus", "grafana"}
HABITUS_CONTAINERS = {"migrate", "gateway", *BUS_SERVICES}
SERVICES_PROFILE = "services"

GATEWAY_PORT = 8080
METRICS_PORT = 9000
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
}

EXPORTED_METRICS = frozenset(
    {
        "faststream_received_messages_total",
        "faststream_received_processed_messages_total",
        "faststream_received_processed_messages_duration_seconds_bucket",
        "faststream_published_messages_total",
        "habitus_projection_applied_events_total",
        "habitus_projection_batch_duration_seconds_bucket",
        "habitus_projection_checkpoint_seq",
        "habitus_projection_pending_events",
        "habitus_dlq_events_total",
        "habitus_projection_redelivered_events_total",
        "habitus_gateway_ingest_items_total",
        "habitus_gateway_http_request_duration_seconds_bucket",
        "habitus_gateway_rpc_requests_total",
    }
)
METRIC_NAME = re.compile(r"\b(?:habitus|faststream)_\w+")
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}


# --- Loading ------------------------------------------------------------------------------------


def _pyyaml_loader() -> tuple[Callable[[str], Any], Callable[[str], list[Any]]] | None:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        return None
    return yaml.safe_load, lambda text: [d for d in yaml.safe_load_all(text) if d is not None]


def load_yaml(text: str) -> Any:
    loaders = _pyyaml_loader()
    return loaders[0](text) if loaders else MiniYaml(text).load()


def load_yaml_all(text: str) -> list[Any]:
    loaders = _pyyaml_loader()
    return loaders[1](text) if loaders else mini_load_all(text)


def read_yaml(path: Path) -> Any:
    assert path.is_file(), f"missing {path.relative_to(ROOT)}"
    return load_yaml(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = read_yaml(COMPOSE_FILE)
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict)
    return doc


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


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


def interpolate(value: Any) -> str:
    """Compose's `${VAR:-default}` with an empty environment: the default (or "")."""
    text = "" if value is None else str(value)
    if isinstance(value, bool):
        text = text.lower()

    def default(match: re.Match[str]) -> str:
        return match.group(2) or ""

    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", default, text)


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: interpolate(value) for key, value in env.items()}


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    if command is None:
        return []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


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


def test_compose_defines_every_service(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == INFRA_SERVICES | HABITUS_CONTAINERS


def built_services() -> set[str]:
    """Compose names of the bus services that exist in code (registered entry points)."""
    from importlib.metadata import entry_points

    installed = {ep.name for ep in entry_points(group="habitus.services")}
    return {name for name, cli in BUS_SERVICES.items() if cli in installed}


def test_only_unbuilt_services_are_behind_the_services_profile(
    services: dict[str, dict[str, Any]],
) -> None:
    built = built_services()
    assert {"producers", "stability-detector"} <= built
    for name, service in services.items():
        profiles = service.get("profiles") or []
        if name in BUS_SERVICES and name not in built:
            assert profiles == [SERVICES_PROFILE], name
        else:
            assert not profiles, f"{name} must start with a plain `docker compose up`"


def test_every_habitus_container_runs_the_same_image(services: dict[str, dict[str, Any]]) -> None:
    builds = {json.dumps(services[n].get("build"), sort_keys=True) for n in HABITUS_CONTAINERS}
    images = {services[n].get("image") for n in HABITUS_CONTAINERS}
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


def test_habitus_commands(services: dict[str, dict[str, Any]]) -> None:
    assert command_of(services["migrate"]) == ["migrate"]
    assert command_of(services["gateway"]) == ["serve", "gateway"]
    for name, package in BUS_SERVICES.items():
        assert command_of(services[name]) == ["serve", package], name


def test_habitus_environment(services: dict[str, dict[str, Any]]) -> None:
    for name in HABITUS_CONTAINERS:
        env = env_of(services[name])
        for key, value in COMPOSE_ENV.items():
            assert env.get(key) == value, f"{name}: {key}={env.get(key)!r}"
        assert COMPOSE_ENV_PRESENT <= set(env), name
        assert env["HABITUS_DATA_DIR"] in mounts_of(services[name]), f"{name}: data dir volume"
    assert env_of(services["gateway"]).get("HABITUS_HTTP_PORT") == str(GATEWAY_PORT)
    for name in BUS_SERVICES:
        assert env_of(services[name]).get("HABITUS_METRICS_PORT") == str(METRICS_PORT), name


def test_startup_order(services: dict[str, dict[str, Any]]) -> None:
    migrate = services["migrate"]
    assert depends_of(migrate).get("postgres") == "service_healthy"
    assert str(migrate.get("restart", "no")) in {"no", "on-failure"}, "migrate is one-shot"
    for name in ("gateway", *BUS_SERVICES):
        deps = depends_of(services[name])
        assert deps.get("migrate") == "service_completed_successfully", name
        assert deps.get("nats") == "service_healthy", name
        assert deps.get("redis") == "service_healthy", name
    # Every service waited on as healthy has a healthcheck.
    for service in services.values():
        for dep, condition in depends_of(service).items():
            if condition == "service_healthy":
                assert services[dep].get("healthcheck"), f"{dep} has no healthcheck"


def test_published_ports(services: dict[str, dict[str, Any]]) -> None:
    def published(name: str) -> set[str]:
        return {str(p) for p in services[name].get("ports") or []}

    assert f"{GATEWAY_PORT}:{GATEWAY_PORT}" in published("gateway")
    assert "9090:9090" in published("prometheus")
    assert "3000:3000" in published("grafana")
    for name in BUS_SERVICES:
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


def scrape_targets(config: dict[str, Any]) -> dict[str, set[str]]:
    """job -> host:port targets, with DNS discovery expanded to name:port."""
    jobs: dict[str, set[str]] = {}
    for job in config["scrape_configs"]:
        targets = jobs.setdefault(job["job_name"], set())
        for static in job.get("static_configs") or []:
            targets.update(static["targets"])
        for dns in job.get("dns_sd_configs") or []:
            targets.update(f"{name}:{dns['port']}" for name in dns["names"])
    return jobs


def test_prometheus_scrapes_every_habitus_process(
    prometheus_config: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    jobs = scrape_targets(prometheus_config)
    assert len(jobs) == len(prometheus_config["scrape_configs"]), "duplicate job names"
    targets = set().union(*jobs.values())
    assert f"gateway:{GATEWAY_PORT}" in targets
    for name in BUS_SERVICES:
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
    rules = [rule for group in alert_rules["groups"] for rule in group["rules"]]
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert len({group["name"] for group in alert_rules["groups"]}) == len(alert_rules["groups"])
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
        expr = rule["expr"]
        assert promql_is_balanced(expr), rule["alert"]
        assert set(METRIC_NAME.findall(expr)) <= EXPORTED_METRICS, rule["alert"]
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"]
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

GATEWAY_DEPLOYMENT = "habitus-gateway"
MIGRATE_JOB = "habitus-migrate"


def deployment_name(service: str) -> str:
    """Kubernetes Deployment name of a bus service, from its compose name."""
    return f"habitus-{service}"


def kustomization(directory: Path) -> dict[str, Any]:
    return read_yaml(directory / "kustomization.yaml")


def base_resources() -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> the resource, for the files listed in the base kustomization."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for name in kustomization(K8S_BASE)["resources"]:
        for doc in load_yaml_all((K8S_BASE / name).read_text(encoding="utf-8")):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in out, f"{key} defined twice in base"
            out[key] = doc
    return out


def of_kind(resources: dict[tuple[str, str], dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for (k, _), doc in resources.items() if k == kind]


def gateway_deployment() -> dict[str, Any]:
    return base_resources()[("Deployment", GATEWAY_DEPLOYMENT)]


def workloads() -> dict[tuple[str, str], dict[str, Any]]:
    """Every Deployment and Job in base: everything that runs the Habitus image."""
    return {key: doc for key, doc in base_resources().items() if key[0] in {"Deployment", "Job"}}


def generator(directory: Path, key: str, name: str) -> dict[str, str]:
    [gen] = [g for g in kustomization(directory).get(key) or [] if g["name"] == name]
    return dict(literal.split("=", 1) for literal in gen.get("literals") or [])


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


def test_base_lists_only_what_exists() -> None:
    expected = {
        ("Deployment", GATEWAY_DEPLOYMENT),
        ("Service", GATEWAY_DEPLOYMENT),
        ("Job", MIGRATE_JOB),
    } | {("Deployment", deployment_name(name)) for name in built_services()}
    assert set(base_resources()) == expected


def test_gateway_deployment() -> None:
    deployment = gateway_deployment()
    assert container_of(deployment)["args"] == ["serve", "gateway"]
    check_pod(deployment, GATEWAY_PORT)


@pytest.mark.parametrize("service", sorted(built_services()))
def test_bus_service_deployment(service: str) -> None:
    resources = base_resources()
    deployment = resources[("Deployment", deployment_name(service))]
    container = container_of(deployment)
    assert container["args"] == ["serve", BUS_SERVICES[service]]
    assert container["image"] == container_of(gateway_deployment())["image"]
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert ports.get("metrics") == METRICS_PORT
    check_pod(deployment, METRICS_PORT)
    # One active consumer per projection (advisory lock); more replicas are standbys only.
    assert deployment["spec"]["replicas"] == 1
    # No other workload's selector, nor the gateway Service's, picks up these pods.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for (kind, name), doc in resources.items():
        if name == deployment_name(service):
            continue
        if kind == "Deployment":
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
    assert len(running) == 2 + len(built_services())
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
    for key, resource in running.items():
        mounts = {m["mountPath"] for m in container_of(resource).get("volumeMounts", [])}
        assert config["HABITUS_DATA_DIR"] in mounts, f"{key}: data dir must be writable"

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
    expected = {s.strip() for s in config.get("HABITUS_EXPECTED_SERVICES", "").split(",")}
    # The gateway pings `<cli name>.ping`: exactly the bus services that have a Deployment.
    assert expected == {BUS_SERVICES[name] for name in built_services()}
    compose = env_of(services["gateway"])["HABITUS_EXPECTED_SERVICES"]
    assert {s.strip() for s in compose.split(",")} == expected


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
        by_kind.setdefault(doc["kind"], []).append(doc)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "habitus-dev", doc["metadata"]["name"]
    [config_map] = by_kind["ConfigMap"]
    [secret] = by_kind["Secret"]
    assert config_map["metadata"]["name"].startswith("habitus-config-")
    assert secret["metadata"]["name"].startswith("habitus-secrets-")
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    assert set(deployments) == {GATEWAY_DEPLOYMENT} | {deployment_name(s) for s in built_services()}
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
    for name, deployment in deployments.items():
        assert deployment["spec"]["replicas"] == 1, f"{name}: one replica in dev"


# --- YAML reader --------------------------------------------------------------------------------


def deploy_yaml_texts() -> dict[str, str]:
    paths = [COMPOSE_FILE, *sorted((ROOT / "deploy").rglob("*.y*ml"))]
    paths += sorted((ROOT / "k8s").rglob("*.yaml"))
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in paths}


def test_yaml_reader_agrees_with_pyyaml() -> None:
    loaders = _pyyaml_loader()
    if loaders is None:
        pytest.skip("PyYAML is not installed; nothing to compare the reader with")
    texts = deploy_yaml_texts()
    kubectl = shutil.which("kubectl")
    if kubectl:
        texts["kustomize build"] = _run([kubectl, "kustomize", str(K8S_DEV)]).stdout
    for name, text in texts.items():
        assert mini_load_all(text) == loaders[1](text), name


def test_yaml_reader_handles_the_constructs_in_use() -> None:
    text = """
# comment
base: &base
  image: "img:1"   # trailing comment
  list: [a, 'b c', "d", {k: v}]
merged:
  <<: *base
  image: other
seq:
- one
- key: 1
  other: -2.5
- - nested
block: |
  line one
    indented # not a comment
folded: >-
  a
  b

  c
empty:
flag: true
none: ~
quoted: 'it''s'
"""
    assert MiniYaml(text).load() == {
        "base": {"image": "img:1", "list": ["a", "b c", "d", {"k": "v"}]},
        "merged": {"image": "other", "list": ["a", "b c", "d", {"k": "v"}]},
        "seq": ["one", {"key": 1, "other": -2.5}, ["nested"]],
        "block": "line one\n  indented # not a comment\n",
        "folded": "a b\nc",
        "empty": None,
        "flag": True,
        "none": None,
        "quoted": "it's",
    }
    with pytest.raises(ValueError):
        MiniYaml("a: 1\n  b: 2\n").load()


def mini_load_all(text: str) -> list[Any]:
    docs: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.rstrip() == "---":
            docs.append([])
        else:
            docs[-1].append(line)
    loaded = [MiniYaml("\n".join(lines)).load() for lines in docs]
    return [doc for doc in loaded if doc is not None]


class MiniYaml:
    """Block-style YAML as written in config files: mappings, sequences, flow collections on
    one line, quoted and plain scalars, `|`/`>` block scalars, anchors, aliases and `<<` merges.
    Anything else raises ValueError rather than being read wrongly."""

    _INT = re.compile(r"[-+]?[0-9]+")
    _FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*)?\.[0-9]+(?:[eE][-+][0-9]+)?")

    def __init__(self, text: str) -> None:
        self.lines = text.replace("\t", "    ").splitlines()
        self.anchors: dict[str, Any] = {}

    def load(self) -> Any:
        i = self._skip(0)
        if i < len(self.lines) and self._content(i) == "---":
            i = self._skip(i + 1)
        if i >= len(self.lines):
            return None
        value, i = self._block(i, self._indent(i))
        i = self._skip(i)
        if i < len(self.lines):
            raise ValueError(f"line {i + 1}: unexpected {self.lines[i]!r}")
        return value

    # Lines.

    @staticmethod
    def _strip_comment(line: str) -> str:
        quote = ""
        for pos, ch in enumerate(line):
            if quote:
                if ch == quote and not (quote == '"' and line[pos - 1] == "\\"):
                    quote = ""
            elif ch in "\"'" and (pos == 0 or line[pos - 1] in " \t[{,:"):
                quote = ch
            elif ch == "#" and (pos == 0 or line[pos - 1] in " \t"):
                return line[:pos].rstrip()
        return line.rstrip()

    def _content(self, i: int) -> str:
        return self._strip_comment(self.lines[i]).strip()

    def _indent(self, i: int) -> int:
        line = self.lines[i]
        return len(line) - len(line.lstrip(" "))

    def _skip(self, i: int) -> int:
        while i < len(self.lines) and not self._content(i):
            i += 1
        return i

    @staticmethod
    def _is_item(content: str) -> bool:
        return content == "-" or content.startswith("- ")

    # Structure.

    def _block(self, i: int, indent: int) -> tuple[Any, int]:
        if self._is_item(self._content(i)):
            return self._sequence(i, indent)
        return self._mapping(i, indent)

    def _sequence(self, i: int, indent: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        while True:
            i = self._skip(i)
            if i >= len(self.lines) or self._indent(i) < indent:
                return items, i
            content = self._content(i)
            if self._indent(i) > indent or not self._is_item(content):
                if self._indent(i) == indent:
                    return items, i
                raise ValueError(f"line {i + 1}: bad indentation")
            rest = content[1:].lstrip(" ")
            if not rest:
                value, i = self._value(i, "", indent)
            elif self._is_item(rest) or self._split_key(rest) is not None:
                column = indent + len(content) - len(rest)
                self.lines[i] = " " * column + self.lines[i].lstrip(" ")[len(content) - len(rest) :]
                value, i = self._block(i, column)
            else:
                value, i = self._value(i, rest, indent)
            items.append(value)

    def _mapping(self, i: int, indent: int) -> tuple[dict[Any, Any], int]:
        result: dict[Any, Any] = {}
        merges: list[Any] = []
        while True:
            i = self._skip(i)
            if i >= len(self.lines) or self._indent(i) < indent:
                break
            if self._indent(i) > indent:
                raise ValueError(f"line {i + 1}: bad indentation")
            content = self._content(i)
            if self._is_item(content):
                break
            pair = self._split_key(content)
            if pair is None:
                raise ValueError(f"line {i + 1}: expected `key: value`, got {content!r}")
            key_text, value_text = pair
            value, i = self._value(i, value_text, indent)
            if key_text == "<<":
                merges.extend(value if isinstance(value, list) else [value])
                continue
            key = self._scalar(key_text)
            if key in result:
                raise ValueError(f"duplicate key {key!r}")
            result[key] = value
        merged: dict[Any, Any] = {}
        for source in merges:
            if not isinstance(source, dict):
                raise ValueError("`<<` needs a mapping")
            for key, value in source.items():
                merged.setdefault(key, value)
        merged.update(result)
        return merged, i

    @staticmethod
    def _split_key(content: str) -> tuple[str, str] | None:
        if content[:1] in "[{&*|>" or content.startswith("- "):
            return None
        quote = ""
        for pos, ch in enumerate(content):
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "\"'" and pos == 0:
                quote = ch
            elif ch == ":" and (pos + 1 == len(content) or content[pos + 1] == " "):
                return content[:pos].strip(), content[pos + 1 :].strip()
        return None

    def _value(self, i: int, text: str, indent: int) -> tuple[Any, int]:
        """The value that starts on line i with `text` (after `key:` or `- `)."""
        anchor = None
        if text.startswith("&"):
            anchor, _, text = text[1:].partition(" ")
            text = text.strip()
        if not text:
            j = self._skip(i + 1)
            deeper = j < len(self.lines) and self._indent(j) > indent
            same_level_items = (
                j < len(self.lines)
                and self._indent(j) == indent
                and self._is_item(self._content(j))
            )
            value, i = (
                self._block(j, self._indent(j)) if deeper or same_level_items else (None, i + 1)
            )
        elif text.startswith("*"):
            value, i = self.anchors[text[1:]], i + 1
        elif text[0] in "|>":
            value, i = self._block_scalar(i, text, indent)
        elif text[0] in "[{":
            value, end = self._flow(text, 0)
            if text[end:].strip():
                raise ValueError(f"line {i + 1}: text after a flow collection")
            i += 1
        elif text[0] in "\"'":
            value, end = self._quoted(text, 0)
            if text[end:].strip():
                raise ValueError(f"line {i + 1}: text after a quoted scalar")
            i += 1
        else:
            parts = [text]
            i += 1
            while i < len(self.lines) and self._content(i) and self._indent(i) > indent:
                more = self._content(i)
                if self._is_item(more) or self._split_key(more) is not None:
                    raise ValueError(f"line {i + 1}: bad indentation")
                parts.append(more)
                i += 1
            value = self._scalar(" ".join(parts))
        if anchor:
            self.anchors[anchor] = value
        return value, i

    def _block_scalar(self, i: int, header: str, indent: int) -> tuple[str, int]:
        style, chomp = header[0], header[1:].strip()
        if chomp not in {"", "-", "+"}:
            raise ValueError(f"line {i + 1}: unsupported block scalar header {header!r}")
        body: list[str] = []
        j = i + 1
        while j < len(self.lines) and (not self.lines[j].strip() or self._indent(j) > indent):
            body.append(self.lines[j])
            j += 1
        filled = [line for line in body if line.strip()]
        width = min((len(line) - len(line.lstrip(" ")) for line in filled), default=0)
        lines = [line[width:] if line.strip() else "" for line in body]
        while lines and not lines[-1]:
            lines.pop()
        trailing = len(body) - len(lines)
        kept = lines
        if style == "|":
            text = "\n".join(kept)
        else:
            text = ""
            for line in kept:
                if line.startswith(" "):
                    raise ValueError("more-indented lines in a folded scalar are not supported")
                if not line:
                    text += "\n"
                elif text and not text.endswith("\n"):
                    text += " " + line
                else:
                    text += line
        if not kept:
            return "", j
        if chomp == "-":
            return text, j
        if chomp == "+":
            return text + "\n" * (trailing + 1), j
        return text + "\n", j

    # Scalars.

    def _scalar(self, text: str) -> Any:
        text = text.strip()
        if text[:1] in "\"'":
            value, end = self._quoted(text, 0)
            if text[end:].strip():
                raise ValueError(f"text after a quoted scalar: {text!r}")
            return value
        if text in {"", "~", "null", "Null", "NULL"}:
            return None
        if text in {"true", "True", "TRUE"}:
            return True
        if text in {"false", "False", "FALSE"}:
            return False
        if self._INT.fullmatch(text):
            return int(text)
        if self._FLOAT.fullmatch(text):
            return float(text.replace("_", ""))
        return text

    @staticmethod
    def _quoted(text: str, pos: int) -> tuple[str, int]:
        quote, pos, out = text[pos], pos + 1, []
        escapes = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", '"': '"', "\\": "\\", "/": "/"}
        while pos < len(text):
            ch = text[pos]
            if quote == "'" and ch == "'":
                if text[pos + 1 : pos + 2] == "'":
                    out.append("'")
                    pos += 2
                    continue
                return "".join(out), pos + 1
            if quote == '"' and ch == '"':
                return "".join(out), pos + 1
            if quote == '"' and ch == "\\":
                code = text[pos + 1 : pos + 2]
                if code == "u":
                    out.append(chr(int(text[pos + 2 : pos + 6], 16)))
                    pos += 6
                    continue
                if code not in escapes:
                    raise ValueError(f"unsupported escape \\{code}")
                out.append(escapes[code])
                pos += 2
                continue
            out.append(ch)
            pos += 1
        raise ValueError(f"unterminated quoted scalar: {text!r}")

    def _flow(self, text: str, pos: int) -> tuple[Any, int]:
        def skip(p: int) -> int:
            while p < len(text) and text[p] == " ":
                p += 1
            return p

        def node(p: int, stops: str) -> tuple[Any, int]:
            p = skip(p)
            if text[p] in "[{":
                return self._flow(text, p)
            if text[p] in "\"'":
                return self._quoted(text, p)
            if text[p] == "*":
                end = p
                while end < len(text) and text[end] not in stops:
                    end += 1
                return self.anchors[text[p + 1 : end].strip()], end
            end = p
            while end < len(text) and text[end] not in stops:
                if text[end] == ":" and ":" in stops and text[end + 1 : end + 2] in {" ", ""}:
                    break
                end += 1
            return self._scalar(text[p:end]), end

        opening, pos = text[pos], pos + 1
        closing = "]" if opening == "[" else "}"
        items: list[Any] = []
        mapping: dict[Any, Any] = {}
        while True:
            pos = skip(pos)
            if pos >= len(text):
                raise ValueError(f"unterminated flow collection: {text!r}")
            if text[pos] == closing:
                return (items if opening == "[" else mapping), pos + 1
            if opening == "[":
                value, pos = node(pos, ",]")
                items.append(value)
            else:
                key, pos = node(pos, ":,}")
                pos = skip(pos)
                if text[pos : pos + 1] != ":":
                    raise ValueError(f"flow mapping entry without a value: {text!r}")
                value, pos = node(pos + 1, ",}")
                mapping[key] = value
            pos = skip(pos)
            if text[pos : pos + 1] == ",":
                pos += 1
            elif text[pos : pos + 1] != closing:
                raise ValueError(f"bad flow collection: {text!r}")
