"""The AsyncAPI document: every event type a channel with its subject, stream and recommended
consumer, the envelope and payload with every field described, servers a subscriber points at
the running system, and valid for the AsyncAPI CLI itself."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from habitus.bus.asyncapi import EXTENSION, document
from habitus.events import CATALOG
from habitus.events.domain import ActiveFacet, CacheRebuilt
from habitus.events.envelope import Event
from habitus.events.ingest import TurnRecorded
from tests.support.asyncapi import DOCUMENT, EventChecker, cli_missing, validate_with_cli

#: AsyncAPI 3's rule for the keys of components
COMPONENT_KEY = re.compile(r"^[a-zA-Z0-9.\-_]+$")


def test_every_catalog_type_has_a_channel_with_its_subject_and_parameters() -> None:
    doc = document()
    channels = doc["channels"]
    assert set(channels) == {spec.type for spec in CATALOG}
    assert channels["TurnRecorded"]["address"] == "habitus.v1.ingest.turn.{tenant_id}.{user_id}"
    assert channels["CacheRebuilt"]["address"] == (
        "habitus.v1.event.CacheRebuilt.{tenant_id}.{user_id}")
    for name, channel in channels.items():
        params = set(re.findall(r"{(\w+)}", channel["address"]))
        assert params == set(channel["parameters"]), name
        assert channel["messages"] == {name: {"$ref": f"#/components/messages/{name}"}}
    assert {op["channel"]["$ref"] for op in doc["operations"].values()} == {
        f"#/channels/{name}" for name in channels}


def test_the_server_is_the_running_systems_host_and_port() -> None:
    (server,) = document()["servers"].values()
    assert server["host"] == "{host}:{port}"
    assert server["protocol"] == "nats"
    assert set(server["variables"]) == {"host", "port"}
    assert "runtime.json" in server["variables"]["port"]["description"]


def test_each_channel_names_its_stream_and_a_durable_consumer_with_explicit_acks() -> None:
    for spec in CATALOG:
        how = document()["channels"][spec.type][EXTENSION]
        assert how["stream"] == ("HABITUS_INGEST" if spec.stream == "ingest"
                                 else "HABITUS_EVENTS"), spec.type
        consumer = how["recommended_consumer"]
        assert consumer["ack_policy"] == "explicit"
        assert consumer["deliver_policy"] in ("all", "new")
        assert consumer["idempotency_key"] == ["tenant_id", "user_id", "event_id"]
        # on the stored subjects: the address and the partition slots the stream appends
        assert consumer["filter_subject"].endswith(".>"), consumer
        assert how["stored_subject"].endswith(".{user_slot}.{tenant_slot}"), how
    cache = document()["channels"]["CacheRebuilt"][EXTENSION]
    assert cache["recommended_consumer"]["filter_subject"] == "habitus.v1.event.CacheRebuilt.>"
    assert cache["recommended_consumer"]["filter_subject_one_tenant"] == (
        "habitus.v1.event.CacheRebuilt.<tenant_id>.>")
    assert cache["stored_subject"] == (
        "habitus.v1.event.CacheRebuilt.{tenant_id}.{user_id}.{user_slot}.{tenant_slot}")


def test_every_message_carries_the_envelope_and_its_headers() -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    for spec in CATALOG:
        message = doc["components"]["messages"][spec.type]
        found = schemas[message["payload"]["$ref"].rsplit("/", 1)[1]]
        # a user's event is sealed or plain (the tenant's own); the tombstone is always plain
        forms = ([schemas[f["$ref"].rsplit("/", 1)[1]] for f in found["oneOf"]]
                 if "oneOf" in found else [found])
        assert len(forms) == (1 if spec.type == "UserErased" else 2)
        for event in forms:
            assert {"event_id", "type", "schema_version", "tenant_id", "user_id",
                    "occurred_at", "producer", "payload"} <= set(event["required"])
            assert event["properties"]["type"]["const"] == spec.type
            assert event["properties"]["schema_version"]["maximum"] == spec.version
        assert {"Nats-Msg-Id", "Habitus-Type", "Habitus-Schema-Version"} == set(
            message["headers"]["required"])


def test_every_field_is_described_and_every_component_named_as_asyncapi_allows() -> None:
    # Subscribers in other teams read the AsyncAPI document, not our code: a field without a
    # description leaves them guessing (e.g. what previous_assistant_at changes).
    schemas = document()["components"]["schemas"]
    undescribed = [f"{name}.{field}" for name, schema in sorted(schemas.items())
                   for field, prop in schema.get("properties", {}).items()
                   if not prop.get("description")]
    assert undescribed == []
    assert "correction" in schemas["TurnRecorded"]["properties"]["previous_assistant_at"][
        "description"]
    bad = [k for part in ("schemas", "messages", "parameters")
           for k in document()["components"][part] if not COMPONENT_KEY.match(k)]
    assert bad == []
    assert {name: s["title"] for name, s in schemas.items()} == {n: n for n in schemas}


def test_cache_rebuilt_says_its_counts_are_about_active_facets() -> None:
    props = document()["components"]["schemas"]["CacheRebuilt"]["properties"]
    assert "Active" in props["added"]["description"]
    assert "Provisional" in props["provisional"]["description"]


def test_an_event_as_published_validates_and_a_wrong_one_does_not() -> None:
    checker = EventChecker(document())
    event = Event[CacheRebuilt](
        event_id="01JCZ0000000000000000000AB", type="CacheRebuilt", tenant_id="acme",
        user_id="dana", occurred_at=time.time(), producer="stability_detector",
        payload=CacheRebuilt(as_of=time.time(), added=1, evicted=0, kept=0, total_size=1,
                             active=[ActiveFacet.model_validate({
                                 "class": "style", "key": "verbosity", "value": "terse",
                                 "stability": 3.2, "user_state": "auto",
                                 "origin": "stated"})]))
    headers = {"Nats-Msg-Id": "acme.dana.01JCZ0000000000000000000AB",
               "Habitus-Type": "CacheRebuilt", "Habitus-Schema-Version": "1"}
    subject = "habitus.v1.event.CacheRebuilt.acme.dana"
    assert checker.check(subject, event.to_json(), headers)["payload"]["added"] == 1
    wrong = json.loads(event.to_json())
    wrong["payload"]["added"] = -1
    with pytest.raises(AssertionError, match=r"payload\.added"):
        checker.check(subject, json.dumps(wrong).encode(), headers)
    turn = json.loads(event.to_json())
    turn["payload"] = {"user_message": "hi"}
    with pytest.raises(AssertionError):
        checker.check(subject, json.dumps(turn).encode(), headers)
    with pytest.raises(AssertionError):
        checker.check(subject, event.to_json(), {**headers, "Habitus-Type": "TurnRecorded"})
    assert checker.channel_of("habitus.v1.ingest.turn.acme.dana") == "TurnRecorded"
    assert TurnRecorded.__name__ in document()["components"]["schemas"]


def test_the_checked_in_document_is_current() -> None:
    # Regenerate with `habitus asyncapi --output docs/asyncapi.json`.
    checked_in = json.loads(DOCUMENT.read_text())
    assert checked_in == json.loads(json.dumps(document(), sort_keys=True))


@pytest.mark.slow
def test_the_asyncapi_cli_validates_the_document_with_no_error_or_warning(
        tmp_path: Path) -> None:
    reason = cli_missing()
    if reason:
        pytest.skip(reason)
    done = validate_with_cli(DOCUMENT, tmp_path)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    assert "is valid" in printed, printed
    assert "0 errors, 0 warnings" in printed or "governance issues" not in printed, printed
