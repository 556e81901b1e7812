"""The AsyncAPI document covers the whole catalog with its subjects and schemas."""

from __future__ import annotations

import json
from pathlib import Path

from habitus.events import CATALOG
from habitus.events.asyncapi import document


def test_every_catalog_type_has_a_channel_with_its_subject_and_payload_schema() -> None:
    doc = document()
    channels = doc["channels"]
    assert set(channels) == {spec.type for spec in CATALOG}
    assert channels["TurnRecorded"]["address"] == "habitus.v1.ingest.turn.{tenant_id}.{user_id}"
    assert channels["CacheRebuilt"]["address"] == (
        "habitus.v1.event.CacheRebuilt.{tenant_id}.{user_id}"
    )
    schemas = doc["components"]["schemas"]
    turn_schema = schemas["Event[TurnRecorded]"]
    assert {"event_id", "tenant_id", "user_id", "payload"} <= set(turn_schema["required"])
    assert "TurnRecorded" in schemas
    assert "user_message" in schemas["TurnRecorded"]["required"]


def test_every_payload_field_is_described() -> None:
    # Subscribers in other teams read the AsyncAPI document, not our code: a field without a
    # description leaves them guessing (e.g. what previous_assistant_at changes).
    schemas = document()["components"]["schemas"]
    payloads = {name: schema for name, schema in schemas.items()
                if not name.startswith("Event[") and "properties" in schema}
    assert {spec.type for spec in CATALOG} <= set(payloads)
    undescribed = [f"{name}.{field}" for name, schema in sorted(payloads.items())
                   for field, prop in schema["properties"].items()
                   if not prop.get("description")]
    assert undescribed == []
    assert "correction" in payloads["TurnRecorded"]["properties"]["previous_assistant_at"][
        "description"]


def test_the_checked_in_document_is_current() -> None:
    # Regenerate with `habitus asyncapi --output docs/asyncapi.json`.
    checked_in = json.loads((Path(__file__).parents[2] / "docs" / "asyncapi.json").read_text())
    assert checked_in == json.loads(json.dumps(document(), sort_keys=True))
