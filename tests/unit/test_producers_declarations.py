"""Standing declarations and the goals they replace (services/producers/declarations.py)."""

from __future__ import annotations

from services.producers.declarations import declared, without_restated
from services.producers.reflection import reflection_candidates
from services.producers.statements import find_statements


def _facts(message: str) -> list[tuple[str, str, str]]:
    return [(s.facet_class, s.key, s.value) for s in declared(find_statements(message))]


def test_only_standing_statements_are_declared() -> None:
    assert _facts("From now on answer in German.") == [("style", "language", "german")]
    assert _facts("answer in German") == []
    assert _facts("Keep your answers short, no preamble.") == [
        ("style", "verbosity", "terse"), ("style", "preamble", "skip")]


def test_within_a_message_the_last_declaration_of_a_key_wins() -> None:
    message = "From now on answer in German. Actually, from now on answer in French."
    assert _facts(message) == [("style", "language", "french")]


def test_a_sentence_understood_as_a_statement_is_not_also_a_goal() -> None:
    message = "Remember that I work on the billing team. I realized I need more sleep."
    goals = reflection_candidates(message, session_id="s", turn_id="t", observed_at=1.0)
    assert len(goals) == 2  # the reflection cue matches both sentences
    kept = without_restated(goals, find_statements(message))
    assert [c.value for c in kept] == ["I realized I need more sleep"]


def test_without_statements_every_goal_stays() -> None:
    goals = reflection_candidates("From now on I want to ship weekly.", session_id="s",
                                  turn_id="t", observed_at=1.0)
    assert without_restated(goals, []) == goals
