"""The AsyncAPI document of the event catalog: enough to subscribe without reading our code.

Generated from the catalog, like the gateway's OpenAPI document from the RPC table, so it says
what the services validate and publish. A subscriber in another team needs four things from it,
and each is here:

- **where**: one server whose host and port are variables (a `make run` system listens on a
  port of its own, written to `./var/runtime.json`; a deployment on its NATS service);
- **what**: one channel per event type, its subject with the `{tenant_id}` and `{user_id}`
  parameters, the envelope every event shares, the payload with every field described, and the
  headers the publisher sets (`Nats-Msg-Id` is the deduplication key);
- **how**: the JetStream stream that keeps each channel and the durable pull consumer we
  recommend, in a clearly named extension (`x-habitus-jetstream`): AsyncAPI's NATS bindings know
  only a core-NATS queue group, nothing of streams, consumers, deliver policies or acks;
- **what it means**: the descriptions are the models' own, and a test publishes through the real
  services and validates every event it sees against this document.

Component names are the models' class names, refused when two classes share one (as in the
OpenAPI document): a code generator makes one class per component.

It lives with the bus, not the catalog: the document describes the catalog's events as the bus
carries them (its streams, the publisher's headers), and the catalog is below the bus.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from habitus import __version__
from habitus.bus.publisher import MSG_ID
from habitus.bus.streams import EVENTS, INGEST
from habitus.crypto.sealing import ALGORITHM, UNSEALED_TYPES
from habitus.events.catalog import CATALOG, TYPE_HEADER, VERSION_HEADER, Catalog, EventSpec
from habitus.events.envelope import Event
from habitus.subjects import EVENT_ROOT, INGEST_ROOT

SCHEMAS = "#/components/schemas/{model}"
EXTENSION = "x-habitus-jetstream"
#: ack_wait and max_ack_pending of the recommended consumer (what examples/subscriber.py uses)
ACK_WAIT_SECONDS = 30
MAX_ACK_PENDING = 1000


def subject_pattern(spec_stream: str, type_name: str, kind: str | None) -> str:
    if spec_stream == "ingest":
        return f"{INGEST_ROOT}.{kind}.{{tenant_id}}.{{user_id}}"
    return f"{EVENT_ROOT}.{type_name}.{{tenant_id}}.{{user_id}}"


def stored_pattern(spec: EventSpec) -> str:
    """The subject as the stream stores it: the address and two partition tokens the stream
    appends (`habitus.subjects`)."""
    return subject_pattern(spec.stream, spec.type, spec.kind) + ".{user_slot}.{tenant_slot}"


def filter_subject(spec: EventSpec, tenant_id: str = "*") -> str:
    """The subject a consumer of this one type filters on, on the stored subjects (every
    user; one tenant or all)."""
    root = subject_pattern(spec.stream, spec.type, spec.kind).split(".{tenant_id}")[0]
    return f"{root}.>" if tenant_id == "*" else f"{root}.{tenant_id}.>"


def document(catalog: Catalog = CATALOG) -> dict[str, Any]:
    specs = sorted(catalog, key=lambda s: s.type)
    schemas = _payload_schemas(specs)
    envelope = _envelope_properties()
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for spec in specs:
        event_schema = f"{spec.type}Event"
        if event_schema in schemas:
            raise ValueError(f"a payload model is named like an event schema: {event_schema}")
        schemas[event_schema] = _event_schema(spec, envelope)
        if spec.type in UNSEALED_TYPES:
            message_schema = event_schema
        else:
            message_schema = f"{spec.type}Message"
            schemas[f"{spec.type}SealedEvent"] = _sealed_schema(spec, envelope)
            schemas[message_schema] = {
                "description": f"A {spec.type} event as it is on the bus: a user's payload "
                               "sealed, the tenant's own plain.",
                "oneOf": [{"$ref": SCHEMAS.format(model=f"{spec.type}SealedEvent")},
                          {"$ref": SCHEMAS.format(model=event_schema)}]}
        messages[spec.type] = _message(spec, message_schema)
        channels[spec.type] = _channel(spec)
        operations[f"on{spec.type}"] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{spec.type}"},
            "messages": [{"$ref": f"#/channels/{spec.type}/messages/{spec.type}"}],
            "summary": f"Habitus publishes {spec.type}; subscribe with the channel's "
                       f"recommended consumer ({EXTENSION}).",
        }
    for name, schema in schemas.items():
        schema["title"] = name
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Habitus events",
            "version": __version__,
            "description": _DESCRIPTION,
        },
        "defaultContentType": "application/json",
        "servers": {"habitus": _server()},
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": messages,
            "schemas": dict(sorted(schemas.items())),
            "parameters": {
                "tenant_id": {"description": "The tenant (platform customer), e.g. `acme`; "
                                             "`*` in a filter subject for every tenant."},
                "user_id": {"description": "The user the event is about, within the tenant; "
                                           "`*` for every user."},
            },
        },
    }


_DESCRIPTION = f"""\
Every event Habitus accepts from agents (the ingest stream) or publishes as a consequence (the \
event log).

**Subscribing.** Events are kept in JetStream: `{INGEST}` holds what agents reported (personal \
text, kept for the raw retention period, 7 days by default) and `{EVENTS}` is the event log \
(kept; only a user's erasure purges that user's subjects, leaving the `UserErased` tombstone). \
Create a durable pull consumer of your own on the stream, filtered to the subjects you need \
(each channel's `{EXTENSION}` names its stream and a recommended consumer), with explicit acks: \
ack an event only once its effect is committed. Delivery is at least once, so record each \
event's `(tenant_id, user_id, event_id)` with its effect and skip an id you have seen; that is \
also the scope of the stream's own deduplication (`{MSG_ID}` header). `deliver_policy: all` \
replays the log from the start, `new` begins now. Within one user's subject, events arrive in \
the order they were stored.

**Stored subjects.** Publish on a channel's address; the streams store each message with two \
more tokens appended, the user's and the tenant's partition slot (`{{user_slot}}.{{tenant_slot}}`, \
0 to 15: NATS's deterministic `partition()` of the tenant and user, and of the tenant). A \
consumer sees the stored subject, so filter with a trailing `>` (each channel's recommended \
filter does), or on a slot to take one partition of the users; messages stored before the \
tokens existed keep the address alone, which `<type>.>` still matches.

**The envelope.** Every message is one JSON object: the envelope (`event_id`, `type`, \
`schema_version`, `tenant_id`, `user_id`, `occurred_at`, `producer`, `causation_id`, \
`correlation_id`) and the type's `payload`. Headers repeat the type (`{TYPE_HEADER}`) and \
payload version (`{VERSION_HEADER}`), so a subscriber can route without parsing. Payloads grow \
by optional fields; an incompatible change is a new `schema_version`, and `habitus.events` \
upcasts an older stored version on read.

**Sealed payloads.** A user's events carry their payload sealed with a data key of that user's \
own (`sealed.kid`; AES-256-GCM), so erasing the user, which destroys the key, leaves every copy \
unreadable, in the stream files and in any backup. The envelope stays plain. The tenant's own \
events (user ids beginning with `_`) and the `UserErased` tombstone are not sealed. \
`habitus.events` opens sealed payloads with the deployment's key store (`HABITUS_KEYSTORE_DIR`, \
and the key-encryption key); each message's schema lists both forms, and the plain one is what a \
sealed payload opens to.

**Servers.** Point `host` and `port` at the running system's NATS: a `make run` system writes \
its URLs to `./var/runtime.json` and prints them; a deployment exposes its NATS service.\
"""


def _server() -> dict[str, Any]:
    return {
        "host": "{host}:{port}",
        "protocol": "nats",
        "description": "The NATS server (with JetStream) of the running Habitus system.",
        "variables": {
            "host": {"default": "127.0.0.1",
                     "description": "Its host: for `make run` the local machine; in a "
                                    "deployment the NATS service's name."},
            "port": {"default": "4222",
                     "description": "Its port: `make run` picks a free one and writes "
                                    "`nats_url` to `./var/runtime.json` (`habitus lag` uses "
                                    "it too); 4222 is the NATS default."},
        },
    }


def _channel(spec: EventSpec) -> dict[str, Any]:
    stream = INGEST if spec.stream == "ingest" else EVENTS
    origin = ("Reported by agents through the gateway." if spec.stream == "ingest"
              and not spec.internal else
              "Published by Habitus itself on the ingest stream (a service's tick); agents "
              "cannot send it." if spec.internal else "Published by Habitus on the event log.")
    return {
        "address": subject_pattern(spec.stream, spec.type, spec.kind),
        "title": spec.type,
        "description": " ".join(p for p in (spec.description, origin) if p),
        "parameters": {"tenant_id": {"$ref": "#/components/parameters/tenant_id"},
                       "user_id": {"$ref": "#/components/parameters/user_id"}},
        "messages": {spec.type: {"$ref": f"#/components/messages/{spec.type}"}},
        "servers": [{"$ref": "#/servers/habitus"}],
        EXTENSION: {
            "stream": stream,
            "subject": filter_subject(spec),
            "stored_subject": stored_pattern(spec),
            "recommended_consumer": {
                "durable_name": "<your service's name>",
                "filter_subject": filter_subject(spec),
                "filter_subject_one_tenant": filter_subject(spec, "<tenant_id>"),
                "deliver_policy": "all",
                "ack_policy": "explicit",
                "ack_wait_seconds": ACK_WAIT_SECONDS,
                "max_ack_pending": MAX_ACK_PENDING,
                "idempotency_key": ["tenant_id", "user_id", "event_id"],
            },
        },
    }


def _message(spec: EventSpec, event_schema: str) -> dict[str, Any]:
    return {
        "name": spec.type,
        "title": spec.type,
        "summary": spec.description or spec.type,
        "contentType": "application/json",
        "headers": {
            "type": "object",
            "required": [MSG_ID, TYPE_HEADER, VERSION_HEADER],
            "properties": {
                MSG_ID: {"type": "string", "description": "`<tenant_id>.<user_id>.<event_id>`: "
                         "the stream's deduplication key."},
                TYPE_HEADER: {"const": spec.type, "description": "The event type."},
                VERSION_HEADER: {"type": "string", "pattern": "^[1-9][0-9]*$",
                                 "description": "The payload's schema_version."},
            },
        },
        "payload": {"$ref": SCHEMAS.format(model=event_schema)},
    }


def _payload_schemas(specs: list[EventSpec]) -> dict[str, Any]:
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (spec.payload, "serialization") for spec in specs]
    _, defs = models_json_schema(models, ref_template=SCHEMAS)
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    invented = sorted(n for n in schemas if n.endswith(("-Input", "-Output")) or "__" in n)
    if invented:
        raise ValueError("event models without a unique name of their own (rename the "
                         "classes): " + ", ".join(invented))
    return {name: _without_discriminators(schema) for name, schema in schemas.items()}


def _without_discriminators(node: Any) -> Any:
    """AsyncAPI's schema object is JSON Schema, where `discriminator` is a property name with a
    meaning of its own, not OpenAPI's `{propertyName, mapping}`. The `oneOf` alone says it all
    (each variant's `type` is a constant), so pydantic's OpenAPI-style discriminator goes."""
    if isinstance(node, dict):
        return {k: _without_discriminators(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_without_discriminators(v) for v in node]
    return node


def _envelope_properties() -> dict[str, Any]:
    schema = Event[BaseModel].model_json_schema(mode="serialization")
    properties = dict(schema["properties"])
    properties.pop("payload")
    for prop in properties.values():
        prop.pop("title", None)
    return properties


def _sealed_schema(spec: EventSpec, envelope: dict[str, Any]) -> dict[str, Any]:
    """The same envelope, with the payload sealed (habitus.crypto.sealing)."""
    plain = _event_schema(spec, envelope)
    properties = dict(plain["properties"])
    properties["payload"] = {
        "type": "string", "contentEncoding": "base64",
        "description": "The payload's JSON, sealed with AES-256-GCM under the user's data key "
                       "`sealed.kid`: a 12-byte nonce, then the ciphertext and tag. With "
                       "`sealed.aad` `envelope`, the associated data is the envelope as "
                       "written: every byte of the body before `,\"payload\":`; a body "
                       "sealed before that form has none, and its associated data is "
                       "`habitus/data/<tenant_id>/<user_id>/<kid>/<event_id>/<type>`. Either "
                       "way the payload opens only in its own envelope."}
    properties["sealed"] = {
        "type": "object", "required": ["kid", "alg"], "additionalProperties": False,
        "description": "Which key sealed the payload, and how.",
        "properties": {"kid": {"type": "string", "description": "The user's data key id."},
                       "alg": {"const": ALGORITHM},
                       "aad": {"const": "envelope",
                               "description": "The associated data is the envelope as "
                                              "written (absent on bodies sealed before)."}}}
    return {**plain, "description": f"A {spec.type} event of a user: the envelope, and the "
                                    "payload sealed with the user's key.",
            "required": [*plain["required"], "sealed"], "properties": properties}


def _event_schema(spec: EventSpec, envelope: dict[str, Any]) -> dict[str, Any]:
    properties = {name: dict(prop) for name, prop in envelope.items()}
    properties["type"] = {"const": spec.type, "description": properties["type"]["description"]}
    properties["schema_version"] = {**properties["schema_version"], "maximum": spec.version}
    properties["payload"] = {"$ref": SCHEMAS.format(model=spec.payload.__name__),
                             "description": "The type-specific body."}
    return {
        "type": "object",
        "description": f"A {spec.type} event: the envelope and its payload.",
        "required": ["event_id", "type", "schema_version", "tenant_id", "user_id",
                     "occurred_at", "producer", "payload"],
        "additionalProperties": False,
        "properties": properties,
    }
