"""Keep the Kubernetes files that follow the code generated from it.

Which bus services run which projections, how many partitions each projection has and what
the partitions' durable consumers are called are facts of the code (the service descriptors,
`habitus.projection.partitions`, `durable_for`) and of the base ConfigMap
(k8s/base/kustomization.yaml: HABITUS_PARTITIONS, HABITUS_STREAM_REPLICAS). A hand-kept list of
some fifty consumer names would go stale with the first new projection, so this module writes:

* k8s/base/services/<deploy-name>/scaledobject.yaml for every bus service with projections: a
  KEDA ScaledObject scaling its Deployment between MIN_REPLICAS and one replica per partition,
  with one `nats-jetstream` trigger per partition's consumer of each of its projections (the
  service's kustomization lists the file);
* k8s/nats/streams.yaml: the streams the services ensure, as NACK Stream resources
  (`habitus.ops.k8s_streams`).

The settings come from the base ConfigMap's literals only, never from the environment of
whoever runs this, so the checked-in files cannot depend on a developer's shell.

    python -m habitus.ops.k8s_scaling --write   # regenerate
    python -m habitus.ops.k8s_scaling --check   # exit 1 if anything is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from habitus.config import Settings
from habitus.ops.k8s_streams import stream_resources
from habitus.projection.base import Projection, durable_for
from habitus.projection.partitions import layout
from habitus.service import registry
from habitus.service.descriptor import ServiceDescriptor

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"
BASE_KUSTOMIZATION = K8S / "base" / "kustomization.yaml"
SCALED_OBJECT = "scaledobject.yaml"
SERVICES_DIR = "base/services"
STREAMS_FILE = "nats/streams.yaml"

#: the NATS Service's monitor port (k8s/nats/values.yaml exposes it) and the default account
MONITORING_ENDPOINT = "nats.nats.svc.cluster.local:8222"
ACCOUNT = "$G"
#: the base Deployment's replicas: one may die while another holds every partition
MIN_REPLICAS = 2
#: batches of lag per replica asked for: a consumer that keeps up still holds up to two batches
#: delivered and not yet acknowledged (its max_ack_pending), so another replica is asked for
#: once two more wait (the service's own batch size: `ServiceDescriptor.runner_config`)
LAG_BATCHES = 4


def lag_threshold(service: ServiceDescriptor) -> int:
    return LAG_BATCHES * service.runner_config.batch_size
#: KEDA's default; every trigger reads the monitor endpoint once per interval
POLLING_SECONDS = 30
#: a partition's consumer is recreated at every claim, and KEDA reads a consumer it cannot
#: find as lagging by the stream's last sequence: a scale-up needs this long of lag (three polls)
SCALE_UP_WINDOW_SECONDS = 90
#: every change of members deals the partitions again: scale down late and one at a time
SCALE_DOWN_WINDOW_SECONDS = 300
SCALE_DOWN_PERIOD_SECONDS = 120


class _Declared(Settings):
    """Settings from what a file declares only (no environment, no .env file)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


_LITERAL = re.compile(r"\s*-\s*HABITUS_([A-Z0-9_]+)=(.*?)\s*")


def declared_settings(kustomization: Path = BASE_KUSTOMIZATION) -> Settings:
    """The settings the base ConfigMap gives every pod: its `HABITUS_*=value` literals (the
    only literals in that file) over the defaults."""
    values: dict[str, str] = {}
    for line in kustomization.read_text(encoding="utf-8").splitlines():
        match = _LITERAL.fullmatch(line)
        if match:
            values[match.group(1).lower()] = match.group(2)
    return _Declared(**values)  # type: ignore[arg-type]


# --- The ScaledObjects --------------------------------------------------------------------------


def bus_services(found: Sequence[ServiceDescriptor] | None = None) -> list[ServiceDescriptor]:
    """The services that run as a bus-service Deployment (all but the one serving HTTP)."""
    return [s for s in (registry.services() if found is None else found) if not s.public_http]


def scaled_projections(service: ServiceDescriptor) -> list[type[Projection]]:
    """The projections whose lag scales the service: its own, not its erasure projection. An
    erasure is rare, small work that the replicas present clear; its lag never says the service
    needs more of them."""
    return list(service.projections)


@dataclass(frozen=True)
class Trigger:
    stream: str
    consumer: str


def triggers(service: ServiceDescriptor, partitions: int) -> list[Trigger]:
    """One per partition of each scaled projection: the partition's durable consumer
    (`habitus.projection.consumer.durable_name`: the projection's own name when whole)."""
    return [
        Trigger(projection.stream, durable_for(projection.name) + partition.suffix)
        for projection in scaled_projections(service)
        for partition in layout(partitions)
    ]


def max_replicas(partitions: int) -> int:
    """One replica per partition: a partition is applied by one replica at a time, so a
    lagging one goes no faster past that (more would only take the service's other
    projections' partitions from replicas keeping up). Never below MIN_REPLICAS."""
    return max(MIN_REPLICAS, partitions)


def deployment_name(service: ServiceDescriptor) -> str:
    return f"habitus-{service.deploy_name}"


def scaled_object(service: ServiceDescriptor, partitions: int) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        # the kustomization's nameSuffix makes it habitus-<deploy-name>
        "metadata": {"name": "habitus"},
        "spec": {
            # written whole: kustomize renames no reference inside a custom resource
            "scaleTargetRef": {"name": deployment_name(service)},
            "pollingInterval": POLLING_SECONDS,
            "minReplicaCount": MIN_REPLICAS,
            "maxReplicaCount": max_replicas(partitions),
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleUp": {"stabilizationWindowSeconds": SCALE_UP_WINDOW_SECONDS},
                "scaleDown": {
                    "stabilizationWindowSeconds": SCALE_DOWN_WINDOW_SECONDS,
                    "policies": [{"type": "Pods", "value": 1,
                                  "periodSeconds": SCALE_DOWN_PERIOD_SECONDS}],
                },
            }}},
            "triggers": [
                {"type": "nats-jetstream", "metadata": {
                    "natsServerMonitoringEndpoint": MONITORING_ENDPOINT,
                    "account": ACCOUNT,
                    "stream": t.stream,
                    "consumer": t.consumer,
                    "lagThreshold": str(lag_threshold(service)),
                }}
                for t in triggers(service, partitions)
            ],
        },
    }


def _scaled_object_header(service: ServiceDescriptor, partitions: int) -> str:
    erasure = f"{service.schema}.erasure" if service.schema else "An erasure projection"
    lines = [
        f"GENERATED by `python -m habitus.ops.k8s_scaling --write` from the {service.name}",
        f"service's projections and HABITUS_PARTITIONS ({partitions}) in the base ConfigMap;"
        " do not edit.",
        f"KEDA scales {deployment_name(service)} on the lag (undelivered plus unacknowledged"
        " messages) of",
        "each partition's durable consumer of its projections; its HPA takes the most replicas"
        " any",
        "trigger asks for, ceil(lag / lagThreshold). Why these numbers:",
        f"- min {MIN_REPLICAS}: the base's replicas; one may die while another holds every"
        " partition.",
        f"- max {max_replicas(partitions)}: one replica per partition. A partition is applied by"
        " one replica at a",
        "  time, so a lagging one goes no faster past that.",
        f"- lagThreshold {lag_threshold(service)}: {LAG_BATCHES} batches of"
        f" {service.runner_config.batch_size}. A consumer that keeps up still",
        "  holds two batches delivered and unacknowledged; a replica is added once two more"
        " wait.",
        f"- {erasure} has no trigger: erasures are rare, small work; its lag never says",
        "  more replicas are needed.",
        f"- Scale-ups wait {SCALE_UP_WINDOW_SECONDS} s: a consumer is recreated at every claim,"
        " and KEDA reads one",
        "  it cannot find as lagging by the stream's last sequence. Scale-downs go one replica",
        "  at a time, late: every change of members deals the partitions again.",
    ]
    return "".join(f"# {line}\n" for line in lines)


def scaled_object_yaml(service: ServiceDescriptor, partitions: int) -> str:
    return _scaled_object_header(service, partitions) + to_yaml(
        scaled_object(service, partitions))


STREAMS_HEADER = """\
# GENERATED by `python -m habitus.ops.k8s_scaling --write` from habitus.bus.streams and the
# base ConfigMap (k8s/base/kustomization.yaml); do not edit by hand.
# The Habitus streams as NACK (JetStream controller) resources: `kubectl apply -n nats -f
# k8s/nats/streams.yaml` (k8s/nats/README.md). The services ensure the same streams at start,
# so the two agree. preventDelete: deleting a resource never deletes a stream. Over a stream made
# before partitioning, set its own habitus_partitioned_from first (README), never "1".
"""


def streams_yaml(settings: Settings) -> str:
    return STREAMS_HEADER + "".join("---\n" + to_yaml(doc) for doc in stream_resources(settings))


# --- A small YAML writer ------------------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower() not in _RESERVED
        return value if plain else json.dumps(value)
    if value == {}:
        return "{}"
    if value == []:
        return "[]"
    raise TypeError(f"cannot write {value!r}")


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                out.append(f"{pad}{key}:")
                out += _lines(item, indent + 2)
            else:
                out.append(f"{pad}{key}: {_scalar(item)}")
        return out
    for item in value:
        if isinstance(item, dict) and item:
            first, *rest = _lines(item, indent + 2)
            out += [f"{pad}- {first.lstrip()}", *rest]
        elif isinstance(item, list) and item:
            raise TypeError("a list in a list")
        else:
            out.append(f"{pad}- {_scalar(item)}")
    return out


def to_yaml(document: dict[str, Any]) -> str:
    """Block-style YAML of dicts, lists, strings, ints and bools; strings are quoted (as JSON,
    which YAML reads) unless they are plain words, so nothing changes type when read back."""
    return "\n".join(_lines(document, 0)) + "\n"


# --- The files ----------------------------------------------------------------------------------


def expected(settings: Settings | None = None,
             services: Sequence[ServiceDescriptor] | None = None) -> dict[str, bytes]:
    """Path relative to the k8s directory -> the content --write gives it."""
    settings = declared_settings() if settings is None else settings
    out = {
        f"{SERVICES_DIR}/{s.deploy_name}/{SCALED_OBJECT}":
            scaled_object_yaml(s, settings.partitions).encode()
        for s in bus_services(services)
        if scaled_projections(s)
    }
    out[STREAMS_FILE] = streams_yaml(settings).encode()
    return out


def _present(k8s_dir: Path) -> set[str]:
    """The generated files there now (a ScaledObject of a service gone from the code too)."""
    found = {p.relative_to(k8s_dir).as_posix()
             for p in (k8s_dir / SERVICES_DIR).glob(f"*/{SCALED_OBJECT}")}
    if (k8s_dir / STREAMS_FILE).is_file():
        found.add(STREAMS_FILE)
    return found


def stale(k8s_dir: Path = K8S, settings: Settings | None = None,
          services: Sequence[ServiceDescriptor] | None = None) -> list[str]:
    """Paths --write would create, change or delete."""
    want = expected(settings, services)
    differ = [
        rel for rel, data in sorted(want.items())
        if not (k8s_dir / rel).is_file() or (k8s_dir / rel).read_bytes() != data
    ]
    return differ + sorted(_present(k8s_dir) - set(want))


def write(k8s_dir: Path = K8S, settings: Settings | None = None,
          services: Sequence[ServiceDescriptor] | None = None) -> list[Path]:
    """Write what differs and delete what is no longer generated; returns those paths."""
    want = expected(settings, services)
    changed: list[Path] = []
    for rel, data in sorted(want.items()):
        path = k8s_dir / rel
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        changed.append(path)
    for rel in sorted(_present(k8s_dir) - set(want)):
        (k8s_dir / rel).unlink()
        changed.append(k8s_dir / rel)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m habitus.ops.k8s_scaling",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true",
                        help="regenerate the ScaledObjects and the NACK streams")
    action.add_argument("--check", action="store_true",
                        help="exit 1 when a file is not what --write writes")
    parser.add_argument("--out", type=Path, default=K8S, help="the k8s directory")
    args = parser.parse_args(argv)
    if args.write:
        for path in write(args.out):
            print(path)
        return 0
    differ = stale(args.out)
    for rel in differ:
        print(f"stale: {rel} (run python -m habitus.ops.k8s_scaling --write)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
