"""The producers' projection: ingest events in, `CandidateEmitted` out.

The deterministic producers are pure functions (provider, signature, heuristics, explicit
statements, reflection); this projection feeds them in stream order, keeps the heuristics'
per-session state in Postgres in the same transaction as the checkpoint, and emits each
candidate with an id derived from the ingest event, the producer and the facet: a redelivered
or replayed ingest event yields the same ids, which the stream and the learning projection
drop. A standing declaration is also published as the user's `FacetUpdated` (set and pinned),
with an id derived the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus import topology
from habitus.bus.streams import INGEST
from habitus.events import CATALOG, Event
from habitus.events.domain import CandidateEmitted, FacetUpdated
from habitus.ids import derived_event_id
from habitus.projection import ApplyContext, Delivered, Projection
from services.producers import store
from services.producers.candidates import Candidate
from services.producers.declarations import declared, without_restated
from services.producers.heuristics import SessionState, observe_turn
from services.producers.provider import provider_candidates
from services.producers.reflection import reflection_candidates
from services.producers.signature import signature_candidates
from services.producers.statements import Statement, find_statements, statement_candidates

PRODUCER = "producers"


def candidate_event(cause: Event[Any], candidate: Candidate) -> Event[Any]:
    return CATALOG.new(
        CandidateEmitted.model_validate(candidate.as_payload()),
        tenant_id=cause.tenant_id,
        user_id=cause.user_id,
        producer=PRODUCER,
        occurred_at=cause.occurred_at,
        event_id=candidate.event_id(cause.event_id),
        causation_id=cause.event_id,
        correlation_id=cause.correlation_id or cause.event_id,
    )


def declaration_event(cause: Event[Any], statement: Statement) -> Event[Any]:
    """The user's own setting, from a standing declaration in the turn `cause`."""
    return CATALOG.new(
        FacetUpdated.model_validate({"class": statement.facet_class, "key": statement.key,
                                     "value": statement.value}),
        tenant_id=cause.tenant_id,
        user_id=cause.user_id,
        producer=PRODUCER,
        occurred_at=cause.occurred_at,
        event_id=derived_event_id(cause.event_id, "FacetUpdated", statement.facet_class,
                                  statement.key, statement.value),
        causation_id=cause.event_id,
        correlation_id=cause.correlation_id or cause.event_id,
    )


class ProducersProjection(Projection):
    name = "producers.candidates"
    schema = store.SCHEMA
    stream = INGEST
    filter_subjects = topology.projection(name).filter_subjects()
    tables = store.TABLES

    async def apply_batch(self, cur: AsyncCursor[Any], batch: Sequence[Delivered],
                          ctx: ApplyContext) -> None:
        sessions = await store.load_sessions(cur, (
            (d.event.tenant_id, d.event.user_id, d.event.payload.session_id)
            for d in batch if d.event.type == "TurnRecorded"))
        states: dict[store.SessionKey, SessionState] = {}
        last_seq: dict[store.SessionKey, int] = {}
        for delivered in batch:
            event = delivered.event
            payload = event.payload
            candidates: list[Candidate]
            declarations: list[Statement] = []
            if event.type == "TurnRecorded":
                key = (event.tenant_id, event.user_id, payload.session_id)
                state = states.get(key) or SessionState.from_json(sessions.get(key))
                state, candidates = observe_turn(state, payload)
                where = {"session_id": payload.session_id, "turn_id": payload.turn_id,
                         "observed_at": payload.user_at}
                statements = find_statements(payload.user_message)
                candidates += statement_candidates(payload.user_message, **where,
                                                   statements=statements)
                candidates += without_restated(
                    reflection_candidates(payload.user_message, **where), statements)
                declarations = declared(statements)
                states[key] = state
                last_seq[key] = delivered.seq
            elif event.type == "EmailObserved":
                candidates = signature_candidates(payload)
            elif event.type == "ProviderProfileSynced":
                candidates = provider_candidates(payload, event.occurred_at)
            else:
                continue
            for candidate in candidates:
                ctx.emit(candidate_event(event, candidate), delivered)
            for statement in declarations:  # after its evidence, so the setting points to it
                ctx.emit(declaration_event(event, statement), delivered)
        await store.save_sessions(
            cur, {key: (states[key].to_json(), seq) for key, seq in last_seq.items()})
