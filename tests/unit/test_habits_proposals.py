"""Analyze output validation (services/habits/proposals.py): realistic proposals and each
rejection reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.habits.proposals import (
    ANALYZE_OUTPUT_SCHEMA,
    MAX_WORDING_CHARS,
    PROPOSAL_SCHEMA_VERSION,
    Proposal,
    RefInfo,
    Rejected,
    validate_output,
)

REFS = {
    f"r{i}": RefInfo(f"r{i}", 100 + i, f"evt-{i}", f"2024-05-0{i}") for i in range(1, 4)
}
PROJECTS = ("Habitus", "moonbeam")


def habit(**over: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "condition": "When I ask for a status report",
        "behavior": "Keep it to three bullet points",
        "polarity": 1,
        "evidence": ["r3", "r1"],
        "confidence_bp": 8200,
        "contradicts": False,
    }
    item.update(over)
    return item


def run(*items: Any) -> tuple[list[Proposal], list[Rejected]]:
    return validate_output(
        {"schema_version": PROPOSAL_SCHEMA_VERSION, "habits": list(items)}, REFS, PROJECTS
    )


def reason(item: dict[str, Any]) -> str:
    valid, rejected = run(item)
    assert valid == [] and len(rejected) == 1 and rejected[0].item is item
    return rejected[0].reason


def test_a_realistic_proposal() -> None:
    valid, rejected = run(habit(evidence=["r3", "r1", "r3"]))
    assert rejected == []
    assert valid == [
        Proposal(
            "When I ask for a status report", "Keep it to three bullet points", 1,
            (REFS["r1"], REFS["r3"]), 8200, False,
        )
    ]


def test_wording_is_stripped_and_collapsed_keeping_case() -> None:
    valid, _ = run(habit(condition="  When I  ask\nfor a\tstatus report ",
                         behavior="Ask before emailing the Whole team"))
    assert valid[0].condition == "When I ask for a status report"
    assert valid[0].behavior == "Ask before emailing the Whole team"


def test_valid_and_rejected_items_side_by_side() -> None:
    valid, rejected = run(
        habit(), habit(behavior="Edit src/app.py first"), habit(condition="When I say skip",
                                                                 behavior="skip preamble")
    )
    assert [p.behavior for p in valid] == ["Keep it to three bullet points", "skip preamble"]
    assert [r.reason for r in rejected] == ["names_a_path"]


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "habits",
        {"habits": []},
        {"schema_version": 1, "habits": [], "notes": "x"},
        {"schema_version": 2, "habits": []},
        {"schema_version": True, "habits": []},
        {"schema_version": "1", "habits": []},
        {"schema_version": 1, "habits": {}},
    ],
)
def test_malformed_output(data: Any) -> None:
    assert validate_output(data, REFS) == ([], [Rejected("malformed_output", data)])


def test_empty_output_is_fine() -> None:
    assert run() == ([], [])


@pytest.mark.parametrize(
    "item",
    [
        "When / Do",
        habit(extra=1),
        {k: v for k, v in habit().items() if k != "contradicts"},
        habit(condition=3),
        habit(behavior=None),
        habit(polarity=0),
        habit(polarity=True),
        habit(polarity="1"),
        habit(evidence=[]),
        habit(evidence="r1"),
        habit(evidence=[1]),
        habit(confidence_bp=10_001),
        habit(confidence_bp=-1),
        habit(confidence_bp=0.9),
        habit(contradicts="no"),
    ],
)
def test_invalid_item(item: Any) -> None:
    valid, rejected = run(item)
    assert valid == [] and [r.reason for r in rejected] == ["invalid_item"]


def test_unknown_ref() -> None:
    assert reason(habit(evidence=["r1", "r9"])) == "unknown_ref"
    assert reason(habit(evidence=["R1"])) == "unknown_ref"
    assert reason(habit(evidence=["evt-1"])) == "unknown_ref"


def test_empty_and_long_wording() -> None:
    assert reason(habit(condition="   ")) == "empty_wording"
    assert reason(habit(behavior="")) == "empty_wording"
    assert reason(habit(behavior="x" * (MAX_WORDING_CHARS + 1))) == "wording_too_long"
    valid, _ = run(habit(behavior=" " + "x" * MAX_WORDING_CHARS + " "))
    assert len(valid) == 1


@pytest.mark.parametrize(
    "text",
    [
        "Read /etc/app/config first",
        "Open C:\\Projects first",
        "Run ./scripts first",
        "Check ../notes first",
        "Look in ~\\Documents first",
        "Update setup.py too",
        "Keep README.md short",
        "Never commit .env",
        "Edit the docker-compose.yml",
    ],
)
def test_names_a_path(text: str) -> None:
    assert reason(habit(behavior=text)) == "names_a_path"


@pytest.mark.parametrize("text", ["Pin 1.2.3 in examples", "Target v2.0 APIs", "Use 2.0.0-rc.1"])
def test_names_a_version(text: str) -> None:
    assert reason(habit(behavior=text)) == "names_a_version"


def test_names_an_id() -> None:
    assert reason(habit(behavior="Cherry-pick 3f9a2b7c1d4e first")) == "names_an_id"
    assert reason(habit(condition="When ticket 123456789012 comes up")) == "names_an_id"


@pytest.mark.parametrize(
    "text",
    [
        "Mention Habitus in the summary",
        "Run the MOONBEAM checks",
        "Follow acme/widgets conventions",
        "Import from @acme/ui",
    ],
)
def test_names_a_project(text: str) -> None:
    assert reason(habit(behavior=text)) == "names_a_project"


@pytest.mark.parametrize(
    "text",
    [
        "Send it to dana@example.com",
        "Use the key sk-proj-0000000000000000",
        "Save notes under /home/dana/notes",
        "Call (415) 555-0100 first",
    ],
)
def test_sensitive(text: str) -> None:
    assert reason(habit(behavior=text)) == "sensitive"


@pytest.mark.parametrize(
    ("condition", "behavior"),
    [
        ("When I ask for a status report", "Keep it to three bullet points"),
        ("When I ask for a code review", "List risks before style nits"),
        ("When I share a draft", "Ask before sending email to the whole team"),
        ("When a task spans days", "Keep a short and/or dated log of decisions"),
        ("When estimating work", "Give a range, e.g. 1.5 to 2 days"),
        ("When writing server code", "Prefer Node.js built-ins over new dependencies"),
        ("When the token budget is tight", "Skip preamble"),
        ("When a deployment is risky", "Use risk-sensitive review before deployment"),
        ("When I say habitusly", "Answer in prose"),
    ],
)
def test_ordinary_habits_pass(condition: str, behavior: str) -> None:
    valid, rejected = run(habit(condition=condition, behavior=behavior))
    assert rejected == [] and len(valid) == 1


def test_schema_is_strict() -> None:
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node["additionalProperties"] is False
                assert sorted(node["required"]) == sorted(node["properties"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(ANALYZE_OUTPUT_SCHEMA)
    json.dumps(ANALYZE_OUTPUT_SCHEMA)
    item = ANALYZE_OUTPUT_SCHEMA["properties"]["habits"]["items"]
    assert set(item["properties"]) == set(habit())
    assert item["properties"]["polarity"]["enum"] == [-1, 1]
