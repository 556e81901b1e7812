"""The data flow is derived from the installed services' handler tables.

Commands wait for the readers the flow names; a projection that consumed an event type
without being in the flow would let a command answer before that view reflected it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from habitus import topology
from habitus.events import CATALOG
from habitus.events.domain import CacheRebuilt, FacetPinned
from habitus.events.ingest import TurnRecorded
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.service import registry
from habitus.service.projections import resolve

RUNNING = sorted(p for s in registry.services() for p in
                 (c.name for c in s.running_projections()))


@pytest.mark.parametrize("name", RUNNING)
def test_every_running_projection_is_in_the_flow_as_it_runs(name: str) -> None:
    running = resolve(name)
    info = registry.topology().projection(name)
    assert running.schema == info.schema
    assert running.stream == info.stream
    assert sorted(running.filter_subjects) == sorted(info.filter_subjects())
    for event_type in (*info.consumes, *info.emits):
        CATALOG.spec(event_type)  # raises for an unknown type


def test_the_flow_lists_each_services_projections_and_its_erasure() -> None:
    assert sorted(registry.topology().projections) == RUNNING
    for descriptor in registry.services():
        if descriptor.projections:
            assert f"{descriptor.schema}.erasure" in RUNNING
    erasers = sorted(p.name for p in registry.topology().readers_of("UserErased"))
    assert erasers == sorted(f"{s.schema}.erasure" for s in registry.services()
                             if s.projections)
    assert {"learning.erasure", "producers.erasure", "profile.erasure"} <= set(erasers)


def test_readers_follow_the_flow_from_a_command_to_the_prompt() -> None:
    flow = registry.topology()
    first = [p.name for p in flow.readers_of("FacetForgotten")]
    assert first == ["learning.cache"]
    then = [p.name for t in flow.projection("learning.cache").emits
            for p in flow.readers_of(t)]
    assert then == ["profile.render"]


def test_subjects_follow_the_catalog() -> None:
    # filters on stored subjects: the user's and the tenant's slot follow the user
    assert topology.subject_for("TurnRecorded", "t", "u") == "habitus.v1.ingest.turn.t.u.*.*"
    assert topology.subject_for("CacheRebuilt", "t", "u") == (
        "habitus.v1.event.CacheRebuilt.t.u.*.*")
    # every tenant and user: what the stream stored before the tokens too
    assert topology.subject_for("CacheRebuilt") == "habitus.v1.event.CacheRebuilt.>"
    with pytest.raises(ValueError, match="one stream"):
        _ = topology.ProjectionInfo("x", "x", ("TurnRecorded", "CacheRebuilt")).stream


async def _noop(self: Any, cur: Any, run: Sequence[Delivered], ctx: ApplyContext) -> None:
    return None


def test_a_handler_table_gives_the_subjects_and_refuses_two_streams() -> None:
    class Pins(Projection):
        name = "example.pins"
        schema = "example"
        handlers = {FacetPinned: _noop, CacheRebuilt: _noop}

    assert Pins.consumes == ("FacetPinned", "CacheRebuilt")
    assert Pins.subjects("t1") == ["habitus.v1.event.FacetPinned.t1.*.*.*",
                                   "habitus.v1.event.CacheRebuilt.t1.*.*.*"]
    assert Pins.filter_subjects == ["habitus.v1.event.FacetPinned.>",
                                    "habitus.v1.event.CacheRebuilt.>"]
    with pytest.raises(TypeError, match="one stream only"):
        type("Mixed", (Projection,), {"name": "x.y", "schema": "x",
                                      "handlers": {TurnRecorded: _noop, FacetPinned: _noop}})


def test_a_turn_reaches_the_prompt_through_three_queues_one_of_them_twice() -> None:
    # the gateway's end-to-end lag walks these: the learning cache reads the rebuild requests
    # its scheduler publishes from the candidates it stored, so a sentence waits there twice
    flow = registry.topology()
    assert flow.upstream_of("producers.candidates") == ()
    assert flow.upstream_of("learning.cache") == ("learning.cache", "producers.candidates")
    assert "learning.cache" in flow.upstream_of("profile.render")
    assert flow.projection("learning.cache").requeues == ("RebuildRequested",)


def test_a_projection_cannot_requeue_what_it_does_not_read() -> None:
    async def on_turn(self: Any, cur: Any, d: Delivered, ctx: ApplyContext) -> None:
        return None

    with pytest.raises(TypeError, match="requeues"):
        class Bad(Projection):
            name = "bad.requeue"
            schema = "bad"
            handlers = {TurnRecorded: on_turn}
            requeues = (CacheRebuilt,)
