"""The client's surface without a gateway: the item builders produce items the gateway's own
validation accepts, the RPC params match each method's params model, results are parsed into
the contract's models, and the async client mirrors the sync one method for method."""

from __future__ import annotations

import contextlib
import inspect
import json
import time
from typing import Any

import httpx
import pytest

from habitus.client import (
    AsyncClient,
    Client,
    Item,
    UnexpectedResponse,
    document,
    email,
    feedback,
    provider_profile,
    tool_call,
    trace,
    trace_step,
    turn,
)
from habitus.client.items import wire_item
from habitus.contract import METHODS
from habitus.contract.learning import DroppedFacet
from services.gateway.ingest import build_event


def built(item: Item) -> Any:
    outcome = build_event(wire_item(item), index=0, tenant_id="t1", now=time.time(),
                          max_item_bytes=None, max_clock_skew=300)
    assert outcome.ok, outcome.errors
    return outcome.event


def test_every_builder_makes_an_item_the_gateway_accepts_with_sensible_defaults() -> None:
    start = time.time()
    t = built(turn("dana", "Keep it short.", "Sure.",
                   tool_calls=[tool_call("shell", False, output_summary="timed out")]))
    assert t.payload.channel == "chat" and t.payload.session_id == "default"
    assert t.payload.tool_calls[0].tool_name == "shell" and not t.payload.tool_calls[0].ok
    assert start <= t.payload.user_at <= time.time() and t.payload.assistant_at == t.payload.user_at
    e = built(email("dana", sender="dana@x.example", to="sam@x.example", body="Hi\n--\nDana"))
    assert e.payload.to == ["sam@x.example"] and e.payload.direction == "sent"
    d = built(document("dana", "Release notes v2", source_id="notes.md"))
    assert d.payload.chunk_id == document("dana", "Release notes v2",
                                          source_id="notes.md").payload["chunk_id"]
    p = built(provider_profile("dana", "gmail", "c1", {"locale": "de"}, name="Dana",
                               timezone="Europe/Berlin"))
    assert p.payload.fields.name == "Dana" and p.payload.fields.model_extra == {"locale": "de"}
    r = built(trace("dana", "2+2?", "4", agent="calc", model="small", latency_seconds=1.5,
                    total_tokens=12, steps=[trace_step("llm", duration_seconds=1.0)]))
    assert r.payload.ended_at - r.payload.started_at == pytest.approx(1.5)
    assert r.payload.total_latency_seconds == 1.5 and r.payload.steps[0].step_type == "llm"
    f = built(feedback("dana", 0.9, trace_id=r.payload.trace_id))
    assert f.payload.score == 0.9


def test_ids_are_drawn_when_an_item_is_built_not_when_it_is_sent() -> None:
    a, b = turn("dana", "hi", "hello"), turn("dana", "hi", "hello")
    assert a.payload["turn_id"] != b.payload["turn_id"]
    score = feedback("dana", 1.0, turn_id="t1")
    assert score.event_id is not None and wire_item(score) == wire_item(score)
    raw = {"type": "FeedbackGiven", "user_id": "dana", "payload": {"turn_id": "t", "score": 1}}
    assert "event_id" in wire_item(raw) and "event_id" not in raw  # the caller's dict is kept
    assert "event_id" not in wire_item(turn("dana", "hi", "hello"))  # derived by the gateway
    with pytest.raises(ValueError, match="trace_id or turn_id"):
        feedback("dana", 1.0)


def recording(result: Any) -> tuple[Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"result": result})

    return Client("http://gw/", "k", transport=httpx.MockTransport(handle)), seen


def params_of(request: httpx.Request) -> tuple[str, dict[str, Any]]:
    method = request.url.path.removeprefix("/v1/rpc/")
    params = json.loads(request.content)
    METHODS[method].params.model_validate(params)  # what the service will validate
    return method, params


FACET: dict[str, Any] = {"class": "style", "key": "verbosity", "value": "terse", "state": "active",
         "user_state": "pinned", "stability": None, "pinned": True, "evidence_count": 2,
         "cue_counts": {"explicit": 2}, "first_seen_at": 1.0, "last_evidence_at": 2.0,
         "next_change_at": None, "evidence": []}


@pytest.mark.parametrize(("invoke", "method", "params"), [
    (lambda c: c.context("dana", tools=["Shell"], request="status?", budget_chars=500),
     "prompt.context", {"user_id": "dana", "tools": ["Shell"], "request": "status?",
                        "budget_chars": 500}),
    (lambda c: c.facets("dana", class_="style"), "learning.list_facets",
     {"user_id": "dana", "class": "style"}),
    (lambda c: c.pin("dana", "style", "verbosity"), "learning.pin_facet",
     {"user_id": "dana", "class": "style", "key": "verbosity"}),
    (lambda c: c.put_rule(None, "shell", "No sudo.", priority="critical"),
     "memory.tool_rule_put", {"scope": "tenant", "tool_name": "shell", "rule": "No sudo.",
                              "priority": "critical", "tags": []}),
    (lambda c: c.rules("dana", "shell"), "memory.tool_rule_list",
     {"user_id": "dana", "tool_name": "shell"}),
    (lambda c: c.route("fix this bug", ["small", {"name": "big", "parameter_count_b": 70}],
                       user="dana", record=True), "router.select_model",
     {"query": "fix this bug", "available_models": ["small", {"name": "big",
                                                             "parameter_count_b": 70}],
      "user_id": "dana", "record": True}),
    (lambda c: c.habits("dana", "active"), "habits.list", {"user_id": "dana",
                                                          "status": "active"}),
    (lambda c: c.reject("dana", "h1", "a" * 64, reason="no"), "habits.apply_review",
     {"user_id": "dana", "habit_id": "h1", "checksum": "a" * 64, "action": "reject",
      "reason": "no"}),
    (lambda c: c.declare("dana", "When I ask", "Answer", polarity=-1), "habits.declare",
     {"user_id": "dana", "when": "When I ask", "do": "Answer", "polarity": -1}),
    (lambda c: c.call("learning.get_facet", {"class": "style"}, user_id="dana", key="k"),
     "learning.get_facet", {"class": "style", "user_id": "dana", "key": "k"}),
])
def test_params_are_the_methods_own(invoke: Any, method: str, params: dict[str, Any]) -> None:
    c, seen = recording(None)  # not a valid result: only the request matters here
    with c, contextlib.suppress(UnexpectedResponse):
        invoke(c)
    assert params_of(seen[0]) == (method, params)


def test_results_are_the_contracts_models_and_unknown_fields_are_ignored() -> None:
    c, _ = recording({**FACET, "added_by_a_newer_gateway": 1})
    with c:
        facet = c.pin("dana", "style", "verbosity")
    assert facet.class_ == "style" and facet.user_state == "pinned"
    dropped = {"class": "style", "key": "verbosity", "state": "dropped", "user_state": "auto"}
    c, _ = recording(dropped)
    with c:
        assert isinstance(c.unpin("dana", "style", "verbosity"), DroppedFacet)
    c, _ = recording({"facets": "not a list"})
    with c, pytest.raises(UnexpectedResponse) as raised:
        c.facets("dana")
    assert "FacetList" in raised.value.message
    c, _ = recording({"anything": [1, 2]})
    with c:
        assert c.call("habits.get_law") == {"anything": [1, 2]}


def test_from_env_reads_the_url_and_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HABITUS_API_KEY", raising=False)
    with pytest.raises(ValueError, match="HABITUS_API_KEY"):
        Client.from_env()
    monkeypatch.setenv("HABITUS_API_KEY", "secret")
    monkeypatch.delenv("HABITUS_URL", raising=False)
    with Client.from_env() as c:
        assert c.base_url == "http://127.0.0.1:8080"
    monkeypatch.setenv("HABITUS_URL", "http://gw.example:9000/")
    with Client.from_env(retries=0) as c:
        assert c.base_url == "http://gw.example:9000"
    assert AsyncClient.from_env().base_url == "http://gw.example:9000"


def public(cls: type) -> dict[str, Any]:
    return {name: member for name, member in vars(cls).items()
            if (callable(member) or isinstance(member, classmethod))
            and (not name.startswith("_") or name == "__init__")}


def test_the_async_client_has_the_same_methods_with_the_same_signatures() -> None:
    sync, aio = public(Client), public(AsyncClient)
    assert sorted(sync) == sorted(aio)
    for name, method in sync.items():
        if isinstance(method, classmethod):
            continue
        theirs = aio[name]
        assert str(inspect.signature(method)) == str(inspect.signature(theirs)).replace(
            "AsyncBaseTransport", "BaseTransport"), name
        if name not in ("__init__",):
            assert inspect.iscoroutinefunction(theirs), name
            assert (method.__doc__ or "") == (theirs.__doc__ or ""), name
