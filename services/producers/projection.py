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

from habitus.events import Event
from habitus.events.causation import caused
from habitus.events.domain import CandidateEmitted, FacetUpdated
from habitus.events.ingest import EmailObserved, ProviderProfileSynced, TurnRecorded
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
    return caused(cause, CandidateEmitted.model_validate(candidate.as_payload()),
                  producer=PRODUCER, event_id=candidate.event_id(cause.event_id))


def declaration_event(cause: Event[Any], statement: Statement) -> Event[Any]:
    """The user's own setting, from a standing declaration in the turn `cause`."""
    return caused(cause, FacetUpdated.model_validate({"class": statement.facet_class,
                                                      "key": statement.key,
                                                      "value": statement.value}),
                  producer=PRODUCER,
                  key=(statement.facet_class, statement.key, statement.value))


def _emit(ctx: ApplyContext, delivered: Delivered, candidates: list[Candidate],
          declarations: Sequence[Statement] = ()) -> None:
    for candidate in candidates:
        ctx.emit(candidate_event(delivered.event, candidate), delivered)
    for statement in declarations:  # after its evidence, so the setting points to it
        ctx.emit(declaration_event(delivered.event, statement), delivered)


class ProducersProjection(Projection):
    name = "producers.candidates"
    schema = store.SCHEMA
    tables = store.TABLES

    async def on_turns(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        """The heuristics keep per-session state: loaded once for the run, saved once."""
        sessions = await store.load_sessions(cur, (
            (d.event.tenant_id, d.event.user_id, d.event.payload.session_id) for d in run))
        states: dict[store.SessionKey, SessionState] = {}
        last_seq: dict[store.SessionKey, int] = {}
        for delivered in run:
            event = delivered.event
            payload = event.payload
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
            states[key] = state
            last_seq[key] = delivered.seq
            _emit(ctx, delivered, candidates, declared(statements))
        await store.save_sessions(
            cur, {key: (states[key].to_json(), seq) for key, seq in last_seq.items()})

    async def on_emails(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                        ctx: ApplyContext) -> None:
        for delivered in run:
            _emit(ctx, delivered, signature_candidates(delivered.event.payload))

    async def on_provider_syncs(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                                ctx: ApplyContext) -> None:
        for delivered in run:
            event = delivered.event
            _emit(ctx, delivered, provider_candidates(event.payload, event.occurred_at))

    handlers = {
        TurnRecorded: on_turns,
        EmailObserved: on_emails,
        ProviderProfileSynced: on_provider_syncs,
    }
    emits = (CandidateEmitted, FacetUpdated)
