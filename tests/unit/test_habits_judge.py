"""The selection judge's payload and answer (services/habits/judge.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.habits.identity import canonical_json
from services.habits.judge import (
    JUDGE_OUTPUT_SCHEMA,
    MAX_CONTEXT_TURN_CHARS,
    MAX_PAYLOAD_CHARS,
    MAX_REQUEST_CHARS,
    MAX_SELECTED,
    REASONS,
    Aliases,
    judge_payload,
    parse_judgment,
)
from services.habits.redaction import REDACTED

IDS = ["0190a1b2-habit-aaaa", "0190a1b2-habit-bbbb", "0190a1b2-habit-cccc"]
HABITS = {
    IDS[0]: ("When I ask for a status report", "Keep it to three bullet points"),
    IDS[1]: ("When I share a draft", "Ask before sending email to the whole team"),
    IDS[2]: ("When reviewing code", "List risks before style nits"),
}


def judgment(alias: str, reason: str = "not_currently_relevant", bp: int = 9000) -> dict[
    str, Any
]:
    return {"id": alias, "applicable": reason == "current_applicability", "confidence_bp": bp,
            "reason": reason}


def answer(*judgments: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 3, "judgments": list(judgments)}


ALIASES = Aliases(IDS)
GOOD = answer(
    judgment("c1", "current_applicability", 8000),
    judgment("c2", "mere_mention", 9500),
    judgment("c3", "current_applicability", 9000),
)


def test_aliases() -> None:
    assert ALIASES.aliases == ("c1", "c2", "c3")
    assert ALIASES.alias(IDS[1]) == "c2" and ALIASES.habit_id("c3") == IDS[2]
    assert len(ALIASES) == 3 and "c1" in ALIASES and IDS[0] not in ALIASES
    with pytest.raises(ValueError):
        Aliases(["a", "b", "a"])
    with pytest.raises(KeyError):
        ALIASES.habit_id("c4")


def test_selection_order() -> None:
    assert parse_judgment(GOOD, ALIASES) == [IDS[2], IDS[0]]


def test_ties_keep_alias_order() -> None:
    data = answer(*(judgment(f"c{i}", "current_applicability", 7000) for i in (3, 1, 2)))
    assert parse_judgment(data, ALIASES) == IDS


def test_low_confidence_is_not_selected_but_others_still_are() -> None:
    data = answer(
        judgment("c1", "current_applicability", 4999),
        judgment("c2", "current_applicability", 5000),
        judgment("c3"),
    )
    assert parse_judgment(data, ALIASES) == [IDS[1]]


def test_nothing_applicable_is_an_empty_selection_not_a_failure() -> None:
    assert parse_judgment(answer(*(judgment(a) for a in ALIASES)), ALIASES) == []
    assert parse_judgment(answer(), Aliases([])) == []


def _replace(index: int, **over: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    data["judgments"][index].update(over)
    return data


@pytest.mark.parametrize(
    "data",
    [
        _replace(0, id="c9"),  # unknown
        _replace(0, id=IDS[0]),  # an original id
        _replace(0, id="C1"),  # rewritten
        _replace(0, id=" c1"),
        _replace(0, id=1),
        answer(GOOD["judgments"][0], GOOD["judgments"][1]),  # c3 missing
        answer(*GOOD["judgments"], GOOD["judgments"][0]),  # c1 twice
        _replace(1, reason="irrelevant"),
        _replace(1, applicable=True),  # applicable without current_applicability
        _replace(0, applicable=False),
        _replace(0, applicable=1),
        _replace(0, confidence_bp=10_001),
        _replace(0, confidence_bp=-1),
        _replace(0, confidence_bp=0.9),
        _replace(0, confidence_bp=True),
        _replace(0, note="x"),
        {**GOOD, "schema_version": 2},
        {**GOOD, "schema_version": "3"},
        {**GOOD, "extra": []},
        {"judgments": GOOD["judgments"]},
        {**GOOD, "judgments": {}},
        GOOD["judgments"],
        None,
    ],
)
def test_malformed_answers_fail_closed(data: Any) -> None:
    assert parse_judgment(data, ALIASES) is None


@given(
    st.lists(
        st.tuples(st.sampled_from(REASONS), st.integers(min_value=0, max_value=10_000)),
        min_size=1, max_size=12,
    )
)
def test_never_more_than_three(rows: list[tuple[str, int]]) -> None:
    aliases = Aliases([f"h{i}" for i in range(len(rows))])
    data = answer(*(judgment(a, r, bp) for a, (r, bp) in zip(aliases, rows, strict=True)))
    selected = parse_judgment(data, aliases)
    assert selected is not None and len(selected) <= MAX_SELECTED
    expected = sorted(
        (-bp, i) for i, (r, bp) in enumerate(rows) if r == "current_applicability" and bp >= 5000
    )
    assert selected == [f"h{i}" for _, i in expected[:MAX_SELECTED]]


def payload_for(
    request: str, context: list[str], candidates: list[tuple[str, str]]
) -> tuple[dict[str, Any], Aliases]:
    return judge_payload(request, context, candidates, Aliases([c for c, _ in candidates]))


def test_payload_shape_and_privacy() -> None:
    candidates = [(h, HABITS[h][0]) for h in IDS]
    payload, used = payload_for(
        "Mail the status report to dana@example.com, notes in /home/dana/report.md",
        ["Earlier: the draft is in /home/dana/draft.txt", "ok"],
        candidates,
    )
    assert used.habit_ids == tuple(IDS)
    assert set(payload) == {"schema_version", "request", "context", "conditions"}
    assert payload["schema_version"] == 3
    assert payload["conditions"] == [
        {"id": f"c{i}", "condition": HABITS[h][0]} for i, h in enumerate(IDS, start=1)
    ]
    text = canonical_json(payload)
    assert "dana@example.com" not in text and "/home/" not in text
    assert REDACTED in payload["request"] and REDACTED in payload["context"][0]
    for habit_id, (_, behavior) in HABITS.items():
        assert habit_id not in text and behavior not in text


def test_request_and_context_are_capped() -> None:
    context = [f"turn {i} " + "x" * 400 for i in range(6)]
    payload, _ = payload_for("r" * 2000, context, [])
    assert payload["request"] == "r" * MAX_REQUEST_CHARS
    assert len(payload["context"]) == 4
    assert payload["context"][0].startswith("turn 2 ")
    assert all(len(t) == MAX_CONTEXT_TURN_CHARS for t in payload["context"])


def test_a_1001_char_condition_is_left_out_and_the_rest_renumbered() -> None:
    candidates = [
        ("h1", HABITS[IDS[0]][0]),
        ("h2", "When " + "w" * 996),
        ("h3", HABITS[IDS[1]][0]),
    ]
    assert len(candidates[1][1]) == 1001
    payload, used = payload_for("status report please", [], candidates)
    assert used.habit_ids == ("h1", "h3")
    assert [c["id"] for c in payload["conditions"]] == ["c1", "c2"]
    assert parse_judgment(
        answer(judgment("c1"), judgment("c2", "current_applicability")), used
    ) == ["h3"]


def test_candidates_that_do_not_fit_are_dropped_from_the_end() -> None:
    candidates = [(f"h{i}", f"When {i} " + "y" * 900) for i in range(30)]
    payload, used = payload_for("q" * 600, ["c" * 300] * 4, candidates)
    assert len(canonical_json(payload)) <= MAX_PAYLOAD_CHARS
    kept = len(used)
    assert 0 < kept < 30
    assert used.habit_ids == tuple(f"h{i}" for i in range(kept))
    one_more = dict(payload)
    one_more["conditions"] = [*payload["conditions"],
                              {"id": f"c{kept + 1}", "condition": candidates[kept][1]}]
    assert len(canonical_json(one_more)) > MAX_PAYLOAD_CHARS


def test_unaliased_candidate_is_an_error() -> None:
    with pytest.raises(KeyError):
        judge_payload("q", [], [("h1", "When x")], Aliases(["h2"]))


def test_output_schema_is_strict() -> None:
    item = JUDGE_OUTPUT_SCHEMA["properties"]["judgments"]["items"]
    assert JUDGE_OUTPUT_SCHEMA["additionalProperties"] is False
    assert item["additionalProperties"] is False
    assert sorted(item["required"]) == ["applicable", "confidence_bp", "id", "reason"]
    assert item["properties"]["reason"]["enum"] == list(REASONS)
