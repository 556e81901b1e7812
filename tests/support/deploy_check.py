"""Every place that names a service, checked against the service descriptors.

`deploy_problems(services)` lists each place where one of `services` is missing, or where a
place names a service that is not among them:

* pyproject.toml: the `habitus.services` entry point (`<name> = ...`);
* docker-compose.yml: the service `<deploy_name>` running `habitus serve <name>`, started by a
  plain `docker compose up` (not behind the `services` profile);
* Kubernetes: the Deployment `habitus-<deploy_name>` running `habitus serve <name>` in the built
  k8s/base (the gateway's own file, or the shared bus-service Deployment used from
  k8s/base/services/<deploy_name>);
* HABITUS_EXPECTED_SERVICES of the gateway in docker-compose.yml and in the k8s ConfigMap:
  every service but the gateway (the one serving the public HTTP API), by name, sorted;
* deploy/prometheus/prometheus.yml: the scrape target `<deploy_name>:<port>` (the HTTP port for
  the gateway, the metrics port for the others);
* `habitus up`: `habitus.runtime.up.service_names()`, the gateway last.

A compose service behind the `services` profile that runs a service not in code yet (a planned
one: `docker compose --profile services up`) is not "extra"; Prometheus may scrape it too (DNS
discovery finds nothing while it is not started). Nothing else may name a service that does not
exist.

`kustomize_build` resolves a kustomization with PyYAML so this runs without kubectl; the deploy
tests compare it with `kubectl kustomize` where kubectl is installed.
"""

from __future__ import annotations

import copy
import re
import shlex
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from habitus.config import Settings
from habitus.service.descriptor import ServiceDescriptor

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_FILE = ROOT / "deploy" / "prometheus" / "prometheus.yml"
K8S_BASE = ROOT / "k8s" / "base"
#: the compose profile of the services that are planned but not in code yet
SERVICES_PROFILE = "services"
ENTRY_POINT_GROUP = "habitus.services"
EXPECTED_SERVICES = "HABITUS_EXPECTED_SERVICES"
GATEWAY_PORT: int = Settings.model_fields["http_port"].default
METRICS_PORT: int = Settings.model_fields["metrics_port"].default

#: how each problem starts, one per place a service is named
PYPROJECT_PLACE = 'pyproject.toml [project.entry-points."habitus.services"]'
COMPOSE_PLACE = "docker-compose.yml services"
K8S_PLACE = "k8s/base Deployments"
COMPOSE_EXPECTED_PLACE = f"docker-compose.yml gateway {EXPECTED_SERVICES}"
K8S_EXPECTED_PLACE = f"k8s/base habitus-config {EXPECTED_SERVICES}"
PROMETHEUS_PLACE = "deploy/prometheus/prometheus.yml scrape targets"
UP_PLACE = "habitus up service_names()"
PLACES = (
    PYPROJECT_PLACE,
    COMPOSE_PLACE,
    K8S_PLACE,
    COMPOSE_EXPECTED_PLACE,
    K8S_EXPECTED_PLACE,
    PROMETHEUS_PLACE,
    UP_PLACE,
)


# --- Names derived from a descriptor ------------------------------------------------------------


def deployment_name(service: ServiceDescriptor) -> str:
    return f"habitus-{service.deploy_name}"


def scrape_target(service: ServiceDescriptor) -> str:
    port = GATEWAY_PORT if service.public_http else METRICS_PORT
    return f"{service.deploy_name}:{port}"


def expected_services(services: Iterable[ServiceDescriptor]) -> str:
    """The gateway's HABITUS_EXPECTED_SERVICES: every other service, by name, sorted."""
    return ",".join(sorted(s.name for s in services if not s.public_http))


# --- Reading the files --------------------------------------------------------------------------


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def read_yaml_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def interpolate(value: Any) -> str:
    """Compose's `${VAR:-default}` with an empty environment: the default (or "")."""
    text = "" if value is None else str(value)
    if isinstance(value, bool):
        text = text.lower()
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", text)


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: interpolate(value) for key, value in env.items()}


def compose_command(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    if command is None:
        return []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def served(command: Sequence[str]) -> str | None:
    """The service a `habitus serve <name>` command (or container args) runs."""
    return command[1] if len(command) == 2 and command[0] == "serve" else None


def planned_compose_services(compose: dict[str, Any], names: Iterable[str]) -> dict[str, str]:
    """Compose name -> served name, for the services behind the `services` profile that are
    not among `names` (planned, not in code yet)."""
    known = set(names)
    out = {}
    for compose_name, spec in compose["services"].items():
        name = served(compose_command(spec))
        if name and name not in known and SERVICES_PROFILE in (spec.get("profiles") or []):
            out[compose_name] = name
    return out


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


def entry_point_names(pyproject: Path = PYPROJECT) -> set[str]:
    with pyproject.open("rb") as f:
        project = tomllib.load(f)["project"]
    return set(project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {}))


# --- A small kustomize --------------------------------------------------------------------------

_KUSTOMIZATION_KEYS = {
    "apiVersion",
    "kind",
    "resources",
    "labels",
    "namePrefix",
    "nameSuffix",
    "patches",
    "configMapGenerator",
    "secretGenerator",
}


def kustomization(directory: Path) -> dict[str, Any]:
    spec: dict[str, Any] = read_yaml(directory / "kustomization.yaml")
    return spec


def kustomize_build(directory: Path) -> list[dict[str, Any]]:
    """The resources `kubectl kustomize <directory>` would build, for the features in use.

    Simplified on purpose: `resources` (files and kustomization directories), `patches`
    (inline or `path`; a list is a JSON 6902 patch with add/replace/remove, a mapping a
    strategic-merge patch where mappings merge, lists of mappings merge by `name`, other lists
    are replaced and null deletes; `target` by kind and name regex), then
    `namePrefix`/`nameSuffix`, then `labels` (`includeSelectors`, `includeTemplates`; the
    selectors rewritten are those of `_SELECTOR_PATHS`: a Service's, a Deployment's and its
    topology spread constraints', a Job's and a PodDisruptionBudget's), in kustomize's order.
    Like kustomize, it renames no reference inside a custom resource (a ScaledObject's
    scaleTargetRef keeps the name written). Generators are not expanded (no ConfigMap/Secret,
    no hash suffix in the references). Any other key raises, so a new kustomize feature needs
    this updated (and the comparison with kubectl keeps it honest).
    """
    spec = kustomization(directory)
    unknown = set(spec) - _KUSTOMIZATION_KEYS
    if unknown:
        raise ValueError(f"{directory}: kustomize_build does not support {sorted(unknown)}")
    resources: list[dict[str, Any]] = []
    for entry in spec.get("resources") or []:
        path = (directory / entry).resolve()
        resources += kustomize_build(path) if path.is_dir() else read_yaml_all(path)
    for patch in spec.get("patches") or []:
        _apply_patch(directory, resources, patch)
    prefix, suffix = spec.get("namePrefix", ""), spec.get("nameSuffix", "")
    for resource in resources:
        resource["metadata"]["name"] = prefix + resource["metadata"]["name"] + suffix
    for label in spec.get("labels") or []:
        for resource in resources:
            _add_labels(resource, label)
    return resources


def _apply_patch(directory: Path, resources: list[dict[str, Any]], entry: dict[str, Any]) -> None:
    if set(entry) - {"path", "patch", "target"}:
        raise ValueError(f"unsupported patch fields {sorted(entry)}")
    text = (
        (directory / entry["path"]).read_text(encoding="utf-8")
        if "path" in entry
        else entry["patch"]
    )
    patch = yaml.safe_load(text)
    target = dict(entry.get("target") or {})
    if isinstance(patch, dict) and not target:
        target = {"kind": patch["kind"], "name": patch["metadata"]["name"]}
    if set(target) - {"kind", "name"}:
        raise ValueError(f"unsupported patch target {target}")
    matched = [
        r
        for r in resources
        if r["kind"] == target.get("kind", r["kind"])
        and re.fullmatch(target.get("name", ".*"), r["metadata"]["name"])
    ]
    if not matched:
        raise ValueError(f"{directory}: patch target {target} matches nothing")
    for resource in matched:
        if isinstance(patch, list):
            for op in patch:
                _json6902(resource, op)
        else:
            merged = _merge(
                resource,
                {k: v for k, v in patch.items() if k != "metadata"}
                | {"metadata": {k: v for k, v in patch["metadata"].items() if k != "name"}},
            )
            resource.clear()
            resource.update(merged)


def _json6902(doc: dict[str, Any], op: dict[str, Any]) -> None:
    keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
    parent: Any = doc
    for key in keys[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    last = keys[-1]
    kind = op["op"]
    if kind not in {"add", "replace", "remove"}:
        raise ValueError(f"unsupported JSON patch op {kind!r}")
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif kind == "replace":
            parent[index] = copy.deepcopy(op["value"])
        else:
            del parent[index]
        return
    if kind != "add" and last not in parent:
        raise ValueError(f"JSON patch {kind} of a missing {op['path']}")
    if kind == "remove":
        del parent[last]
    else:
        parent[last] = copy.deepcopy(op["value"])


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(base.get(key), value)
        return out
    named = (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(item, dict) and "name" in item for item in [*base, *patch])
    )
    if named:
        out_list = list(base)
        for item in patch:
            at = [i for i, old in enumerate(out_list) if old["name"] == item["name"]]
            if at:
                out_list[at[0]] = _merge(out_list[at[0]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


#: where `labels` with includeSelectors puts its pairs, by kind: (path, whether a missing map is
#: created), a list on the way applying to each item. kustomize's commonLabels field specs, for
#: the kinds in use; a selector of any other kind raises rather than being guessed.
_SELECTOR_PATHS: dict[str, list[tuple[tuple[str, ...], bool]]] = {
    "Service": [(("spec", "selector"), True)],
    "Deployment": [
        (("spec", "selector", "matchLabels"), True),
        (("spec", "template", "spec", "topologySpreadConstraints", "labelSelector",
          "matchLabels"), False),
    ],
    "Job": [(("spec", "selector", "matchLabels"), False)],
    "PodDisruptionBudget": [(("spec", "selector", "matchLabels"), False)],
}
#: pod-spec fields holding label selectors that kustomize rewrites for some kinds
_POD_SELECTORS = ("affinity", "topologySpreadConstraints")


def _put_labels(node: Any, path: tuple[str, ...], pairs: dict[str, str], create: bool) -> None:
    if isinstance(node, list):
        for item in node:
            _put_labels(item, path, pairs, create)
        return
    if not isinstance(node, dict):
        return
    key, rest = path[0], path[1:]
    if key not in node:
        if not create:
            return
        node[key] = {}
    if rest:
        _put_labels(node[key], rest, pairs, create)
    else:
        node[key].update(pairs)


def _add_labels(resource: dict[str, Any], label: dict[str, Any]) -> None:
    pairs = {str(k): str(v) for k, v in label["pairs"].items()}
    selectors = bool(label.get("includeSelectors"))
    templates = selectors or bool(label.get("includeTemplates"))
    resource["metadata"].setdefault("labels", {}).update(pairs)
    spec = resource.get("spec") or {}
    if templates and "template" in spec:
        spec["template"].setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
    if not selectors:
        return
    kind = resource["kind"]
    paths = _SELECTOR_PATHS.get(kind)
    if paths is None:
        pod = (spec.get("template") or {}).get("spec") or {}
        if "selector" in spec or any(field in pod for field in _POD_SELECTORS):
            raise ValueError(f"kustomize_build does not know where {kind} selects pods")
        return
    if kind == "Deployment" and "affinity" in ((spec.get("template") or {}).get("spec") or {}):
        raise ValueError("kustomize_build does not rewrite pod affinity selectors")
    for path, create in paths:
        _put_labels(resource, path, pairs, create)


def generator_literals(directory: Path, key: str, name: str) -> dict[str, str]:
    [gen] = [g for g in kustomization(directory).get(key) or [] if g["name"] == name]
    return dict(literal.split("=", 1) for literal in gen.get("literals") or [])


# --- Validating the rendered resources ----------------------------------------------------------

#: the Kubernetes version whose API schemas the rendered resources are checked against
KUBERNETES_VERSION = "1.32"

_DNS_LABEL = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
_OBJECT_META = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": _DNS_LABEL,
        "namespace": _DNS_LABEL,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
_SECONDS = {"type": "integer", "minimum": 0, "maximum": 3600}
_SCALING_RULES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stabilizationWindowSeconds": _SECONDS,
        "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
        "policies": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["type", "value", "periodSeconds"],
            "properties": {
                "type": {"enum": ["Pods", "Percent"]},
                "value": {"type": "integer", "minimum": 1},
                "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800},
            },
        }},
    },
}
#: a JetStream name (stream or consumer): no dots, wildcards or spaces
_JS_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9_-]+$"}

#: KEDA's ScaledObject (keda.sh/v1alpha1), for exactly the fields Habitus writes: only
#: `nats-jetstream` triggers, with only the metadata keys the scaler reads
SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _OBJECT_META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "minReplicaCount", "maxReplicaCount", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {"name": _DNS_LABEL},
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"horizontalPodAutoscalerConfig": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"behavior": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"scaleUp": _SCALING_RULES,
                                           "scaleDown": _SCALING_RULES},
                        }},
                    }},
                },
                "triggers": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["type", "metadata"],
                    "properties": {
                        "type": {"const": "nats-jetstream"},
                        # KEDA passes trigger metadata as strings, whatever it means
                        "metadata": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["natsServerMonitoringEndpoint", "account", "stream",
                                         "consumer", "lagThreshold"],
                            "properties": {
                                "natsServerMonitoringEndpoint": {
                                    "type": "string", "pattern": r"^[a-z0-9.-]+:[0-9]{1,5}$"},
                                "account": {"type": "string", "minLength": 1},
                                "stream": _JS_NAME,
                                "consumer": _JS_NAME,
                                "lagThreshold": {"type": "string", "pattern": r"^[1-9][0-9]*$"},
                            },
                        },
                    },
                }},
            },
        },
    },
}

_GO_DURATION = r"([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+"
#: NACK's Stream (jetstream.nats.io/v1beta2), for exactly the fields Habitus writes
NACK_STREAM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "jetstream.nats.io/v1beta2"},
        "kind": {"const": "Stream"},
        "metadata": _OBJECT_META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "subjects", "retention", "storage", "replicas", "maxAge",
                         "discard", "duplicateWindow", "denyDelete", "denyPurge", "allowDirect",
                         "preventDelete"],
            "properties": {
                "name": _JS_NAME,
                "description": {"type": "string"},
                "subjects": {"type": "array", "minItems": 1,
                             "items": {"type": "string", "pattern": r"^[^\s]+$"}},
                "retention": {"enum": ["limits", "interest", "workqueue"]},
                "storage": {"enum": ["file", "memory"]},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 5},
                # "" is no limit
                "maxAge": {"type": "string", "pattern": f"^({_GO_DURATION})?$"},
                "discard": {"enum": ["old", "new"]},
                "duplicateWindow": {"type": "string", "pattern": f"^{_GO_DURATION}$"},
                "denyDelete": {"type": "boolean"},
                "denyPurge": {"type": "boolean"},
                "allowDirect": {"type": "boolean"},
                "preventDelete": {"type": "boolean"},
                "subjectTransform": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["source", "dest"],
                    "properties": {"source": {"type": "string", "minLength": 1},
                                   "dest": {"type": "string", "minLength": 1}},
                },
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
    },
}

#: (apiVersion, kind) -> the schema a custom resource is validated with
CUSTOM_RESOURCE_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT_SCHEMA,
    ("jetstream.nats.io/v1beta2", "Stream"): NACK_STREAM_SCHEMA,
}


def validate_resource(resource: dict[str, Any]) -> None:
    """Raise unless `resource` is valid: a Kubernetes kind against the API's own schemas for
    KUBERNETES_VERSION (strict: no field the API does not have), a custom resource against
    its schema above. A custom resource of any other kind raises (no schema to check it)."""
    schema = CUSTOM_RESOURCE_SCHEMAS.get((resource.get("apiVersion"), resource.get("kind")))
    if schema is not None:
        import jsonschema

        jsonschema.validate(resource, schema, cls=jsonschema.Draft202012Validator)
    else:
        import kubernetes_validate  # a dev dependency; only the tests import this module

        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


# --- The check ----------------------------------------------------------------------------------


def _names_problems(place: str, have: Iterable[str], want: Iterable[str], what: str) -> list[str]:
    have_set, want_set = set(have), set(want)
    return [f"{place}: {what} lacks {n}" for n in sorted(want_set - have_set)] + [
        f"{place}: {what} names {n}, which is not a service" for n in sorted(have_set - want_set)
    ]


def _expected_problems(
    place: str, value: str | None, services: list[ServiceDescriptor]
) -> list[str]:
    want = expected_services(services)
    if value is None:
        return [f"{place}: not set (want {want!r})"]
    have = [n.strip() for n in value.split(",") if n.strip()]
    problems = _names_problems(place, have, want.split(",") if want else [], "the list")
    if not problems and value != want:
        problems.append(f"{place}: {value!r} is not sorted as {want!r}")
    return problems


def deploy_problems(services: list[ServiceDescriptor]) -> list[str]:
    """Every place where one of `services` is missing, or a service not among them is named."""
    from habitus.runtime.up import service_names

    names = {s.name for s in services}
    problems: list[str] = []

    problems += _names_problems(PYPROJECT_PLACE, entry_point_names(), names, "the group")

    compose = read_yaml(COMPOSE_FILE)
    compose_services: dict[str, dict[str, Any]] = compose["services"]
    planned = planned_compose_services(compose, names)
    for s in services:
        spec = compose_services.get(s.deploy_name)
        want = f"`habitus serve {s.name}`"
        if spec is None:
            problems.append(
                f"{COMPOSE_PLACE}: no service {s.deploy_name} running {want} for {s.name}"
            )
        elif compose_command(spec) != ["serve", s.name]:
            problems.append(
                f"{COMPOSE_PLACE}: {s.deploy_name} runs {compose_command(spec)}, "
                f"not {want} for {s.name}"
            )
        elif spec.get("profiles"):
            problems.append(
                f"{COMPOSE_PLACE}: {s.deploy_name} ({s.name}) is behind the "
                f"profiles {spec['profiles']}: a plain `docker compose up` skips it"
            )
    for compose_name, spec in compose_services.items():
        name = served(compose_command(spec))
        if name and name not in names and compose_name not in planned:
            problems.append(
                f"{COMPOSE_PLACE}: {compose_name} runs `habitus serve {name}`, "
                f"which is not a service (nor behind the {SERVICES_PROFILE!r} "
                f"profile)"
            )

    deployments = {
        r["metadata"]["name"]: r for r in kustomize_build(K8S_BASE) if r["kind"] == "Deployment"
    }
    for s in services:
        deployment = deployments.get(deployment_name(s))
        if deployment is None:
            problems.append(f"{K8S_PLACE}: no Deployment {deployment_name(s)} for {s.name}")
            continue
        args = [c.get("args") for c in deployment["spec"]["template"]["spec"]["containers"]]
        if args != [["serve", s.name]]:
            problems.append(
                f"{K8S_PLACE}: {deployment_name(s)} runs {args}, not `habitus serve {s.name}`"
            )
    for name, deployment in deployments.items():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            runs = served(container.get("args") or [])
            if runs and runs not in names:
                problems.append(
                    f"{K8S_PLACE}: {name} runs `habitus serve {runs}`, which is not a service"
                )

    gateway_env = compose_env(compose_services.get("gateway") or {})
    problems += _expected_problems(
        COMPOSE_EXPECTED_PLACE, gateway_env.get(EXPECTED_SERVICES), services
    )
    config = generator_literals(K8S_BASE, "configMapGenerator", "habitus-config")
    problems += _expected_problems(K8S_EXPECTED_PLACE, config.get(EXPECTED_SERVICES), services)

    targets = set().union(*scrape_targets(read_yaml(PROMETHEUS_FILE)).values())
    by_deploy = {s.deploy_name: s for s in services}
    for s in services:
        if scrape_target(s) not in targets:
            problems.append(f"{PROMETHEUS_PLACE}: {s.name} is not scraped at {scrape_target(s)}")
    for target in sorted(targets):
        host = target.rsplit(":", 1)[0]
        if host in by_deploy:
            if target != scrape_target(by_deploy[host]):
                problems.append(
                    f"{PROMETHEUS_PLACE}: {target} is not where "
                    f"{by_deploy[host].name} serves /metrics"
                )
            continue
        name = served(compose_command(compose_services.get(host) or {}))
        if host != "localhost" and host not in compose_services:
            problems.append(f"{PROMETHEUS_PLACE}: {target} is not a compose service")
        elif name and host not in planned:
            problems.append(
                f"{PROMETHEUS_PLACE}: {target} runs `habitus serve {name}`, which is not a service"
            )

    up = service_names()
    problems += _names_problems(UP_PLACE, up, names, "the list")
    gateways = [s.name for s in services if s.public_http]
    if set(up) == names and gateways and up[-len(gateways) :] != sorted(gateways):
        problems.append(f"{UP_PLACE}: {up} does not start the gateway last")
    return problems
