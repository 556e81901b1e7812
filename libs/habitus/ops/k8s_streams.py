"""The NATS streams as NACK `Stream` resources (jetstream.nats.io/v1beta2), from the declaration
the services use, so a cluster can keep its streams as code.

The services ensure the same streams at start (`habitus.bus.streams.ensure_streams`: created
when missing, updated when a setting changed), so the controller and the services must agree
field by field or each would undo the other's update. Everything here is therefore read off
`stream_configs(settings)`, the list `ensure_streams` applies, with the settings the pods run
with (`habitus.ops.k8s_scaling` reads them from the base ConfigMap). Two fields are added:

* `metadata.habitus_partitioned_from: "1"` on the partitioned streams, which `ensure_streams`
  sets on a stream it creates: every message carries the partition tokens. A stream made before
  partitioning records the first sequence that does, and the declaration must carry that value
  before it is applied over such a stream (k8s/nats/README.md);
* `preventDelete: true`: deleting the resource (a wrong `kubectl delete -f`, an uninstalled
  controller) must never delete the event log with it.
"""

from __future__ import annotations

from typing import Any

from nats.js.api import StreamConfig

from habitus.bus.streams import PARTITIONED_FROM, stream_configs
from habitus.config import Settings

API_VERSION = "jetstream.nats.io/v1beta2"
KIND = "Stream"

_UNITS = (("h", 3600 * 10**9), ("m", 60 * 10**9))


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String()` writes it (what NACK parses, and what the
    `nats` CLI shows): 604800 -> "168h0m0s", 120 -> "2m0s", 1.5 -> "1.5s", 0 -> "0s"."""
    nanos = round(seconds * 10**9)
    if nanos < 0:
        raise ValueError(f"a negative duration: {seconds}")
    if nanos == 0:
        return "0s"
    if nanos < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if nanos >= size:
                return _decimal(nanos, size) + unit
    out = ""
    rest = nanos
    for unit, size in _UNITS:
        whole, rest = divmod(rest, size)
        if whole or out:
            out += f"{whole}{unit}"
    return out + _decimal(rest, 10**9) + "s"


def _decimal(value: int, size: int) -> str:
    whole, fraction = divmod(value, size)
    if not fraction:
        return str(whole)
    digits = str(fraction).rjust(len(str(size)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def resource_name(stream: str) -> str:
    """The Kubernetes name of a stream's resource (DNS-1123: HABITUS_EVENTS -> habitus-events)."""
    return stream.lower().replace("_", "-")


def _value(enum_or_str: Any) -> str:
    return str(getattr(enum_or_str, "value", enum_or_str))


def nack_stream(config: StreamConfig) -> dict[str, Any]:
    """One stream of `stream_configs` as a NACK Stream resource."""
    if config.name is None or config.retention is None or config.storage is None:
        raise ValueError(f"an incomplete stream declaration: {config}")
    spec: dict[str, Any] = {
        "name": config.name,
        "description": config.description or "",
        "subjects": list(config.subjects or []),
        "retention": _value(config.retention),
        "storage": _value(config.storage),
        "replicas": config.num_replicas,
        # NACK reads "" as no limit (the event log's max_age 0)
        "maxAge": go_duration(config.max_age) if config.max_age else "",
        "discard": _value(config.discard or "old"),
        "duplicateWindow": go_duration(config.duplicate_window or 0),
        "denyDelete": bool(config.deny_delete),
        "denyPurge": bool(config.deny_purge),
        "allowDirect": bool(config.allow_direct),
    }
    transform = config.subject_transform
    if transform is not None:
        spec["subjectTransform"] = {"source": str(transform.src), "dest": str(transform.dest)}
        spec["metadata"] = {PARTITIONED_FROM: "1"}
    spec["preventDelete"] = True
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": resource_name(config.name)},
        "spec": spec,
    }


def stream_resources(settings: Settings) -> list[dict[str, Any]]:
    """Every stream the services ensure, as NACK resources, in declaration order."""
    return [nack_stream(config) for config in stream_configs(settings)]
