"""What the user says in so many words: held from one statement, replaced by a later one,
and the identity rules (corroborated signatures, no Active identity from weak cues)."""

from __future__ import annotations

from services.stability_detector.scoring import (
    ACTIVE,
    DROPPED,
    PROVISIONAL,
    SET_BY_USER,
    STATED,
    Command,
    Evidence,
    compute_cache,
)
from services.stability_detector.settings import DAY, LearningSettings

SETTINGS = LearningSettings()
T0 = 1_700_000_000.0


def said(value: str, seq: int, stance: str = "standing", key: str = "language",
         cls: str = "style", at: float | None = None) -> Evidence:
    return Evidence(f"e{seq}", cls, key, value, "explicit", T0 + seq if at is None else at,
                    0.9, seq, ({"type": "turn", "session_id": "s", "turn_id": f"t{seq}"},),
                    stance, f"sentence {seq}")


def seen(value: str, seq: int, cue: str, key: str = "name", cls: str = "identity",
         event: str | None = None) -> Evidence:
    return Evidence(event or f"e{seq}", cls, key, value, cue, T0 + seq, 0.8, seq,
                    ({"type": "email_message", "message_id": f"<m{seq}>"},))


def cache(evidence: list[Evidence], commands: list[Command] = (), as_of: float = T0 + 100
          ) -> dict[tuple[str, str], object]:
    return compute_cache(evidence, list(commands), as_of, SETTINGS)  # type: ignore[return-value]


def row(evidence: list[Evidence], key: tuple[str, str] = ("style", "language"),
        commands: list[Command] = (), as_of: float = T0 + 100) -> object:
    return compute_cache(evidence, list(commands), as_of, SETTINGS)[key]


def test_one_standing_statement_is_active_and_stated() -> None:
    r = row([said("de", 1)])
    assert (r.value, r.state, r.origin) == ("de", ACTIVE, STATED)  # type: ignore[attr-defined]
    assert r.stability < SETTINGS.tau_active  # type: ignore[attr-defined] # held, not scored


def test_a_one_off_request_stays_evidence() -> None:
    r = row([said("terse", 1, "one_off", key="verbosity")], ("style", "verbosity"))
    assert r.state == PROVISIONAL  # type: ignore[attr-defined]


def test_a_later_statement_replaces_an_earlier_one_at_once() -> None:
    evidence = [said("de", 1, "declared"), said("de", 2), said("de", 3), said("en", 4)]
    r = row(evidence)
    assert (r.value, r.state, r.origin) == ("en", ACTIVE, STATED)  # type: ignore[attr-defined]


def test_a_declaration_is_set_by_the_user_and_survives_later_learned_evidence() -> None:
    evidence = [said("terse", 1, "declared", key="verbosity")] + [
        Evidence(f"b{i}", "style", "verbosity", "detailed", "behavioral", T0 + 10 + i, 0.7,
                 10 + i) for i in range(20)]
    r = row(evidence, ("style", "verbosity"))
    assert (r.value, r.origin) == ("terse", SET_BY_USER)  # type: ignore[attr-defined]


def test_a_plain_statement_gives_way_to_stronger_later_evidence() -> None:
    evidence = [said("terse", 1, key="verbosity")] + [
        Evidence(f"x{i}", "style", "verbosity", "detailed", "explicit", T0 + 10 + i, 0.9,
                 10 + i) for i in range(3)]
    r = row(evidence, ("style", "verbosity"))
    assert (r.value, r.state, r.origin) == ("detailed", ACTIVE, "learned")  # type: ignore[attr-defined]


def test_a_statement_after_a_pin_replaces_the_pinned_value() -> None:
    pin = Command("update", T0 + 2, 2, "style", "language", "de")
    r = row([said("en", 3)], commands=[pin])
    assert (r.value, r.state, r.user_state) == ("en", ACTIVE, "auto")  # type: ignore[attr-defined]


def test_a_forget_blocks_a_plain_statement_but_not_a_declaration() -> None:
    forget = Command("forget", T0 + 2, 2, "style", "language")
    assert row([said("fr", 3)], commands=[forget]).state == DROPPED  # type: ignore[attr-defined]
    r = row([said("fr", 3, "declared")], commands=[forget])
    assert (r.value, r.state, r.origin) == ("fr", ACTIVE, SET_BY_USER)  # type: ignore[attr-defined]


def test_a_confirmation_sets_and_a_denial_drops() -> None:
    weak = [Evidence("b1", "style", "format", "tables", "behavioral", T0 + 1, 0.7, 1)]
    r = row([*weak, said("tables", 2, "confirmed", key="format")], ("style", "format"))
    assert (r.state, r.origin) == (ACTIVE, SET_BY_USER)  # type: ignore[attr-defined]
    rows = cache([*weak, said("tables", 2, "denied", key="format")])
    assert ("style", "format") not in rows


def test_one_signature_is_provisional_two_are_active() -> None:
    one = [seen("Priya Raman", 1, "structural")]
    assert row(one, ("identity", "name")).state == PROVISIONAL  # type: ignore[attr-defined]
    two = [*one, seen("Priya Raman", 2, "structural")]
    assert row(two, ("identity", "name")).state == ACTIVE  # type: ignore[attr-defined]


def test_identity_and_vetoes_are_never_active_from_weak_cues_alone() -> None:
    weak = [Evidence(f"b{i}", "veto", "format=nested-bullets", "banned", "behavioral",
                     T0 + i, 0.7, i) for i in range(30)]
    r = row(weak, ("veto", "format=nested-bullets"))
    assert r.state == PROVISIONAL  # type: ignore[attr-defined]
    # the one-signature floor lifts a Candidate only: once decay drops it, it is gone
    assert ("identity", "name") not in cache([seen("Priya", 1, "structural")],
                                             as_of=T0 + 400 * DAY)


def test_explain_names_the_statement_that_replaced_a_value() -> None:
    from services.stability_detector.explain import explain

    evidence = [said("de", 1, "declared"), said("de", 2), said("en", 3)]
    doc = explain(("style", "language"), evidence, [], T0 + 100, T0 + 100, SETTINGS)
    assert doc is not None
    assert (doc["value"], doc["origin"], doc["next_change_at"]) == ("en", STATED, None)
    assert (doc["statement"]["value"], doc["statement"]["sentence"]) == ("en", "sentence 3")
    assert [(r["value"], r["stance"]) for r in doc["replaced"]] == [("de", "standing")]
