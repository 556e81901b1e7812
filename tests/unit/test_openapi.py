"""The gateway's OpenAPI document: generated from the RPC table and the event catalog, so every
method and ingest type an integrator can use is described with its schemas, errors and auth."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from habitus.config import Settings
from habitus.contract import METHODS, MethodSpec
from habitus.contract.learning import CacheParams
from habitus.events import CATALOG
from services.gateway.openapi import build_document, install

ERRORS = {"400", "401", "403", "404", "409", "413", "415", "422", "429", "500", "503", "504"}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return build_document(Settings(max_batch_items=50))


def resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/components/schemas/"), ref
    return resolve(doc, doc["components"]["schemas"][ref.rsplit("/", 1)[1]])


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [
            r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, verb, op) for path, item in doc["paths"].items() for verb, op in item.items()]


def test_every_method_of_the_table_is_its_own_path_with_its_schemas(doc: dict[str, Any]
                                                                      ) -> None:
    rpc_paths = {p for p in doc["paths"] if p.startswith("/v1/rpc/")}
    assert rpc_paths == {f"/v1/rpc/{name}" for name in METHODS}
    for name, spec in METHODS.items():
        op = doc["paths"][f"/v1/rpc/{name}"]["post"]
        assert op["summary"] == spec.summary
        body = resolve(doc, op["requestBody"]["content"]["application/json"]["schema"])
        params = spec.params.model_json_schema(by_alias=True)
        assert set(body["properties"]) == set(params["properties"]), name
        assert set(body.get("required", [])) == set(params.get("required", [])), name
        assert body["additionalProperties"] is False
        answer = op["responses"]["200"]["content"]["application/json"]["schema"]
        # A named answer, so a generated client returns a class, not an inline dict
        assert answer == {"$ref": f"#/components/schemas/{spec.result.__name__}Response"}
        ok = resolve(doc, answer)
        assert ok["required"] == ["result"]
        assert ok["properties"]["result"] == {"$ref": f"#/components/schemas/"
                                                      f"{spec.result.__name__}"}
        assert ERRORS <= set(op["responses"]), name


def test_learning_params_carry_their_aliases_and_constraints(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/v1/rpc/learning.pin_facet"]["post"]
    body = resolve(doc, op["requestBody"]["content"]["application/json"]["schema"])
    assert set(body["required"]) == {"user_id", "class", "key"}
    assert body["properties"]["user_id"]["pattern"] == "^[A-Za-z0-9-][A-Za-z0-9_-]{0,63}$"
    assert resolve(doc, body["properties"]["class"])["enum"] == [
        "style", "identity", "tooling", "veto", "goal", "channel"]
    assert op["x-habitus-changes-state"] is True
    assert doc["paths"]["/v1/rpc/learning.list_facets"]["post"]["x-habitus-changes-state"] is False


def test_every_error_is_the_one_error_shape_and_retryable_ones_say_when(doc: dict[str, Any]
                                                                        ) -> None:
    schemas = doc["components"]["schemas"]
    error, ingest_error = schemas["Error"], schemas["IngestError"]
    detail = {"$ref": "#/components/schemas/ErrorDetail"}
    assert error["required"] == ingest_error["required"] == ["error"]
    assert error["properties"]["error"] == ingest_error["properties"]["error"] == detail
    assert set(schemas["ErrorDetail"]["required"]) == {"code", "message"}
    for path, _verb, op in operations(doc):
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            schema = resolve(doc, response["content"]["application/json"]["schema"])
            assert schema is error or schema is ingest_error, (path, status)
            if status in ("429", "503"):
                assert "Retry-After" in response["headers"], (path, status)


def test_bearer_auth_applies_to_every_operation(doc: dict[str, Any]) -> None:
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"]}
    assert doc["security"] == [{"bearer": []}]
    for path, verb, op in operations(doc):
        assert op["security"] == [{"bearer": []}], (path, verb)
        assert "401" in op["responses"], (path, verb)


def test_ingest_body_is_a_list_of_every_ingest_type_discriminated_by_type(
    doc: dict[str, Any]
) -> None:
    op = doc["paths"]["/v1/events"]["post"]
    body = op["requestBody"]["content"]["application/json"]["schema"]
    assert body["type"] == "array"
    assert (body["minItems"], body["maxItems"]) == (1, 50)
    item = resolve(doc, body["items"])
    ingest = CATALOG.ingest_types()
    assert item["discriminator"]["propertyName"] == "type"
    assert set(item["discriminator"]["mapping"]) == set(ingest)
    assert len(item["oneOf"]) == len(ingest)
    for type_name in ingest:
        variant = resolve(doc, {"$ref": item["discriminator"]["mapping"][type_name]})
        assert variant["properties"]["type"] == {"const": type_name}
        assert set(variant["required"]) == {"type", "user_id", "payload"}
        payload = resolve(doc, variant["properties"]["payload"])
        expected = CATALOG.spec(type_name).payload.model_json_schema(by_alias=True)
        assert set(payload["properties"]) == set(expected["properties"]), type_name
        assert all(p.get("description") for p in payload["properties"].values()), type_name
    turn = resolve(doc, {"$ref": item["discriminator"]["mapping"]["TurnRecorded"]})
    assert "user_message" in resolve(doc, turn["properties"]["payload"])["required"]


def test_ingest_answers_per_item(doc: dict[str, Any]) -> None:
    responses = doc["paths"]["/v1/events"]["post"]["responses"]
    assert {"200", "207", "400", "401", "413", "422", "429", "503"} <= set(responses)
    ok = resolve(doc, responses["200"]["content"]["application/json"]["schema"])
    assert responses["207"]["content"] == responses["200"]["content"]
    item = resolve(doc, ok["properties"]["results"]["items"])
    assert {"index", "status", "type", "event_id", "seq", "errors"} <= set(item["properties"])
    assert set(item["properties"]["status"]["enum"]) == {
        "accepted", "duplicate", "rejected", "not_published", "conflict", "not_stored",
        "not_confirmed"}
    rejected = resolve(doc, responses["422"]["content"]["application/json"]["schema"])
    assert "results" in rejected["properties"]


def test_profile_markdown_is_described(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/v1/users/{user_id}/profile.md"]["get"]
    assert [p["name"] for p in op["parameters"] if p["in"] == "path"] == ["user_id"]
    assert "text/markdown" in op["responses"]["200"]["content"]


def test_every_reference_resolves(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    missing = sorted({r for r in refs(doc) if r.rsplit("/", 1)[1] not in schemas})
    assert missing == []
    assert len({op["operationId"] for _, _, op in operations(doc)}) == len(operations(doc))


def test_install_serves_the_document_from_the_app() -> None:
    app = FastAPI(title="Habitus gateway", version="1", description="d")
    install(app, Settings())
    served = app.openapi()
    assert served["info"] == {"title": "Habitus gateway", "version": "1", "description": "d"}
    assert set(served["paths"]) == set(build_document(Settings())["paths"])


def test_a_model_named_like_a_gateway_schema_is_refused() -> None:
    # Two schemas under one name would silently describe one of them with the other.
    class Error(BaseModel):
        detail: str

    class TurnRecordedItem(BaseModel):
        detail: str

    for result, name in ((Error, "Error"), (TurnRecordedItem, "TurnRecordedItem")):
        spec = MethodSpec("learning.broken", "stability_detector", CacheParams, result, "clashes")
        with pytest.raises(ValueError, match=name):
            build_document(Settings(), methods={spec.name: spec})


def test_every_component_is_titled_by_its_own_unique_name(doc: dict[str, Any]) -> None:
    # Generators name classes by title: two components titled alike become one class, and
    # the generator drops both (it did: `TraceRef`, `UserOnly`, `ErrorError`).
    schemas = doc["components"]["schemas"]
    assert {name: s.get("title") for name, s in schemas.items()} == {n: n for n in schemas}
    assert not [n for n in schemas if "-" in n or "__" in n]


def test_two_models_of_one_class_name_are_refused() -> None:
    class Ref(BaseModel):
        trace_id: str

    first = Ref

    class Ref(BaseModel):  # type: ignore[no-redef]
        user_id: str

    a = MethodSpec("learning.one", "stability_detector", CacheParams, first, "one")
    b = MethodSpec("learning.two", "stability_detector", CacheParams, Ref, "two")
    with pytest.raises(ValueError, match="rename the classes"):
        build_document(Settings(), methods={a.name: a, b.name: b})
