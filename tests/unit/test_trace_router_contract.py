"""The trace router's typed results: each `traces.*`, `advisor.*` and `icl.*` method answers a
model of its own, the OpenAPI document describes it field by field, and what the pure analyzer
functions return fits those models exactly (the live answers are checked in
tests/integration/test_trace_router.py)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pydantic import BaseModel

from habitus.config import Settings
from habitus.contract import (
    METHODS,
    admin,
    extractor,
    habits,
    learning,
    memory,
    optimize,
    profile,
)
from habitus.contract import traces as contract
from services.gateway.openapi import build_document
from services.trace_router.insights import TraceFacts, examples, recommendations, skills
from services.trace_router.rpc import _plain

TYPED: dict[str, type[BaseModel]] = {
    "traces.summary": contract.TraceSummary, "traces.route_stats": contract.RouteStatsList,
    "traces.class_stats": contract.ClassStatsList, "icl.context": contract.IclContext,
    "traces.tool_stats": contract.ToolStatsList, "traces.list": contract.TracePage,
    "traces.get": contract.TraceDetail, "traces.search": contract.TraceHits,
    "traces.export": contract.TraceExport,
    "advisor.recommendations": contract.AdvisorReport, "icl.examples": contract.IclExamples,
    "icl.skills": contract.IclSkills,
}


def test_every_analyzer_method_has_its_typed_result() -> None:
    assert {m for m in METHODS if m.split(".")[0] in ("traces", "advisor", "icl")} == set(TYPED)
    for method, model in TYPED.items():
        assert METHODS[method].result is model, method
    assert not hasattr(contract, "Result")  # no free-form result is left


def _models(module: Any) -> dict[str, type[BaseModel]]:
    return {name: obj for name, obj in vars(module).items()
            if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj is not BaseModel
            and obj.__module__ == module.__name__ and not name.startswith("_")}


def test_result_class_names_are_unique_across_the_contract() -> None:
    ours = _models(contract)
    for module in (admin, extractor, habits, learning, memory, optimize, profile):
        clash = set(ours) & set(_models(module))
        assert not clash, (module.__name__, clash)


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    components: dict[str, Any] = build_document(Settings())["components"]["schemas"]
    return components


def _described(schemas: dict[str, Any], name: str, seen: set[str]) -> None:
    """`name` and every model it refers to: closed, every field required and described."""
    if name in seen:
        return
    seen.add(name)
    schema = schemas[name]
    assert schema.get("additionalProperties") is False, name
    assert set(schema["required"]) == set(schema["properties"]), name
    for field, prop in schema["properties"].items():
        assert prop.get("description"), (name, field)
        for ref in _refs(prop):
            _described(schemas, ref.rsplit("/", 1)[1], seen)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values()
                                                              for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_openapi_document_describes_every_result_precisely(schemas: dict[str, Any]) -> None:
    seen: set[str] = set()
    for model in TYPED.values():
        assert model.__name__ in schemas
        _described(schemas, model.__name__, seen)
    assert {"RecordedStep", "TraceRecord", "StepTypeStats", "IclSkill", "TraceHit"} <= seen
    assert "Result" not in schemas
    step = schemas["TraceDetail"]["properties"]["steps"]
    assert step["items"] == {"$ref": "#/components/schemas/RecordedStep"}
    assert schemas["TraceRecord"]["properties"]["query_class"]["enum"] == [
        "code", "math", "short", "long", "general"]
    # one schema per model: validation and serialization describe them alike
    for model in TYPED.values():
        assert (model.model_json_schema(mode="validation")
                == model.model_json_schema(mode="serialization")), model.__name__


# --------------------------------------------------------------------------- the pure answers


def _facts(trace_id: str, tools: tuple[str, ...], feedback: float | None,
           outcome: str | None = "success", model: str = "m", query: str = "def f(): pass",
           latency: float = 1.0) -> TraceFacts:
    return TraceFacts(trace_id=trace_id, query=query, model=model, agent="a", outcome=outcome,
                      feedback=feedback, latency_seconds=latency, tool_sequence=tools,
                      query_class="code", ended_at=float(len(trace_id)))


TRACES = [
    _facts("t1", ("search", "calc", "search", "calc"), 0.9),
    _facts("t2", ("search", "calc"), None),
    _facts("t3", ("search", "calc"), 0.8),
    _facts("t4", ("calc",), 0.95),
    _facts("t5", ("search", "calc"), 0.7),
    *(_facts(f"f{i}", tuple(["search"] * 7), 0.2, "failure", "small", latency=9.0)
      for i in range(4)),
]


def test_the_pure_answers_fit_their_models_exactly() -> None:
    advice = _plain(recommendations(TRACES))
    report = contract.AdvisorReport.model_validate(advice)
    assert report.model_dump(mode="json") == advice
    assert {r.kind for r in report.recommendations} == {"agent_structure", "routing"}
    found = {"examples": _plain(examples(TRACES, 20))}
    assert contract.IclExamples.model_validate(found).model_dump(mode="json") == found
    mined = skills(TRACES)
    answer = {"skills": [{**_plain(s), "name": s.name} for s in mined]}
    typed = contract.IclSkills.model_validate(answer)
    assert typed.model_dump(mode="json") == answer
    assert typed.skills[0].name == "search -> calc" and typed.skills[0].count == 4


def test_a_result_with_a_field_too_many_or_too_few_is_refused() -> None:
    row = {"tool_name": "search", "call_count": 2, "traces": 1, "successes": 1,
           "success_rate": 0.5, "avg_latency": 0.25}
    contract.ToolStats.model_validate(row)
    with pytest.raises(ValueError):
        contract.ToolStats.model_validate({**row, "surprise": 1})
    with pytest.raises(ValueError):
        contract.ToolStats.model_validate({k: v for k, v in row.items() if k != "traces"})
    change = contract.PolicyChange.model_validate({"class": "code", "old": None, "new": "m"})
    assert change.model_dump(by_alias=True) == {"class": "code", "old": None, "new": "m"}
