"""k8s/observability: Prometheus and Grafana in the dev overlay, provisioned from deploy/.

The ConfigMap sources under k8s/observability/files are copies (kustomize loads nothing outside
the kustomization root) written by `python -m habitus.ops.k8s_observability --write`; these
tests fail when a copy is stale, so the cluster gets exactly what compose mounts. With kubectl
installed, the rendered dev overlay is checked: both Deployments, the ConfigMaps mounted where
compose mounts the files, the RBAC kubernetes_sd needs, and the datasource URL resolving to the
Prometheus Service.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from habitus.ops import k8s_observability as obs

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OBS = ROOT / "k8s" / "observability"
K8S_DEV = ROOT / "k8s" / "overlays" / "dev"
NAMESPACE = "habitus-dev"
DATASOURCE_UID = "prometheus"
#: kubectl apply (client side) keeps the object in an annotation; annotations are capped at this
ANNOTATIONS_LIMIT = 262144
#: what a promtool built without Kubernetes discovery (Debian's) says of kubernetes_sd_configs
NO_K8S_SD = "field kubernetes_sd_configs not found"


# --- The copies ---------------------------------------------------------------------------------


def test_regeneration_changes_nothing() -> None:
    assert obs.stale() == [], "run python -m habitus.ops.k8s_observability --write"
    assert obs.main(["--check"]) == 0


def test_the_copies_are_the_deploy_files() -> None:
    files = OBS / "files"
    pairs = {
        files / "prometheus" / "prometheus.yml": DEPLOY / "prometheus" / "prometheus-k8s.yml",
        files / "prometheus" / "alerts.yml": DEPLOY / "prometheus" / "alerts.yml",
    }
    for kind, target in (("datasources", "datasources"), ("dashboards", "dashboard-providers")):
        for source in sorted((DEPLOY / "grafana" / "provisioning" / kind).glob("*.yaml")):
            pairs[files / "grafana" / target / source.name] = source
    dashboards = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
    assert dashboards
    for source in dashboards:
        pairs[files / "grafana" / "dashboards" / source.name] = source
    for copy, source in pairs.items():
        assert copy.read_bytes() == source.read_bytes(), copy.relative_to(ROOT)
    present = {p for p in files.rglob("*") if p.is_file()}
    assert present == set(pairs)


def test_check_reports_a_changed_missing_or_extra_copy(tmp_path: Path) -> None:
    out = tmp_path / "observability"
    assert obs.write(out)
    assert obs.stale(out) == [] and obs.write(out) == []
    (out / "files" / "prometheus" / "alerts.yml").write_text("groups: []\n")
    (out / "files" / "grafana" / "dashboards" / "habitus-overview.json").unlink()
    (out / "files" / "grafana" / "dashboards" / "gone.json").write_text("{}")
    assert obs.stale(out) == [
        "files/grafana/dashboards/habitus-overview.json",
        "files/prometheus/alerts.yml",
        "files/grafana/dashboards/gone.json",
    ]
    assert obs.main(["--check", "--out", str(out)]) == 1
    obs.write(out)
    assert obs.stale(out) == []
    assert not (out / "files" / "grafana" / "dashboards" / "gone.json").exists()


def test_the_dev_overlay_includes_observability() -> None:
    overlay = yaml.safe_load((K8S_DEV / "kustomization.yaml").read_text())
    assert "../../observability" in overlay["resources"]


def test_the_datasource_uid_is_the_one_the_dashboards_use() -> None:
    [datasource] = yaml.safe_load(
        (OBS / "files" / "grafana" / "datasources" / "prometheus.yaml").read_text()
    )["datasources"]
    assert datasource["uid"] == DATASOURCE_UID and datasource["type"] == "prometheus"
    for path in sorted((OBS / "files" / "grafana" / "dashboards").glob("*.json")):
        uids = set(_datasource_uids(json.loads(path.read_text())))
        assert uids == {DATASOURCE_UID}, (path.name, uids)


def _datasource_uids(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = []
        ds = node.get("datasource")
        if isinstance(ds, dict) and "uid" in ds:
            found.append(str(ds["uid"]))
        for value in node.values():
            found += _datasource_uids(value)
        return found
    if isinstance(node, list):
        return [uid for item in node for uid in _datasource_uids(item)]
    return []


# --- The rendered dev overlay -------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str], dict[str, Any]]:
    tool = shutil.which("kubectl")
    if tool is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run([tool, "kustomize", str(K8S_DEV)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _generated(rendered: dict[tuple[str, str], dict[str, Any]], kind: str,
               name: str) -> dict[str, Any]:
    """The generated (hash-suffixed) ConfigMap or Secret `name`."""
    [doc] = [d for (k, n), d in rendered.items() if k == kind and n.rsplit("-", 1)[0] == name]
    return doc


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def _mounts(deployment: dict[str, Any]) -> dict[str, str]:
    """Mount path -> the ConfigMap mounted there (or "" for another volume)."""
    pod = _pod(deployment)
    [container] = pod["containers"]
    volumes = {v["name"]: (v.get("configMap") or {}).get("name", "") for v in pod["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}


def _compose_service(name: str) -> dict[str, Any]:
    service: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())[
        "services"][name]
    return service


def test_prometheus_deployment(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    deployment = rendered[("Deployment", "prometheus")]
    assert deployment["metadata"]["namespace"] == NAMESPACE
    pod = _pod(deployment)
    [container] = pod["containers"]
    assert container["image"] == _compose_service("prometheus")["image"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in container["args"]
    config = _generated(rendered, "ConfigMap", "prometheus-config")
    assert _mounts(deployment)["/etc/prometheus"] == config["metadata"]["name"]
    assert config["data"] == {
        "prometheus.yml": (DEPLOY / "prometheus" / "prometheus-k8s.yml").read_text(),
        "alerts.yml": (DEPLOY / "prometheus" / "alerts.yml").read_text(),
    }
    # Not a Habitus pod: the k8s scrape config must not take Prometheus for a bus service.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels.get("app.kubernetes.io/part-of") != "habitus"
    assert "prometheus.io/scrape" not in (
        deployment["spec"]["template"]["metadata"].get("annotations") or {})


def test_prometheus_may_discover_the_pods(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    account = _pod(rendered[("Deployment", "prometheus")])["serviceAccountName"]
    assert ("ServiceAccount", account) in rendered
    config = yaml.safe_load(_generated(rendered, "ConfigMap", "prometheus-config")["data"][
        "prometheus.yml"])
    namespaces = {
        ns
        for job in config["scrape_configs"]
        for sd in job.get("kubernetes_sd_configs") or []
        for ns in sd["namespaces"]["names"]
    }
    assert namespaces == {NAMESPACE}
    bindings = [d for (k, _), d in rendered.items() if k == "RoleBinding"]
    granted = set()
    for binding in bindings:
        subjects = {(s["kind"], s["name"], s.get("namespace")) for s in binding["subjects"]}
        if ("ServiceAccount", account, NAMESPACE) not in subjects:
            continue
        assert binding["metadata"]["namespace"] == NAMESPACE
        role = rendered[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            if "" in rule["apiGroups"] and "pods" in rule["resources"]:
                granted |= set(rule["verbs"])
    assert {"get", "list", "watch"} <= granted


def test_grafana_deployment(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    deployment = rendered[("Deployment", "grafana")]
    assert deployment["metadata"]["namespace"] == NAMESPACE
    [container] = _pod(deployment)["containers"]
    compose = _compose_service("grafana")
    assert container["image"] == compose["image"]
    env = {e["name"]: e["value"] for e in container.get("env") or []}
    assert env == {k: v for k, v in compose["environment"].items()
                   if k != "GF_SECURITY_ADMIN_PASSWORD"}
    [source] = container["envFrom"]
    secret = _generated(rendered, "Secret", "grafana-admin")
    assert source["secretRef"]["name"] == secret["metadata"]["name"]
    assert set(secret["data"]) == {"GF_SECURITY_ADMIN_PASSWORD"}

    mounts = _mounts(deployment)
    provisioning = DEPLOY / "grafana" / "provisioning"
    for kind, name in (("datasources", "grafana-datasources"),
                       ("dashboards", "grafana-dashboard-providers")):
        config = _generated(rendered, "ConfigMap", name)
        assert mounts[f"/etc/grafana/provisioning/{kind}"] == config["metadata"]["name"]
        assert config["data"] == {p.name: p.read_text()
                                  for p in sorted((provisioning / kind).glob("*.yaml"))}

    dashboards = _generated(rendered, "ConfigMap", "grafana-dashboards")
    sources = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
    assert dashboards["data"] == {p.name: p.read_text() for p in sources}
    [provider] = yaml.safe_load(
        (provisioning / "dashboards" / "habitus.yaml").read_text())["providers"]
    path = provider["options"]["path"]
    assert mounts[path] == dashboards["metadata"]["name"]
    home = Path(env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert str(home.parent) == path and home.name in dashboards["data"]
    # `kubectl apply` (client side) must be able to record it in last-applied-configuration.
    assert len(json.dumps(dashboards)) < ANNOTATIONS_LIMIT


def test_the_datasource_url_is_the_prometheus_service(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> None:
    data = _generated(rendered, "ConfigMap", "grafana-datasources")["data"]
    [datasource] = yaml.safe_load(data["prometheus.yaml"])["datasources"]
    assert datasource["uid"] == DATASOURCE_UID
    url = urlsplit(datasource["url"])
    # A name prefix or another namespace in the overlay would need the URL adapted.
    service = rendered[("Service", str(url.hostname))]
    assert service["metadata"]["namespace"] == rendered[("Deployment", "grafana")]["metadata"][
        "namespace"]
    [port] = [p for p in service["spec"]["ports"] if p["port"] == url.port]
    prometheus = rendered[("Deployment", "prometheus")]
    assert service["spec"]["selector"].items() <= prometheus["spec"]["template"]["metadata"][
        "labels"].items()
    [container] = _pod(prometheus)["containers"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}


def test_the_mounted_prometheus_config_passes_promtool(
    rendered: dict[tuple[str, str], dict[str, Any]], tmp_path: Path,
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    data = _generated(rendered, "ConfigMap", "prometheus-config")["data"]
    for name, text in data.items():
        (tmp_path / name).write_text(text)
    config = tmp_path / "prometheus.yml"

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                              text=True, timeout=120, check=False)

    result = check()
    if result.returncode == 0:
        return
    assert NO_K8S_SD in result.stdout + result.stderr, result.stdout + result.stderr
    # Debian's promtool has no Kubernetes discovery: check the rest with a static target.
    doc: dict[str, Any] = yaml.safe_load(data["prometheus.yml"])
    for job in doc["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": ["10.0.0.1:8080"]}]
    config.write_text(yaml.safe_dump(doc))
    again = check()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 rule files found" in again.stdout + again.stderr
