"""The AsyncAPI document of the event catalog, generated from the catalog itself.

One publisher per event type on its subject pattern, carrying the event model as schema, so
subscribers in other teams read the same contract the services validate against. Generate with
`habitus asyncapi` or `faststream docs gen habitus.events.asyncapi:app`.
"""

from __future__ import annotations

import json
from typing import Any

from faststream import FastStream
from faststream.nats import NatsBroker
from faststream.specification import AsyncAPI

from habitus import __version__
from habitus.events.catalog import CATALOG, Catalog
from habitus.subjects import EVENT_ROOT, INGEST_ROOT


def subject_pattern(spec_stream: str, type_name: str, kind: str | None) -> str:
    if spec_stream == "ingest":
        return f"{INGEST_ROOT}.{kind}.{{tenant_id}}.{{user_id}}"
    return f"{EVENT_ROOT}.{type_name}.{{tenant_id}}.{{user_id}}"


def build(catalog: Catalog = CATALOG) -> tuple[NatsBroker, AsyncAPI]:
    broker = NatsBroker()
    for spec in catalog:
        broker.publisher(
            subject_pattern(spec.stream, spec.type, spec.kind),
            schema=spec.model,
            title=spec.type,
            description=f"{spec.description} (schema_version {spec.version}; stream "
            f"{'HABITUS_INGEST' if spec.stream == 'ingest' else 'HABITUS_EVENTS'})",
        )
    spec_doc = AsyncAPI(
        broker,
        title="Habitus events",
        version=__version__,
        description="Every event Habitus accepts or publishes. The envelope is fixed; "
        "payloads grow by optional fields or a new schema_version upcast on read.",
    )
    return broker, spec_doc


def document(catalog: Catalog = CATALOG) -> dict[str, Any]:
    _, spec_doc = build(catalog)
    return dict(json.loads(spec_doc.to_specification().to_json()))


_broker, _spec = build()
app = FastStream(_broker, specification=_spec)
