"""A stored session document reads the same by the strict path as by the forgiving one."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from pydantic_core import to_json

from services.producers.heuristics import MAX_TURNS, SessionState
from services.producers.session_doc import read_forgiving, read_session

_INT = st.integers(-(2**63), 2**63 - 1)
_NUMBER = st.one_of(_INT, st.floats(allow_nan=False), st.booleans(), st.none())
_TEXT = st.text(max_size=12)
_TURN = st.one_of(
    st.tuples(_TEXT, _INT, _INT).map(list),  # well-formed
    st.lists(st.one_of(_TEXT, _NUMBER), max_size=4),  # anything else a list may hold
)
_DOCS = st.fixed_dictionaries({}, optional={
    "turns": st.one_of(st.lists(_TURN, max_size=MAX_TURNS + 5), _NUMBER, _TEXT),
    "fired": st.one_of(st.lists(st.one_of(_TEXT, _NUMBER), max_size=4), _TEXT),
    "cooldowns": st.one_of(st.dictionaries(_TEXT, _NUMBER, max_size=4), st.lists(_INT)),
    "corrections": st.one_of(st.dictionaries(_TEXT, _NUMBER, max_size=4), _NUMBER),
    "proposal": st.one_of(st.lists(st.one_of(_TEXT, _NUMBER), max_size=4), _NUMBER, _TEXT),
    "unknown": _NUMBER,
})
_WRITTEN = st.builds(
    lambda turns, fired, cooldowns, corrections, proposal: {
        **SessionState(turns=turns, fired=fired, cooldowns=cooldowns,
                       corrections=corrections).to_json(), "proposal": proposal},
    st.lists(st.tuples(_TEXT, st.integers(0, 10**6), st.integers(0, 10**6)),
             max_size=MAX_TURNS),
    st.sets(_TEXT, max_size=4),
    st.dictionaries(_TEXT, st.floats(0, 2e9), max_size=4),
    st.dictionaries(_TEXT, st.integers(0, 9), max_size=4),
    st.one_of(st.none(), st.tuples(_TEXT, _TEXT, _TEXT)),
)


@given(st.one_of(_WRITTEN, _DOCS, _NUMBER, st.lists(_INT, max_size=3)))
# what a lax reading would take and the forgiving one drops: a bool or a whole float or a
# numeric string as a count, a bool or a numeric string as a time
@example({"turns": [["t1", True, 5]]})
@example({"turns": [["t1", 1.0, 5]]})
@example({"turns": [["t1", "12", 5]]})
@example({"cooldowns": {"k=v": True}})
@example({"cooldowns": {"k=v": "1790000000"}})
@example({"corrections": {"k=v": 2.0}})
@example({"proposal": ["style", "verbosity", 3]})
def test_the_strict_reading_equals_the_forgiving_one(doc: Any) -> None:
    text = json.dumps(doc)
    assert read_session(text) == read_forgiving(text)


@given(_WRITTEN)
def test_what_the_projection_writes_reads_back(doc: dict[str, Any]) -> None:
    state, proposal = read_session(to_json(doc).decode())
    assert {**state.to_json(), "proposal": list(proposal) if proposal else None} == {
        **doc, "proposal": list(doc["proposal"]) if doc["proposal"] else None}


def test_a_damaged_document_keeps_what_is_well_formed() -> None:
    text = json.dumps({"turns": [["t1", 12, 300], ["t2", True, 5], ["t3", 40, 180]],
                       "fired": ["length_ratio:verbosity=terse", 7],
                       "cooldowns": {"verbosity=terse": 1_790_000_000, "x": "soon"},
                       "proposal": ["style", "verbosity"]})
    state, proposal = read_session(text)
    assert state.turns == [("t1", 12, 300), ("t3", 40, 180)]
    assert state.fired == {"length_ratio:verbosity=terse"}
    assert state.cooldowns == {"verbosity=terse": 1_790_000_000.0}
    assert proposal is None


def test_a_new_session_and_text_that_is_no_json_start_empty() -> None:
    assert read_session(None) == (SessionState(), None)
    assert read_session("{not json") == (SessionState(), None)
