"""The gateway's OpenAPI document, generated from the two contracts it serves.

FastAPI would describe one catch-all `POST /v1/rpc/{method}` with an untyped body, and an ingest
route whose body it never sees (the gateway parses it by hand, to answer per item). So the document
is built here instead: every ingest type's item from the event catalog, every RPC method as its
own path from the RPC table, one error shape for every failure, and the bearer scheme on every
operation. Parameters and payloads come from the models the services validate with, so they
cannot drift from what is enforced; results come from the table's result models, which
tests/e2e/test_api_fuzz.py checks against the live services' answers.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from habitus.bus.rpc import HTTP_STATUS
from habitus.config import Settings
from habitus.contract import METHODS, MethodSpec
from habitus.events import CATALOG, Catalog
from habitus.ids import ID_RE

REF = "#/components/schemas/{model}"
SECURITY: list[dict[str, list[str]]] = [{"bearer": []}]

# A UUID, or a ULID in either case: what `habitus.ids.check_event_id` accepts.
EVENT_ID_PATTERN = (r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                    r"[0-9a-fA-F]{12}|[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25})$")

ERROR_CODES = sorted(HTTP_STATUS)

#: when a method that is tenant-wide for some parameters is
TENANT_WIDE_WHEN = {"memory.tool_rule_put": "`scope: tenant`",
                    "memory.tool_rule_delete": "`scope: tenant`",
                    "extraction.reextract": "without `user_id`",
                    "habits.configure": "when it changes a setting"}

#: When each status is answered, for the responses' descriptions.
STATUS_TEXT = {
    400: "The request is malformed: not JSON, the wrong shape, or a parameter is invalid "
         "(the message names it).",
    401: "No API key, or an unknown or revoked one.",
    403: "The key cannot act for the tenant named in X-Habitus-Tenant, or its role does not "
         "allow the call (the message names the role needed).",
    404: "Not found: the method is not one Habitus has (the message lists them), or the "
         "thing asked for does not exist.",
    409: "The change conflicts with the current state (the message says how to proceed).",
    413: "The body, the batch or an item is over the gateway's limits.",
    408: "The body did not arrive whole within HABITUS_BODY_TIMEOUT_SECONDS, or too many slow "
         "uploads were under way; the connection is closed.",
    415: "The body is not `application/json`, or its Content-Encoding is not gzip or identity.",
    422: "An event built from the request is invalid.",
    429: "The key's rate limit is used up; retry after Retry-After seconds.",
    503: "A service Habitus needs is not answering; retrying later is safe.",
    504: "The answer did not come in time. A command is recorded and will apply.",
    500: "A fault in Habitus itself: it was logged, and retrying will not help until it is "
         "fixed.",
}
#: 429 by budget: reads and writes are limited apart, and only ingest is pushed back
TOO_MANY = {
    "ingest": "The key's write budget (ingested items and commands, "
              "HABITUS_RATE_LIMIT_PER_MINUTE) is used up, or backpressure: the pipeline is "
              "more than HABITUS_BACKPRESSURE_LAG_SECONDS behind and this tenant sent at least "
              "its fair share of the backlog (the body's `backpressure` says how far behind, "
              "along which chain of projections). Retry after Retry-After seconds.",
    "write": "The key's write budget (ingested items and commands, "
             "HABITUS_RATE_LIMIT_PER_MINUTE) is used up; retry after Retry-After seconds. "
             "Commands are never refused by backpressure.",
    "read": "The key's read budget (HABITUS_READ_RATE_LIMIT_PER_MINUTE, its own: ingest never "
            "spends it, backpressure never refuses a read) is used up; retry after "
            "Retry-After seconds.",
}
RPC_ERRORS = (400, 401, 403, 404, 408, 409, 413, 415, 422, 429, 500, 503, 504)
INGEST_ERRORS = (400, 401, 403, 408, 409, 413, 415, 422, 429, 500, 503, 504)
PROFILE_ERRORS = (400, 401, 403, 404, 429, 500, 503, 504)

RETRYABLE = (429, 503, 504)
RETRY_AFTER = {
    "description": "Seconds to wait before retrying.",
    "schema": {"type": "integer", "minimum": 0},
}


def build_document(settings: Settings, *, title: str = "Habitus gateway", version: str = "1",
                   description: str = "", catalog: Catalog = CATALOG,
                   methods: dict[str, MethodSpec] | None = None) -> dict[str, Any]:
    table = dict(METHODS if methods is None else methods)
    ingest = [spec for spec in catalog if spec.stream == "ingest" and not spec.internal]
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (spec.payload, "validation") for spec in ingest]
    for spec in table.values():
        models += [(spec.params, "validation"), (spec.result, "serialization")]
    refs, defs = models_json_schema(models, ref_template=REF)
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    _check_model_names(schemas)
    own = _own_schemas(settings, [s.type for s in ingest])
    for spec in ingest:
        own[f"{spec.type}Item"] = _ingest_item(spec.type, spec.version, spec.description,
                                               refs[(spec.payload, "validation")])
    answers: dict[str, str] = {}
    for spec in table.values():
        result = refs[(spec.result, "serialization")]["$ref"].rsplit("/", 1)[1]
        answers[spec.name] = f"{result}Response"
        own[answers[spec.name]] = _rpc_answer(result)
    clash = set(schemas) & set(own)
    if clash:
        raise ValueError(f"model names clash with the gateway's own schemas: {sorted(clash)}")
    schemas.update(own)
    # Generators name their classes after a schema's title; pydantic titles a model by its class
    # name, which two components may share. The component name is the one that is unique.
    for name, schema in schemas.items():
        schema["title"] = name

    paths: dict[str, Any] = {"/v1/events": {"post": _ingest_operation(settings, ingest)}}
    for name in sorted(table):
        spec = table[name]
        paths[f"/v1/rpc/{name}"] = {"post": _rpc_operation(
            spec, refs[(spec.params, "validation")], answers[name])}
    paths["/v1/users/{user_id}/profile.md"] = {"get": _profile_operation()}

    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "An API key: `Authorization: Bearer <key>`. The key decides "
                               "the tenant; an admin key names it in X-Habitus-Tenant.",
            }},
        },
        "security": SECURITY,
        "tags": [{"name": "ingest", "description": "Report what happened."},
                 *({"name": t, "description": f"`{t}.*` methods."}
                   for t in sorted({n.split(".")[0] for n in table}))],
    }


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the generated document at the app's OpenAPI URL (and so in its docs UI)."""
    document = build_document(settings, title=app.title, version=app.version,
                              description=app.description)

    def openapi() -> dict[str, Any]:
        return document

    app.openapi = openapi  # type: ignore[method-assign]


# ---------------------------------------------------------------------------- schemas


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _check_model_names(schemas: dict[str, Any]) -> None:
    """Refuse names pydantic had to invent: a client generator turns each component into a class
    named after it, so `Foo-Input` / `Foo-Output` (one class described two ways, or two classes
    of one name used on either side) and `module__Foo` (two classes of one name) leave it two
    classes of one name, and it drops both. A model's class name is its public name: rename the
    class, or give its request and response variants classes of their own."""
    invented = sorted(n for n in schemas if n.endswith(("-Input", "-Output")) or "__" in n)
    if invented:
        raise ValueError("models without a unique name of their own (rename the classes): "
                         + ", ".join(invented))


def _rpc_answer(result: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["result"],
        "additionalProperties": False,
        "properties": {"result": _ref(result)},
        "description": f"A successful answer: the method's `{result}`.",
    }


def _own_schemas(settings: Settings, ingest_types: list[str]) -> dict[str, Any]:
    detail = {
        "type": "object",
        "required": ["code", "message"],
        "additionalProperties": False,
        "description": "What went wrong.",
        "properties": {
            # Not an enum: the gateway adds codes of its own (415, 405), and a client must
            # treat a code it does not know by its status.
            "code": {"type": "string", "pattern": "^[a-z][a-z_]*$",
                     "description": "Stable, for programs: "
                                    + ", ".join(f"`{c}` ({HTTP_STATUS[c]})"
                                                for c in ERROR_CODES) + "."},
            "message": {"type": "string", "description": "For people: what was wrong."},
        },
    }
    error = {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {"error": _ref("ErrorDetail")},
        "description": "Every failure has this shape. Ingest failures add the per-item results "
                       "(IngestError).",
    }
    field_error = {
        "type": "object",
        "required": ["field", "reason"],
        "additionalProperties": False,
        "properties": {
            "field": {"type": "string", "description": "The field at fault, dotted, e.g. "
                                                       "`payload.user_message`."},
            "reason": {"type": "string"},
        },
    }
    item_result = {
        "type": "object",
        "required": ["index", "status"],
        "additionalProperties": False,
        "properties": {
            "index": {"type": "integer", "minimum": 0,
                      "description": "The item's position in the request."},
            "status": {
                "type": "string",
                "enum": ["accepted", "duplicate", "rejected", "not_published", "conflict",
                         "not_stored", "not_confirmed"],
                "description": "`duplicate`: this event was stored before (nothing changed). "
                               "`not_published`: valid, but the batch was refused because of "
                               "another item. `conflict`: its event_id is stored with another "
                               "payload. `not_stored`: valid but not stored; send it again. "
                               "`not_confirmed`: sent, but the store did not confirm it in "
                               "time; sending it again with the same event_id is safe.",
            },
            "type": {"type": "string", "description": "The item's type, as sent."},
            "event_id": {"type": "string", "description": "The event's id (assigned when the "
                                                          "item had none)."},
            "seq": {"type": "integer", "minimum": 0,
                    "description": "Its sequence in the ingest stream."},
            "errors": {"type": "array", "items": _ref("FieldError"),
                       "description": "Why the item was rejected."},
            "error": {"type": "string", "description": "Why a valid item was not stored."},
        },
    }
    counts = {
        "accepted": {"type": "integer", "minimum": 0},
        "duplicates": {"type": "integer", "minimum": 0},
        "rejected": {"type": "integer", "minimum": 0},
        "conflicts": {"type": "integer", "minimum": 0},
        "failed": {"type": "integer", "minimum": 0,
                   "description": "Items not stored or not confirmed."},
        "results": {"type": "array", "items": _ref("IngestItemResult"),
                    "description": "One per item, in request order."},
    }
    return {
        "Error": error,
        "FieldError": field_error,
        "IngestItemResult": item_result,
        "IngestResponse": {
            "type": "object",
            "required": ["accepted", "duplicates", "rejected", "results"],
            "additionalProperties": False,
            "properties": counts,
        },
        "ErrorDetail": detail,
        "IngestError": {
            "type": "object",
            "required": ["error"],
            "additionalProperties": False,
            "properties": {"error": _ref("ErrorDetail"),
                           **counts,
                           "backpressure": _ref("Backpressure")},
            "description": "An ingest failure; when items were looked at, the per-item "
                           "results and counts say which were at fault.",
        },
        "Backpressure": {
            "type": "object",
            "required": ["projection", "lag_seconds", "path", "share", "fair_share"],
            "additionalProperties": False,
            "description": "Why ingest was pushed back (429): the pipeline is behind and this "
                           "tenant sent at least its fair share of what it has still to apply. "
                           "Retry-After is the tenant's part of the time the backlog needs.",
            "properties": {
                "projection": {"type": "string",
                               "description": "The projection adding the most to the chain."},
                "lag_seconds": {"type": "number", "minimum": 0,
                                "description": "How far behind the pipeline is end to end: "
                                               "each projection's lag (the age of the oldest "
                                               "event it has not applied) summed along the "
                                               "slowest chain."},
                "path": {"type": "array", "items": {"type": "string"},
                         "description": "That chain, from the projection reading the ingest "
                                        "to the last."},
                "share": {"type": "number", "minimum": 0, "maximum": 1,
                          "description": "This tenant's part of the items accepted over the "
                                         "lag."},
                "fair_share": {"type": "number", "minimum": 0, "maximum": 1,
                               "description": "1 / the tenants that sent items over the lag."},
            },
        },
        "IngestItem": {
            "oneOf": [_ref(f"{t}Item") for t in ingest_types],
            "discriminator": {"propertyName": "type",
                              "mapping": {t: REF.format(model=f"{t}Item")
                                          for t in ingest_types}},
        },
    }


def _ingest_item(type_name: str, version: int, description: str,
                 payload_ref: dict[str, Any]) -> dict[str, Any]:
    id_string = {"type": "string", "pattern": ID_RE.pattern}
    optional_id = {"type": ["string", "null"], "maxLength": 64}
    return {
        "type": "object",
        "description": description,
        "required": ["type", "user_id", "payload"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": type_name},
            "user_id": {**id_string, "description": "The user it is about."},
            "payload": payload_ref,
            "event_id": {"type": "string", "pattern": EVENT_ID_PATTERN,
                         "description": "A UUID or ULID; sending the same id again is answered "
                                        "`duplicate`. Absent: one is assigned."},
            "occurred_at": {"type": "number", "minimum": 0,
                            "description": "When it happened (epoch seconds). Absent: now."},
            "schema_version": {"type": "integer", "minimum": 1, "maximum": version,
                               "description": "The payload's version; older ones are "
                                              "upcast. Absent: 1."},
            "producer": {"type": "string", "minLength": 1, "maxLength": 128,
                         "description": "The client that reports it. Absent: `gateway`."},
            "causation_id": {**optional_id, "description": "The event this one was caused by."},
            "correlation_id": {**optional_id, "description": "The request it started from."},
            "tenant_id": {**id_string, "description": "May repeat the key's tenant; any other "
                                                      "is rejected."},
        },
    }


# ---------------------------------------------------------------------------- operations


def _errors(statuses: tuple[int, ...], schema: str = "Error",
            overrides: dict[int, str] | None = None,
            texts: dict[int, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status in statuses:
        response: dict[str, Any] = {
            "description": (texts or {}).get(status, STATUS_TEXT[status]),
            "content": {"application/json": {"schema": _ref((overrides or {}).get(status,
                                                                                  schema))}},
        }
        if status in RETRYABLE:
            response["headers"] = {"Retry-After": RETRY_AFTER}
        out[str(status)] = response
    return out


def _tenant_header() -> dict[str, Any]:
    return {"name": "X-Habitus-Tenant", "in": "header", "required": False,
            "description": "The tenant an admin key acts for (required with one); a tenant "
                           "key may only name its own.",
            "schema": {"type": "string", "pattern": ID_RE.pattern}}


def _ingest_operation(settings: Settings, ingest: list[Any]) -> dict[str, Any]:
    accepted = {"application/json": {"schema": _ref("IngestResponse")}}
    return {
        "operationId": "ingest",
        "tags": ["ingest"],
        "summary": "Report events (a JSON list of ingest items)",
        "description": "Each item is one of the ingest types ("
                       + ", ".join(f"`{s.type}`" for s in ingest) + "), chosen by `type`. "
                       "All-or-nothing by default: if any item is rejected nothing is "
                       "published and the answer says, per item, what was wrong. With "
                       f"`partial=true` the valid items are published. At most "
                       f"{settings.max_batch_items} items, {settings.max_item_bytes} bytes an "
                       f"item and {settings.max_body_bytes} bytes a body.",
        "security": SECURITY,
        "parameters": [
            {"name": "partial", "in": "query", "required": False,
             "description": "Publish the valid items even if some are rejected (answered 207).",
             "schema": {"type": "boolean", "default": False}},
            _tenant_header(),
        ],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "array", "minItems": 1, "maxItems": settings.max_batch_items,
            "items": _ref("IngestItem"),
        }}}},
        "responses": {
            "200": {"description": "Every item was stored (or was a duplicate).",
                    "content": accepted},
            "207": {"description": "With `partial=true`: the valid items were stored, the "
                                   "rejected ones are reported.", "content": accepted},
            **_errors(INGEST_ERRORS, overrides={s: "IngestError"
                                                for s in (409, 413, 422, 429, 503, 504)},
                      texts={429: TOO_MANY["ingest"]}),
        },
    }


def _rpc_operation(spec: MethodSpec, params: dict[str, Any], answer: str) -> dict[str, Any]:
    kind = ("A command: it is recorded as an event and answered once applied, so the "
            "caller's next read sees it." if spec.changes_state else "A read; it changes "
                                                                     "nothing.")
    if spec.tenant_wide is True:
        kind += " Needs a `tenant-admin` key (403 for an `agent` key)."
    elif spec.tenant_wide:
        kind += (" Needs a `tenant-admin` key when it applies to every user of the tenant "
                 f"({TENANT_WIDE_WHEN.get(spec.name, 'see below')}); 403 for an `agent` key.")
    return {
        "operationId": spec.name.replace(".", "_"),
        "tags": [spec.name.split(".")[0]],
        "summary": spec.summary,
        "description": " ".join(p for p in (kind, spec.description) if p),
        "security": SECURITY,
        "parameters": [
            _tenant_header(),
            {"name": "X-Correlation-Id", "in": "header", "required": False,
             "description": "Carried onto the events the call causes.",
             "schema": {"type": "string", "maxLength": 64}},
        ],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": params}}},
        "responses": {
            "200": {"description": "The method's result.",
                    "content": {"application/json": {"schema": _ref(answer)}}},
            **_errors(RPC_ERRORS,
                      texts={429: TOO_MANY["write" if spec.changes_state else "read"]}),
        },
        "x-habitus-service": spec.service,
        "x-habitus-changes-state": spec.changes_state,
    }


def _profile_operation() -> dict[str, Any]:
    return {
        "operationId": "profile_markdown",
        "tags": ["profile"],
        "summary": "A user's PROFILE.md (text/markdown)",
        "security": SECURITY,
        "parameters": [
            {"name": "user_id", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": ID_RE.pattern}},
            _tenant_header(),
        ],
        "responses": {
            "200": {
                "description": "The latest version; version 0 is what would be rendered now.",
                "headers": {
                    "X-Habitus-Profile-Version": {"schema": {"type": "integer", "minimum": 0},
                                                  "description": "The document version."},
                    "ETag": {"schema": {"type": "string"},
                             "description": "The quoted SHA-256 of the markdown."},
                },
                "content": {"text/markdown": {"schema": {"type": "string"}}},
            },
            **_errors(PROFILE_ERRORS, texts={429: TOO_MANY["read"]}),
        },
    }
