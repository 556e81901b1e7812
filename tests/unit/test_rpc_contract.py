"""The services' RPC registries match the one table in habitus.contract: every method is
implemented by exactly one service, with the table's parameters, and no service answers a method
the table (and so the gateway's OpenAPI document) does not know."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from habitus.bus.rpc import RpcContext, RpcRegistry
from habitus.contract import METHODS, MethodSpec, conformance_problems
from habitus.contract.learning import FacetParams, UserOnly
from habitus.service.spec import ServiceSpec


def service_specs() -> dict[str, ServiceSpec]:
    """Every service `habitus serve` can run, read from pyproject.toml itself (the installed
    metadata may predate an edit of it)."""
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    specs = {}
    for name, target in project["project"]["entry-points"]["habitus.services"].items():
        module, _, attr = target.partition(":")
        loaded = getattr(importlib.import_module(module), attr)
        spec = loaded if isinstance(loaded, ServiceSpec) else loaded()
        assert isinstance(spec, ServiceSpec), target
        specs[name] = spec
    return specs


def implemented(specs: dict[str, ServiceSpec]) -> dict[str, dict[str, type[BaseModel]]]:
    return {name: {m.name: m.params for m in spec.rpc.methods.values()}
            for name, spec in specs.items()}


def test_the_services_implement_exactly_the_table() -> None:
    specs = service_specs()
    assert {"gateway", "stability_detector", "profile_renderer"} <= set(specs)
    assert conformance_problems(implemented(specs)) == []


def test_entry_point_names_are_the_service_names() -> None:
    # The table names an owner by entry point; the host subscribes under the spec's name.
    assert all(name == spec.name for name, spec in service_specs().items())


def test_ping_methods_stay_host_level() -> None:
    specs = service_specs()
    assert not {spec.ping_method for spec in specs.values()} & set(METHODS)
    for spec in specs.values():
        assert spec.ping_method not in spec.rpc.methods


def test_every_method_has_a_summary_and_distinct_models() -> None:
    for spec in METHODS.values():
        assert spec.summary and spec.name.count(".") >= 1
        assert issubclass(spec.params, BaseModel) and issubclass(spec.result, BaseModel)
        assert spec.params.model_config.get("extra") == "forbid", spec.name


async def _noop(params: BaseModel, ctx: RpcContext) -> None:
    return None


def _registry(*names: str) -> RpcRegistry:
    reg = RpcRegistry()
    for name in names:
        reg.implement(METHODS[name])(_noop)
    return reg


def test_a_method_nobody_implements_is_reported() -> None:
    everything_but_one = {"stability_detector": {
        n: s.params for n, s in METHODS.items() if s.service == "stability_detector"
        and n != "learning.pin_facet"}, "profile_renderer": {
        n: s.params for n, s in METHODS.items() if s.service == "profile_renderer"}}
    assert conformance_problems(everything_but_one) == [
        "learning.pin_facet is implemented by no service"]


def test_a_method_implemented_twice_is_reported() -> None:
    table = {"learning.cache_stats": METHODS["learning.cache_stats"]}
    problems = conformance_problems(
        {"stability_detector": {"learning.cache_stats": UserOnly},
         "profile_renderer": {"learning.cache_stats": UserOnly}}, table)
    assert "learning.cache_stats is implemented by 2 services" in problems
    assert ("learning.cache_stats belongs to stability_detector but profile_renderer "
            "implements it") in problems


def test_a_method_outside_the_table_is_reported() -> None:
    table = {"learning.cache_stats": METHODS["learning.cache_stats"]}
    problems = conformance_problems(
        {"stability_detector": {"learning.cache_stats": UserOnly, "learning.secret": UserOnly}},
        table)
    assert problems == ["stability_detector registers learning.secret, which is not in the "
                        "RPC table"]


def test_other_params_than_the_tables_are_reported() -> None:
    table = {"learning.cache_stats": METHODS["learning.cache_stats"]}
    problems = conformance_problems({"stability_detector": {"learning.cache_stats": FacetParams}},
                                    table)
    assert problems == ["stability_detector validates learning.cache_stats with FacetParams, "
                        "not the table's UserOnly"]


def test_implement_registers_the_tables_params() -> None:
    reg = _registry("learning.get_facet", "prompt.context")
    assert {n: m.params for n, m in reg.methods.items()} == {
        "learning.get_facet": METHODS["learning.get_facet"].params,
        "prompt.context": METHODS["prompt.context"].params,
    }
    with pytest.raises(ValueError, match="twice"):
        reg.implement(METHODS["prompt.context"])(_noop)


def test_a_spec_with_an_unspellable_name_is_refused() -> None:
    with pytest.raises(ValueError):
        MethodSpec("learning.*", "stability_detector", UserOnly, UserOnly, "bad")
