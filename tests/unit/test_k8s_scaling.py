"""The Kubernetes files that follow the code (`habitus.ops.k8s_scaling`): each bus service's
KEDA ScaledObject, the NATS streams as NACK resources, and the NATS Helm values they rely on.

The checked-in files must be what `python -m habitus.ops.k8s_scaling --write` writes from the
code and the base ConfigMap. Beyond that, what the files say is checked against what the code
does: every trigger names a durable consumer the projection runner creates (one per partition
of each projection, the erasure projections left out), the replica bounds follow the
partitions, the monitor endpoint is the NATS the pods use and the Helm values expose, and the
streams are field for field the ones the services ensure. The rendered kustomizations are
validated in tests/unit/test_deploy_files.py; streams.yaml is validated here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from habitus.bus import streams as bus_streams
from habitus.config import Settings
from habitus.ops import k8s_scaling as scaling
from habitus.ops.k8s_streams import go_duration, resource_name
from habitus.projection.base import Projection
from habitus.projection.consumer import consumer_config, durable_name
from habitus.projection.partitions import layout
from habitus.service import registry
from habitus.service.descriptor import ServiceDescriptor
from tests.support.deploy_check import (
    K8S_BASE,
    deployment_name,
    generator_literals,
    kustomize_build,
    validate_resource,
)

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
NATS_DIR = K8S / "nats"
VALUES = NATS_DIR / "values.yaml"
STREAMS = NATS_DIR / "streams.yaml"
CONFIG = generator_literals(K8S_BASE, "configMapGenerator", "habitus-config")
PARTITIONS = int(CONFIG["HABITUS_PARTITIONS"])
BUS = [s for s in registry.services() if not s.public_http]
SCALED = [s for s in BUS if s.projections]


def load_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def instance(projection: type[Projection]) -> Projection:
    """A projection without its injected resources: enough for its names and filters."""
    made: Projection = object.__new__(projection)
    return made


@pytest.fixture(scope="module")
def base() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in kustomize_build(K8S_BASE)}


# --- Generated, and not stale -------------------------------------------------------------------


def test_regeneration_changes_nothing() -> None:
    assert scaling.stale() == [], "run python -m habitus.ops.k8s_scaling --write"
    assert scaling.main(["--check"]) == 0


def test_check_reports_a_changed_missing_or_extra_file(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    assert scaling.write(out)
    assert scaling.stale(out) == [] and scaling.write(out) == []
    first = f"base/services/{SCALED[0].deploy_name}/scaledobject.yaml"
    (out / first).write_text("{}\n")
    (out / scaling.STREAMS_FILE).unlink()
    gone = out / "base" / "services" / "gone" / "scaledobject.yaml"
    gone.parent.mkdir()
    gone.write_text("{}\n")
    assert scaling.stale(out) == [*sorted([first, scaling.STREAMS_FILE]),
                                  "base/services/gone/scaledobject.yaml"]
    assert scaling.main(["--check", "--out", str(out)]) == 1
    scaling.write(out)
    assert scaling.stale(out) == [] and not gone.exists()


def test_the_settings_are_the_configmaps_not_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = scaling.expected()
    monkeypatch.setenv("HABITUS_PARTITIONS", "16")
    monkeypatch.setenv("HABITUS_STREAM_REPLICAS", "5")
    monkeypatch.setenv("HABITUS_RAW_RETENTION_DAYS", "1")
    settings = scaling.declared_settings()
    assert settings.partitions == PARTITIONS == 4
    assert settings.stream_replicas == int(CONFIG["HABITUS_STREAM_REPLICAS"]) == 3
    assert settings.raw_retention_days == Settings.model_fields["raw_retention_days"].default
    assert scaling.expected() == before


def test_declared_settings_read_the_literals(tmp_path: Path) -> None:
    path = tmp_path / "kustomization.yaml"
    path.write_text("configMapGenerator:\n  - name: habitus-config\n    literals:\n"
                    "      # HABITUS_PARTITIONS=8 in a comment is not a literal\n"
                    "      - HABITUS_PARTITIONS=2\n      - HABITUS_STREAM_REPLICAS=5\n"
                    "      - OTHER=1\n")
    settings = scaling.declared_settings(path)
    assert (settings.partitions, settings.stream_replicas) == (2, 5)
    path.write_text("      - HABITUS_PARTITIONS=3\n")
    with pytest.raises(ValueError, match="PARTITIONS"):
        scaling.declared_settings(path)


# --- The ScaledObjects --------------------------------------------------------------------------


def expected_triggers(service: ServiceDescriptor, partitions: int) -> set[tuple[str, str]]:
    """(stream, consumer) of every partition of the service's own projections, named as the
    projection runner names them."""
    return {
        (projection.stream, durable_name(instance(projection), partition))
        for projection in service.projections
        for partition in layout(partitions)
    }


@pytest.mark.parametrize("service", SCALED, ids=lambda s: s.deploy_name)
def test_a_service_scales_on_its_partitions_consumers(
    service: ServiceDescriptor, base: dict[tuple[str, str], dict[str, Any]],
) -> None:
    name = deployment_name(service)
    scaled_object = base[("ScaledObject", name)]
    spec = scaled_object["spec"]
    deployment = base[("Deployment", spec["scaleTargetRef"]["name"])]
    assert deployment["metadata"]["name"] == name
    assert spec["minReplicaCount"] == deployment["spec"]["replicas"] == scaling.MIN_REPLICAS
    assert spec["maxReplicaCount"] == PARTITIONS
    triggers = [(t["metadata"]["stream"], t["metadata"]["consumer"]) for t in spec["triggers"]]
    assert len(triggers) == len(set(triggers))
    assert set(triggers) == expected_triggers(service, PARTITIONS)
    # The erasure projection is left out.
    erasures = [p for p in service.running_projections() if p not in service.projections]
    assert [p.name for p in erasures] == [f"{service.schema}.erasure"]
    for projection in erasures:
        assert not any(c.startswith(instance(projection).durable) for _, c in triggers)
    for trigger in spec["triggers"]:
        assert trigger["type"] == "nats-jetstream"
        assert trigger["metadata"] | {"stream": "", "consumer": ""} == {
            "natsServerMonitoringEndpoint": scaling.MONITORING_ENDPOINT,
            "account": "$G",
            "stream": "",
            "consumer": "",
            "lagThreshold": str(scaling.lag_threshold(service)),
        }
    # Labelled like the Deployment it scales.
    assert scaled_object["metadata"]["labels"] == deployment["metadata"]["labels"]


def test_every_service_with_projections_is_scaled() -> None:
    assert SCALED == [s for s in BUS if s.projections] and SCALED
    generated = {rel for rel in scaling.expected() if rel.endswith("scaledobject.yaml")}
    assert generated == {f"base/services/{s.deploy_name}/scaledobject.yaml" for s in SCALED}


def test_the_triggers_are_the_consumers_the_runner_creates() -> None:
    for service in SCALED:
        config = service.runner_config
        names = {c for _, c in expected_triggers(service, PARTITIONS)}
        for projection in service.projections:
            for partition in layout(PARTITIONS):
                created = consumer_config(instance(projection), config, 1, partition)
                assert created.durable_name in names
                assert created.durable_name.endswith(f"__p{partition.index}of{PARTITIONS}")
                # A consumer keeping up holds this much unacknowledged: not lag worth a replica.
                assert created.max_ack_pending is not None
                assert scaling.lag_threshold(service) >= 2 * created.max_ack_pending


def test_whole_projections_keep_their_consumer_name() -> None:
    [service] = SCALED[:1]
    [(_, consumer), *_] = sorted(expected_triggers(service, 1))
    assert "__p" not in consumer
    assert [t.consumer for t in scaling.triggers(service, 1)] == [
        instance(p).durable for p in service.projections]


def test_max_replicas_follow_the_partitions() -> None:
    assert [scaling.max_replicas(n) for n in (1, 2, 4, 8, 16)] == [2, 2, 4, 8, 16]
    service = SCALED[0]
    for partitions in (1, 4, 16):
        spec = scaling.scaled_object(service, partitions)["spec"]
        assert spec["minReplicaCount"] <= spec["maxReplicaCount"]
        assert len(spec["triggers"]) == partitions * len(service.projections)


def test_the_scaled_objects_are_valid() -> None:
    for service in SCALED:
        doc = scaling.scaled_object(service, PARTITIONS)
        validate_resource(doc)
        text = scaling.scaled_object_yaml(service, PARTITIONS)
        assert yaml.safe_load(text) == doc
        header = [line for line in text.splitlines() if line.startswith("#")]
        assert header[0].startswith("# GENERATED by `python -m habitus.ops.k8s_scaling --write`")
        assert len(header) >= 10, "the numbers say why in the file"


# --- NATS: the Helm values and the monitor endpoint ---------------------------------------------


def test_the_monitor_endpoint_is_the_nats_the_pods_use() -> None:
    values = yaml.safe_load(VALUES.read_text())
    host, port = scaling.MONITORING_ENDPOINT.rsplit(":", 1)
    assert host == urlsplit(CONFIG["HABITUS_NATS_URL"]).hostname
    # `helm install nats ... -n nats`: the release's Service in its namespace
    assert host == "nats.nats.svc.cluster.local"
    assert int(port) == values["config"]["monitor"]["port"]


def test_the_nats_values_give_what_habitus_needs() -> None:
    values = yaml.safe_load(VALUES.read_text())
    config = values["config"]
    assert config["cluster"]["enabled"] is True
    assert config["cluster"]["replicas"] == int(CONFIG["HABITUS_STREAM_REPLICAS"]) == 3
    # KEDA finds a consumer's leader through the advertised client URLs.
    assert config["cluster"]["noAdvertise"] is False
    jetstream = config["jetstream"]
    assert jetstream["enabled"] is True
    assert jetstream["fileStore"]["enabled"] is True
    assert jetstream["fileStore"]["pvc"]["enabled"] is True
    assert re.fullmatch(r"[1-9][0-9]*(Gi|Ti)", jetstream["fileStore"]["pvc"]["size"])
    assert jetstream["memoryStore"]["enabled"] is False
    assert config["monitor"]["enabled"] is True
    assert values["service"]["ports"]["monitor"]["enabled"] is True
    spread = values["podTemplate"]["topologySpreadConstraints"]
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert "topology.kubernetes.io/zone" in spread
    assert values["podDisruptionBudget"]["enabled"] is True
    # Every key is one the chart's 1.x layout has (no top-level key of the 0.x layout).
    assert set(values) <= {"config", "service", "podTemplate", "podDisruptionBudget"}
    assert "jetstream" in VALUES.read_text().split("config:", 1)[1]


def test_the_nats_readme_says_how_to_install_and_what_to_keep() -> None:
    readme = (NATS_DIR / "README.md").read_text()
    for command in (
        "helm repo add nats https://nats-io.github.io/k8s/helm/charts/",
        "helm install nats nats/nats -n nats --create-namespace -f k8s/nats/values.yaml",
        "kubectl apply -n nats -f k8s/nats/streams.yaml",
        "python -m habitus.ops.k8s_scaling --write",
    ):
        assert command in readme, command
    assert bus_streams.PARTITIONED_FROM in readme
    assert "ensure" in readme and "idempotent" in readme


def test_the_k8s_readme_covers_the_layout() -> None:
    readme = (K8S / "README.md").read_text()
    for fact in ("python -m habitus.ops.k8s_scaling --write",
                 "python -m habitus.ops.k8s_observability --write", "habitus partitions",
                 "HABITUS_MEMBER", "HABITUS_LEASE_SECONDS", "PodDisruptionBudget", "KEDA",
                 "topology.kubernetes.io/zone", "nats/values.yaml", "nats/streams.yaml"):
        assert fact in readme, fact


# --- The streams --------------------------------------------------------------------------------

#: NACK's field for each StreamConfig field `ensure_streams` compares (and storage)
NACK_FIELDS = {
    "subjects": "subjects",
    "max_age": "maxAge",
    "discard": "discard",
    "deny_delete": "denyDelete",
    "deny_purge": "denyPurge",
    "duplicate_window": "duplicateWindow",
    "num_replicas": "replicas",
    "description": "description",
    "allow_direct": "allowDirect",
    "subject_transform": "subjectTransform",
    "storage": "storage",
}
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration ("" is no limit: 0)."""
    if text == "":
        return 0.0
    parts = re.findall(r"([0-9.]+)(h|ms|us|µs|ns|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, text
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def test_every_field_the_services_compare_is_declared() -> None:
    assert set(bus_streams._COMPARED) <= set(NACK_FIELDS)


def test_the_streams_file_declares_what_the_services_ensure() -> None:
    docs = load_all(STREAMS)
    settings = scaling.declared_settings()
    wanted = bus_streams.stream_configs(settings)
    assert [d["spec"]["name"] for d in docs] == [c.name for c in wanted]
    assert settings.stream_replicas == 3 and settings.stream_storage == "file"
    for doc, config in zip(docs, wanted, strict=True):
        validate_resource(doc)
        assert config.name is not None
        assert doc["metadata"]["name"] == resource_name(config.name)
        spec = doc["spec"]
        assert spec["subjects"] == config.subjects
        assert spec["description"] == config.description
        assert spec["retention"] == "limits"
        assert spec["storage"] == "file"
        assert spec["replicas"] == config.num_replicas == 3
        assert parse_go_duration(spec["maxAge"]) == pytest.approx(config.max_age or 0)
        assert parse_go_duration(spec["duplicateWindow"]) == pytest.approx(
            config.duplicate_window)
        assert spec["discard"] == str(getattr(config.discard, "value", config.discard))
        assert spec["denyDelete"] is bool(config.deny_delete)
        assert spec["denyPurge"] is bool(config.deny_purge)
        assert spec["allowDirect"] is bool(config.allow_direct)
        assert spec["preventDelete"] is True
        transform = config.subject_transform
        if transform is None:
            assert "subjectTransform" not in spec and "metadata" not in spec
        else:
            assert spec["subjectTransform"] == {"source": transform.src, "dest": transform.dest}
            # what ensure_streams records on a stream it creates
            assert spec["metadata"] == {bus_streams.PARTITIONED_FROM: "1"}
            assert config.name in bus_streams.PARTITIONED
    # The event log can neither expire nor lose a message to a delete.
    events = next(d["spec"] for d in docs if d["spec"]["name"] == bus_streams.EVENTS)
    assert events["maxAge"] == "" and events["denyDelete"] is True
    # Every stream a trigger names is declared, and partitioned.
    named = {t.stream for s in SCALED for t in scaling.triggers(s, PARTITIONS)}
    assert named <= set(bus_streams.PARTITIONED)


def test_the_stream_schema_is_strict() -> None:
    doc = load_all(STREAMS)[0]
    for field, value in (("maxAge", "7d"), ("duplicateWindow", "120"), ("storage", "disk"),
                         ("maxAgee", "1h"), ("replicas", "3")):
        bad = yaml.safe_load(yaml.safe_dump(doc))
        bad["spec"][field] = value
        with pytest.raises(Exception):  # noqa: B017 (jsonschema's ValidationError)
            validate_resource(bad)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (1, "1s"), (1.5, "1.5s"), (0.25, "250ms"), (0.0000015, "1.5µs"), (59, "59s"),
    (60, "1m0s"), (120, "2m0s"), (3600, "1h0m0s"), (3661.5, "1h1m1.5s"),
    (7 * 86400, "168h0m0s"), (30 * 86400, "720h0m0s"),
])
def test_go_duration_writes_what_go_does(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text
    assert parse_go_duration(text) == pytest.approx(seconds)


def test_the_yaml_writer_keeps_every_type() -> None:
    tricky = ["yes", "no", "on", "null", "true", "1", "1.5", "0x1f", "$G", "a: b", "", "-x",
              "{{wildcard(1)}}", "habitus.v1.dlq.>", "µs", "#c", "~", "a b", "168h0m0s",
              "nats.nats.svc.cluster.local:8222", "@x", "*", "'q'", '"d"']
    doc: dict[str, Any] = {
        "strings": tricky, "ints": [0, 2, 2000], "bools": [True, False], "empty": {},
        "none": [], "nested": [{"a": {"b": ["c"]}, "d": 1}], "plain": "HABITUS_EVENTS",
    }
    text = scaling.to_yaml(doc)
    assert yaml.safe_load(text) == doc
    assert "plain: HABITUS_EVENTS\n" in text
    with pytest.raises(TypeError):
        scaling.to_yaml({"float": 1.5})
