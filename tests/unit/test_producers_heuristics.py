"""Producer 3, turn heuristics (services/producers/heuristics.py).

Vectors from issue 4 and the anchor's tests (section 1.4 of the openhuman reference), plus the
defects we must not repeat: substring matching ("less" inside "unless"), a cooldown on the wall
clock (a replay would emit everything at once), and state that a redelivery double-counts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from habitus.events.ingest import TurnRecorded
from habitus.vocabulary import check
from services.producers.candidates import Candidate
from services.producers.heuristics import (
    _CORRECTIONS,
    CORRECTION_WORDS,
    EDIT_CONFIDENCE,
    MAX_TURNS,
    SessionState,
    _corrections_of,
    corrections_in,
    observe_turn,
)
from tests.unit.test_producers_candidates import assert_valid, facets

T0 = 1_700_000_000.0


def _turn(
    n: int,
    user: str = "ok",
    assistant: str = "a reply",
    *,
    at: float | None = None,
    gap: float | None = None,
    session: str = "s1",
) -> TurnRecorded:
    """Turn `n` of a session: the user writes `gap` seconds after the previous reply (no
    previous reply when `gap` is None), at `at` (default: n minutes in)."""
    user_at = T0 + 60.0 * n if at is None else at
    return TurnRecorded(
        session_id=session,
        turn_id=f"t{n}",
        channel="web",
        user_message=user,
        assistant_message=assistant,
        user_at=user_at,
        assistant_at=user_at + 2.0,
        previous_assistant_at=None if gap is None else user_at - gap,
    )


def _feed(
    turns: Sequence[TurnRecorded], state: SessionState | None = None
) -> tuple[SessionState, list[list[Candidate]]]:
    state = state if state is not None else SessionState()
    emitted: list[list[Candidate]] = []
    for p in turns:
        state, out = observe_turn(state, p)
        emitted.append(assert_valid(out))
    return state, emitted


def _flat(emitted: list[list[Candidate]]) -> list[Candidate]:
    return [c for out in emitted for c in out]


# --------------------------------------------------------------------------- EditWindow


def test_shorter_10s_after_the_reply_is_terse() -> None:
    state, out = observe_turn(SessionState(), _turn(1, "shorter please", gap=10))
    [c] = assert_valid(out)
    assert (c.facet_class, c.key, c.value) == ("style", "verbosity", "terse")
    assert c.cue_family == "behavioral"
    assert c.confidence == EDIT_CONFIDENCE == 0.70
    assert c.producer == "edit_window"
    assert c.evidence == ({"type": "turn", "session_id": "s1", "turn_id": "t1"},)
    assert c.observed_at == T0 + 60.0
    assert state.corrections == {"verbosity=terse": 1}
    assert state.cooldowns == {"verbosity=terse": T0 + 60.0}


@pytest.mark.parametrize("gap", [60.0, 30.0, -1.0, None])
def test_outside_the_window_nothing(gap: float | None) -> None:
    if gap is not None and gap < 0:
        # the user cannot answer before the reply: a clock skew, not a correction
        p = _turn(1, "shorter please").model_copy(update={"previous_assistant_at": T0 + 60.0 + 5.0})
    else:
        p = _turn(1, "shorter please", gap=gap)
    state, out = observe_turn(SessionState(), p)
    assert out == []
    assert state.corrections == {}


def test_just_inside_the_window() -> None:
    _, out = observe_turn(SessionState(), _turn(1, "shorter please", gap=29.999))
    assert facets(out) == [("style", "verbosity", "terse")]
    _, out = observe_turn(SessionState(), _turn(1, "shorter please", gap=0.0))
    assert facets(out) == [("style", "verbosity", "terse")]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("shorter please", [("verbosity", "terse")]),
        ("Make it SHORTER.", [("verbosity", "terse")]),
        ("way too long", [("verbosity", "terse")]),
        ("too verbose!", [("verbosity", "terse")]),
        ("that was too much detail", [("verbosity", "terse")]),
        ("be brief", [("verbosity", "terse")]),
        ("less", [("verbosity", "terse")]),
        ("less text please", [("verbosity", "terse")]),
        ("just code", [("code", "code-first")]),
        ("just give me the code", [("code", "code-first")]),
        ("code only", [("code", "code-first")]),
        ("not bullets please", [("format", "prose")]),
        ("no bullet points", [("format", "prose")]),
        ("please don't use bullets", [("format", "prose")]),
        ("write it in prose", [("format", "prose")]),
        ("more detail", [("verbosity", "detailed")]),
        ("more details please", [("verbosity", "detailed")]),
        ("more verbose", [("verbosity", "detailed")]),
        ("can you elaborate?", [("verbosity", "detailed")]),
        ("too long, and no bullets", [("verbosity", "terse"), ("format", "prose")]),
        # word-bounded: the anchor's substring matching found all of these
        ("unless you think otherwise", []),
        ("regardless, continue", []),
        ("shortership is not a word", []),
        ("just codes of conduct?", []),
        ("bulletsproof", []),
        # "less" as a comparison, not a request
        ("less than 5 items", []),
        ("more or less right", []),
        # negated or ambiguous
        ("don't make it shorter", []),
        ("no more detail needed", []),
        ("why not bullets?", []),
        ("less fluff but more detail", []),
        ("", []),
    ],
)
def test_corrections(message: str, expected: list[tuple[str, str]]) -> None:
    assert corrections_in(message) == expected


_FRAGMENTS = ["shorter", "too long", "be brief", "keep it short", "tl;dr", "less", "less text",
              "more detail", "elaborate", "too short", "expand on", "go deeper", "just code",
              "code only", "no bullets", "in prose", "as a paragraph", "don't", "not", "please",
              "unless", "the", "fix the parser", "ok", ".", "!", "  ", "make it longer"]


@hsettings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=6)), max_size=8))
def test_the_prefilter_drops_only_messages_no_pattern_matches(parts: list[str]) -> None:
    """The one-scan alternation may only skip what every pattern would also find nothing in."""
    message = " ".join(parts)
    text = " ".join(message.replace("\u2019", "'").lower().split())
    if len(message) <= 280:
        assert corrections_in(message) == _corrections_of(text)


def test_every_correction_pattern_needs_one_of_the_prefilters_words() -> None:
    """The substring prefilter dismisses a message with none of CORRECTION_WORDS: a pattern
    that could match without one of them would be skipped."""
    for pattern, _, _ in _CORRECTIONS:
        assert any(word in pattern.pattern for word in CORRECTION_WORDS), pattern.pattern


def test_a_long_message_is_a_request_not_a_correction() -> None:
    assert corrections_in("shorter " + "x" * 400) == []


def test_cooldown_runs_on_event_time() -> None:
    s, out1 = observe_turn(SessionState(), _turn(1, "shorter please", at=T0, gap=10))
    s, out2 = observe_turn(s, _turn(2, "shorter please", at=T0 + 100, gap=10))
    s, out3 = observe_turn(s, _turn(3, "make it shorter", at=T0 + 400, gap=10))
    assert facets(out1) == [("style", "verbosity", "terse")]
    assert out2 == []
    assert facets(out3)[0] == ("style", "verbosity", "terse")
    assert s.cooldowns["verbosity=terse"] == T0 + 400


def test_cooldown_is_per_value() -> None:
    s, _ = observe_turn(SessionState(), _turn(1, "shorter please", at=T0, gap=5))
    s, out = observe_turn(s, _turn(2, "more detail", at=T0 + 20, gap=5))
    assert facets(out) == [("style", "verbosity", "detailed")]
    s, out = observe_turn(s, _turn(3, "just code", at=T0 + 40, gap=5))
    assert facets(out) == [("style", "code", "code-first")]


def test_a_late_older_turn_is_inside_the_cooldown_too() -> None:
    s, _ = observe_turn(SessionState(), _turn(5, "shorter please", at=T0 + 1000, gap=5))
    s, out = observe_turn(s, _turn(4, "shorter please", at=T0 + 900, gap=5))
    assert out == []
    assert s.cooldowns["verbosity=terse"] == T0 + 1000


def test_replay_gives_the_same_candidates() -> None:
    turns = [_turn(i, "shorter please", at=T0 + 50 * i, gap=5) for i in range(12)]
    _, first = _feed(turns)
    _, second = _feed(turns)
    assert first == second
    # turns every 50 s: the edit window fires at 0 s and 300 s, the veto on the third turn
    edits = [i for i, out in enumerate(first) if any(c.producer == "edit_window" for c in out)]
    vetoes = [i for i, out in enumerate(first) if any(c.facet_class == "veto" for c in out)]
    assert (edits, vetoes) == ([0, 6], [2])


# --------------------------------------------------------------------------- CorrectionRepeat


def test_three_not_bullets_give_one_veto() -> None:
    turns = [_turn(i, "not bullets please", at=T0 + 10 * i, gap=5) for i in range(1, 6)]
    state, emitted = _feed(turns)
    assert facets(emitted[0]) == [("style", "format", "prose")]
    assert emitted[1] == []
    [veto] = emitted[2]
    assert (veto.facet_class, veto.key, veto.value) == ("veto", "format=nested-bullets", "banned")
    assert veto.cue_family == "behavioral"
    assert veto.confidence == 0.75
    assert veto.producer == "correction_repeat"
    assert veto.evidence == ({"type": "turn", "session_id": "s1", "turn_id": "t3"},)
    assert emitted[3] == [] and emitted[4] == []
    assert state.corrections == {"format=prose": 5}
    assert "veto:format=nested-bullets=banned" in state.fired


@pytest.mark.parametrize(
    ("message", "veto"),
    [
        ("shorter please", [("style=long-replies", "banned", 0.70)]),
        ("not bullets please", [("format=nested-bullets", "banned", 0.75)]),
        # a veto the vocabulary cannot name is not made up from the correction's own words
        ("more detail", []),
        ("just code", []),
    ],
)
def test_veto_mapping(message: str, veto: list[tuple[str, str, float]]) -> None:
    turns = [_turn(i, message, at=T0 + 10 * i, gap=5) for i in range(1, 4)]
    _, emitted = _feed(turns)
    vetoes = [c for c in _flat(emitted) if c.facet_class == "veto"]
    assert [(c.key, c.value, c.confidence) for c in vetoes] == veto
    assert all(check("veto", c.key, c.value) is None for c in vetoes)


def test_corrections_outside_the_window_do_not_count() -> None:
    turns = [
        _turn(1, "not bullets please", gap=5),
        _turn(2, "not bullets please", gap=45),
        _turn(3, "not bullets please", gap=5),
        _turn(4, "not bullets please"),
    ]
    state, emitted = _feed(turns)
    assert not any(c.facet_class == "veto" for c in _flat(emitted))
    assert state.corrections == {"format=prose": 2}


def test_different_corrections_count_apart() -> None:
    msgs = ["not bullets please", "shorter", "not bullets please", "shorter", "no bullets"]
    turns = [_turn(i, m, at=T0 + 10 * i, gap=5) for i, m in enumerate(msgs)]
    state, emitted = _feed(turns)
    assert state.corrections == {"format=prose": 3, "verbosity=terse": 2}
    vetoes = [c for c in _flat(emitted) if c.facet_class == "veto"]
    assert [(c.key, c.value) for c in vetoes] == [("format=nested-bullets", "banned")]
    assert vetoes[0].evidence[0]["turn_id"] == "t4"


# --------------------------------------------------------------------------- LengthRatio


def _ratio_turns(pairs: Sequence[tuple[int, int]], start: int = 0) -> list[TurnRecorded]:
    return [_turn(start + i, "u" * u, "a" * a) for i, (u, a) in enumerate(pairs)]


def test_shrinking_user_messages_give_terse_once() -> None:
    turns = _ratio_turns([(200, 100)] * 15 + [(5, 100)] * 15 + [(5, 100)] * 10)
    state, emitted = _feed(turns)
    assert all(out == [] for out in emitted[:29])
    [c] = emitted[29]
    assert (c.facet_class, c.key, c.value) == ("style", "verbosity", "terse")
    assert c.cue_family == "behavioral"
    assert c.confidence == 0.65
    assert c.producer == "length_ratio"
    assert c.evidence == (
        {"type": "turn_window", "session_id": "s1", "from_turn_id": "t0", "to_turn_id": "t29"},
    )
    assert all(out == [] for out in emitted[30:])
    assert "length_ratio:verbosity=terse" in state.fired


def test_fewer_than_30_turns_nothing() -> None:
    _, emitted = _feed(_ratio_turns([(200, 100)] * 15 + [(5, 100)] * 14))
    assert _flat(emitted) == []


def test_long_user_messages_say_nothing_about_answer_length() -> None:
    _, emitted = _feed(_ratio_turns([(90, 100)] * 45))
    assert _flat(emitted) == []


def test_compressed_needs_a_long_earlier_window() -> None:
    _, emitted = _feed(_ratio_turns([(40, 100)] * 15 + [(5, 100)] * 15))
    assert _flat(emitted) == []


def test_zero_length_assistant_counts_zero() -> None:
    # earlier: 15 turns at 2.0 (> 0.5); recent: no assistant reply at all -> ratio 0
    _, emitted = _feed(_ratio_turns([(200, 100)] * 15 + [(50, 0)] * 15))
    assert [c.value for c in _flat(emitted)] == ["terse"]


def test_shrinking_fires_once_however_long_the_session() -> None:
    pairs = [(200, 100)] * 15 + [(5, 100)] * 15 + [(100, 100)] * 30 + [(5, 100)] * 30
    _, emitted = _feed(_ratio_turns(pairs))
    assert [c.value for c in _flat(emitted)] == ["terse"]


# --------------------------------------------------------------------------- state


def test_state_json_round_trip() -> None:
    turns = [_turn(i, "not bullets please", at=T0 + 10 * i, gap=5) for i in range(35)]
    state, _ = _feed(turns)
    doc = state.to_json()
    assert json.loads(json.dumps(doc)) == doc
    back = SessionState.from_json(json.loads(json.dumps(doc)))
    assert back == state
    assert back.to_json() == doc


def test_from_json_none_and_garbage_give_empty_parts() -> None:
    assert SessionState.from_json(None) == SessionState()
    assert SessionState.from_json({}) == SessionState()
    junk: dict[str, Any] = {
        "turns": [["t1", 1, 2], ["t2", "x", 2], "t3", ["t4", True, 1]],
        "fired": ["a", 3],
        "cooldowns": {"k=v": 5, "x": "y"},
        "corrections": {"k=v": 2, "j": 1.5},
    }
    assert SessionState.from_json(junk) == SessionState(
        turns=[("t1", 1, 2)], fired={"a"}, cooldowns={"k=v": 5.0}, corrections={"k=v": 2}
    )
    assert SessionState.from_json({"turns": "nope", "fired": {}, "cooldowns": []}) == (
        SessionState()
    )


def test_from_json_keeps_at_most_the_last_100_turns() -> None:
    doc = {"turns": [[f"t{i}", 1, 1] for i in range(150)]}
    state = SessionState.from_json(doc)
    assert len(state.turns) == MAX_TURNS
    assert state.turns[0][0] == "t50"


def test_observe_turn_does_not_mutate_its_input() -> None:
    state, _ = _feed([_turn(i, "not bullets please", at=T0 + 10 * i, gap=5) for i in range(2)])
    before = copy.deepcopy(state)
    new, out = observe_turn(state, _turn(9, "not bullets please", at=T0 + 500, gap=5))
    assert state == before
    assert new != state and out
    assert new.turns is not state.turns and new.fired is not state.fired
    assert new.cooldowns is not state.cooldowns and new.corrections is not state.corrections


def test_a_redelivered_turn_changes_nothing() -> None:
    p = _turn(1, "not bullets please", gap=5)
    s1, out1 = observe_turn(SessionState(), p)
    s2, out2 = observe_turn(s1, p)
    assert out1 and out2 == []
    assert s2 == s1
    assert s2.corrections == {"format=prose": 1}


def test_turns_are_capped_at_100() -> None:
    state, _ = _feed(_ratio_turns([(1, 1)] * 130))
    assert len(state.turns) == MAX_TURNS
    assert state.turns[0][0] == "t30" and state.turns[-1][0] == "t129"


def test_sessions_do_not_share_state() -> None:
    s_a, _ = observe_turn(SessionState(), _turn(1, "not bullets", gap=5, session="a"))
    s_b, out = observe_turn(SessionState(), _turn(1, "not bullets", gap=5, session="b"))
    assert s_a.corrections == s_b.corrections == {"format=prose": 1}
    assert out[0].evidence[0]["session_id"] == "b"


_turn_strategy = st.builds(
    lambda n, user, assistant, user_at, gap: TurnRecorded(
        session_id="s1",
        turn_id=f"t{n}",
        channel="web",
        user_message=user,
        assistant_message=assistant,
        user_at=user_at,
        assistant_at=user_at,
        previous_assistant_at=None if gap is None else max(0.0, user_at - gap),
    ),
    st.integers(min_value=0, max_value=400),
    st.one_of(
        st.text(max_size=300),
        st.sampled_from(["shorter please", "not bullets", "just code", "more detail", "less"]),
    ),
    st.text(max_size=300),
    st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False),
    st.one_of(st.none(), st.floats(min_value=-100, max_value=100, allow_nan=False)),
)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_turn_strategy, max_size=160))
def test_observe_turn_never_raises_and_keeps_at_most_100_turns(
    turns: list[TurnRecorded],
) -> None:
    state = SessionState()
    for p in turns:
        before = state.to_json()
        state_after, out = observe_turn(state, p)
        assert state.to_json() == before
        assert_valid(out)
        assert len(state_after.turns) <= MAX_TURNS
        assert SessionState.from_json(json.loads(json.dumps(state_after.to_json()))) == (
            state_after
        )
        state = state_after
    fired = [c for c in state.fired if c.startswith("veto:")]
    assert len(fired) == len(set(fired))
