"""The AsyncAPI document covers the whole catalog with its subjects and schemas."""

from __future__ import annotations

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
