"""What the habits service keeps of a habit in Postgres (services/habits/store.py): the words
in its state sealed with the user's column key, the rest plain, and the habit read back as it
was; the tenant's own, and a deployment without encryption, unsealed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from habitus.crypto import Keyring, Shredded
from habitus.crypto.columns import COLUMNS, is_sealed
from habitus.events.domain import HabitStatus, ReviewStatus
from habitus.ids import TENANT_WIDE
from services.habits.analyze import habit_id_for
from services.habits.identity import identity, sha256
from services.habits.ledger import Habit, Support
from services.habits.store import SEALED_JSON, SEALED_TEXT, Sealer, open_state
from tests.support.keyrings import own_column_keyring

WORDS = ("When Ottoline asks about Larkspur", "Answer in two sentences")


@pytest.fixture
def keyring(tmp_path: Path) -> Iterator[Keyring]:
    """The process's column sealer with a keyring of the test's own (as it was, after)."""
    with own_column_keyring(tmp_path) as ring:
        yield ring


def habit() -> Habit:
    """An approved habit, with evidence: every field of its state filled."""
    made = Habit(
        habit_id="h_1", condition=WORDS[0], behavior=WORDS[1], polarity=1,
        status=HabitStatus.ACTIVE, review_status=ReviewStatus.ACCEPTED_ACTIVE,
        confidence_bp=9000, origin="declared", created_at=1.0, updated_at=2.0,
        support=(Support("ev-1", "2026-12-01"),),
        evidence=({"type": "turn", "session_id": "s", "turn_id": "Larkspur-notes"},),
        law_hash="law", blocked_by=("h_2",))
    return dataclasses.replace(made, approved_identity=made.identity).sealed()


def test_a_habits_words_are_sealed_and_the_rest_of_its_state_stays_plain(
        keyring: Keyring) -> None:
    h = habit()
    state = Sealer("acme", "dana").state(h.state())
    text = json.dumps(state)
    assert not [w for w in ("Ottoline", "Larkspur", "two sentences", h.identity) if w in text]
    assert all(is_sealed(state[k]) for k in (*SEALED_TEXT, *SEALED_JSON))
    # what is no one's words stays queryable JSON
    assert (state["habit_id"], state["status"], state["review_status"]) == (
        "h_1", "active", "accepted_active")
    assert list(state["support"]) == [{"ref": "ev-1", "day": "2026-12-01", "polarity": 1,
                                 "confidence_bp": 5000}]
    assert state["blocked_by"] == ("h_2",)
    # deterministic: the same wording seals to the same value (the audit's before and after)
    assert Sealer("acme", "dana").state(h.state()) == state
    back = Habit.from_state(open_state("acme", "dana", json.loads(json.dumps(state))))
    assert back == h and back.checksum == h.checksum


def test_the_tenants_own_a_plain_deployment_and_rows_stored_before_are_not_sealed(
        keyring: Keyring) -> None:
    h = habit()
    assert Sealer("acme", TENANT_WIDE).state(h.state()) == h.state()
    stored_before = json.loads(json.dumps(h.state()))
    assert Habit.from_state(open_state("acme", "dana", stored_before)) == h
    COLUMNS.use_keyring(None)
    assert Sealer("acme", "dana").state(h.state()) == h.state()


def test_a_habit_without_evidence_or_approval_keeps_them_empty(keyring: Keyring) -> None:
    h = dataclasses.replace(habit(), evidence=(), approved_identity=None).sealed()
    state = Sealer("acme", "dana").state(h.state())
    assert (state["evidence"], state["approved_identity"]) == ((), None)
    assert Habit.from_state(open_state("acme", "dana", state)) == h


def test_an_erased_users_state_no_longer_opens(keyring: Keyring) -> None:
    state = Sealer("acme", "dana").state(habit().state())
    keyring.destroy("acme", "dana")
    with pytest.raises(Shredded):
        open_state("acme", "dana", state)


def test_a_habits_id_is_derived_through_the_users_key(keyring: Keyring) -> None:
    """Stable for the user (a retried batch suggests the same id), but no bare hash of the
    wording, which would confirm a guess of it in a copy of the rows after the erasure."""
    plain = "h_" + sha256(f"{identity(*WORDS, 1)}:0")[:20]
    dana = habit_id_for("acme", "dana", *WORDS, 1, set())
    assert dana == habit_id_for("acme", "dana", *WORDS, 1, set()) != plain
    assert habit_id_for("acme", "sam", *WORDS, 1, set()) not in (dana, plain)
    assert habit_id_for("acme", "dana", *WORDS, 1, {dana}) != dana  # taken: the next one
    COLUMNS.use_keyring(None)
    assert habit_id_for("acme", "dana", *WORDS, 1, set()) == plain
