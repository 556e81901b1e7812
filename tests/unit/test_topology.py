"""The data-flow table matches the projections the services really run.

Commands wait for the readers the table names; a projection that consumed an event type
without being listed would let a command answer before that view reflected it."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from habitus import topology
from habitus.events import CATALOG
from habitus.projection.registry import resolve

REGISTERED = sorted(ep.name for ep in entry_points(group="habitus.projections"))


@pytest.mark.parametrize("name", REGISTERED)
def test_every_registered_projection_is_in_the_table_as_it_runs(name: str) -> None:
    running = resolve(name)
    info = topology.projection(name)
    assert running.schema == info.schema
    assert running.stream == info.stream
    assert sorted(running.filter_subjects) == sorted(info.filter_subjects())


def test_the_table_lists_only_registered_projections_and_known_types() -> None:
    assert sorted(topology.PROJECTIONS) == REGISTERED
    for info in topology.PROJECTIONS.values():
        for event_type in (*info.consumes, *info.emits):
            CATALOG.spec(event_type)  # raises for an unknown type


def test_readers_follow_the_flow_from_a_command_to_the_prompt() -> None:
    first = [p.name for p in topology.readers_of("FacetForgotten")]
    assert first == ["learning.cache"]
    then = [p.name for t in topology.projection("learning.cache").emits
            for p in topology.readers_of(t)]
    assert then == ["profile.render"]


def test_subjects_follow_the_catalog() -> None:
    assert topology.subject_for("TurnRecorded", "t", "u") == "habitus.v1.ingest.turn.t.u"
    assert topology.subject_for("CacheRebuilt", "t", "u") == "habitus.v1.event.CacheRebuilt.t.u"
    with pytest.raises(ValueError, match="one stream"):
        _ = topology.ProjectionInfo("x", "x", ("TurnRecorded", "CacheRebuilt")).stream
