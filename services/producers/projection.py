"""The producers' projection: ingest events in, `CandidateEmitted` out.

The deterministic producers are pure functions (provider, signature, heuristics, statements,
reflection); this projection feeds them in stream order, keeps the heuristics' per-session
state (and an agent's pending confirmation question) in Postgres in the same transaction as
the checkpoint, and emits each candidate with an id derived from the ingest event, the producer
and the facet: a redelivered or replayed ingest event yields the same ids, which the stream and
the learning projection drop. The user messages of a whole batch are read together, as soon as
the runner has decoded the batch (`services.producers.reading.ahead`): in a worker thread, or
in processes of their own under the service (`services.producers.reading.apart`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncCursor

from habitus.events import Event
from habitus.events.causation import caused
from habitus.events.domain import CandidateEmitted
from habitus.events.ingest import EmailObserved, ProviderProfileSynced, TurnRecorded
from habitus.projection import ApplyContext, Delivered, Projection
from services.producers import store
from services.producers.candidates import EDIT_WINDOW, Candidate
from services.producers.heuristics import SessionState, observe_turn
from services.producers.provider import provider_candidates
from services.producers.reading.ahead import ReadAhead, in_thread
from services.producers.reading.reader import StatementReader
from services.producers.reflection import reflection_candidates, without_restated
from services.producers.session_doc import read_session
from services.producers.signature import signature_candidates
from services.producers.stated import (
    Proposal,
    answer_candidate,
    answer_to,
    proposal_from,
    question_in,
    statement_candidates,
)

PRODUCER = "producers"


def candidate_event(cause: Event[Any], candidate: Candidate) -> Event[Any]:
    return caused(cause, CandidateEmitted.model_validate(candidate.as_payload()),
                  producer=PRODUCER, event_id=candidate.event_id(cause.event_id))


def _texts(turn: TurnRecorded) -> list[str]:
    """What is read of a turn: the user's message, and the agent's confirmation question."""
    question = question_in(turn.assistant_message)
    return [turn.user_message] if question is None else [turn.user_message, question]


def _emit(ctx: ApplyContext, delivered: Delivered, candidates: list[Candidate]) -> None:
    for candidate in candidates:
        ctx.emit(candidate_event(delivered.event, candidate), delivered)


class ProducersProjection(Projection):
    name = "producers.candidates"
    schema = store.SCHEMA
    tables = store.TABLES

    def __init__(self, reader: StatementReader | ReadAhead | None = None):
        self._reading = in_thread(reader) if isinstance(reader, StatementReader) else reader

    @property
    def reading(self) -> ReadAhead:
        if self._reading is None:  # the bank is encoded on first use, not at import
            self._reading = in_thread(StatementReader())
        return self._reading

    def ahead(self, batch: Sequence[Delivered]) -> None:
        """Start reading the batch's turns while the batch before it is applied."""
        self.reading.start([text for d in batch if isinstance(d.event.payload, TurnRecorded)
                            for text in _texts(d.event.payload)])

    async def on_turns(self, cur: AsyncCursor[Any], run: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        """The heuristics keep per-session state: loaded once for the run, saved once. The
        statements were read ahead (`ahead`), or are read while the states load."""
        texts = [_texts(d.event.payload) for d in run]
        reading = asyncio.ensure_future(self.reading.read([t for said in texts for t in said]))
        try:
            sessions = await store.load_sessions(cur, (
                (d.event.tenant_id, d.event.user_id, d.event.payload.session_id) for d in run))
        except BaseException:
            reading.cancel()
            raise
        read = iter(await reading)
        states: dict[store.SessionKey, SessionState] = {}
        proposals: dict[store.SessionKey, Proposal | None] = {}
        last_seq: dict[store.SessionKey, int] = {}
        for delivered, said in zip(run, texts, strict=True):
            statements = next(read)
            question = next(read) if len(said) > 1 else None  # what the agent asked, read
            event = delivered.event
            payload = event.payload
            key = (event.tenant_id, event.user_id, payload.session_id)
            if key in states:
                state, proposal = states[key], proposals[key]
            else:
                state, proposal = read_session(sessions.get(key))
            state, candidates = observe_turn(state, payload)
            where = {"session_id": payload.session_id, "turn_id": payload.turn_id,
                     "observed_at": payload.user_at}
            answer = answer_to(proposal, payload.user_message)
            if answer is not None and proposal is not None:
                candidates.append(answer_candidate(proposal, answer, payload.user_message,
                                                   **where))
            stated = {(s.facet_class, s.key) for s in statements}
            # the same words read twice: the statement (with its stance) is the reading
            candidates = [c for c in candidates if not (
                c.producer == EDIT_WINDOW and (c.facet_class, c.key) in stated)]
            candidates += statement_candidates(statements, **where)
            candidates += without_restated(
                reflection_candidates(payload.user_message, **where),
                [s.sentence for s in statements], [s.value for s in statements])
            states[key] = state
            proposals[key] = proposal_from(question) if question is not None else None
            last_seq[key] = delivered.seq
            _emit(ctx, delivered, candidates)
        await store.save_sessions(cur, {
            key: ({**states[key].to_json(), "proposal": proposals[key]}, seq)
            for key, seq in last_seq.items()})

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
    emits = (CandidateEmitted,)

