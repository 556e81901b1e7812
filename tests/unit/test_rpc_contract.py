"""The services' RPC registries match the one table in habitus.contract: every method is
implemented by exactly one service, with the table's parameters, and no service answers a method
the table (and so the gateway's OpenAPI document) does not know."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from habitus.bus.rpc import RpcContext, RpcRegistry
from habitus.contract import METHODS, MethodSpec, conformance_problems
from habitus.contract.learning import CacheParams, FacetParams
from habitus.service import registry
from habitus.service.descriptor import ServiceDescriptor, Wiring


def test_every_method_is_owned_by_a_service_answering_its_prefix() -> None:
    for spec in METHODS.values():
        owner = registry.service(spec.service)
        assert owner.answers(spec.name), (spec.name, owner.rpc_prefixes)


def test_no_two_services_answer_a_prefix_and_pings_stay_host_level() -> None:
    services = registry.services()
    assert {"gateway", "stability_detector", "profile_renderer"} <= {s.name for s in services}
    prefixes = [p for s in services for p in s.rpc_prefixes]
    assert len(prefixes) == len(set(prefixes))
    for descriptor in services:
        # a ping under the service's own prefix (`habits.ping`) is answered by the host
        # before the registry sees it; it is never a method of the table
        assert descriptor.ping_method not in METHODS
        others = [s for s in services if s is not descriptor]
        assert not any(o.answers(descriptor.ping_method) for o in others)


def _learning_wiring(*skip: str) -> Wiring:
    reg = RpcRegistry()
    for name, spec in METHODS.items():
        if spec.service == "stability_detector" and name not in skip:
            reg.implement(spec)(_noop)
    return Wiring(rpc=reg)


def test_a_service_whose_wiring_misses_a_method_of_the_table_does_not_start() -> None:
    descriptor = ServiceDescriptor("stability_detector", "stability-detector",
                                   rpc_prefixes=("learning",))
    descriptor.check_wiring(_learning_wiring())
    with pytest.raises(RuntimeError, match=r"learning\.pin_facet is implemented by no service"):
        descriptor.check_wiring(_learning_wiring("learning.pin_facet"))


def test_a_service_answering_outside_its_prefixes_or_the_table_does_not_start() -> None:
    descriptor = ServiceDescriptor("stability_detector", "stability-detector",
                                   rpc_prefixes=("learning",))
    stray = _learning_wiring()
    stray.rpc.method("learning.secret", CacheParams)(_noop)
    with pytest.raises(RuntimeError, match=r"learning\.secret, which is not in the RPC table"):
        descriptor.check_wiring(stray)
    other = _learning_wiring()
    other.rpc.implement(METHODS["prompt.context"])(_noop)
    with pytest.raises(RuntimeError, match="outside its RPC prefixes"):
        descriptor.check_wiring(other)


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
    everything_but_one: dict[str, dict[str, type[BaseModel]]] = {}
    for name, spec in METHODS.items():
        if name != "learning.pin_facet":
            everything_but_one.setdefault(spec.service, {})[name] = spec.params
    assert conformance_problems(everything_but_one) == [
        "learning.pin_facet is implemented by no service"]


def test_a_method_implemented_twice_is_reported() -> None:
    table = {"learning.cache_stats": METHODS["learning.cache_stats"]}
    problems = conformance_problems(
        {"stability_detector": {"learning.cache_stats": CacheParams},
         "profile_renderer": {"learning.cache_stats": CacheParams}}, table)
    assert "learning.cache_stats is implemented by 2 services" in problems
    assert ("learning.cache_stats belongs to stability_detector but profile_renderer "
            "implements it") in problems


def test_a_method_outside_the_table_is_reported() -> None:
    table = {"learning.cache_stats": METHODS["learning.cache_stats"]}
    problems = conformance_problems(
        {"stability_detector": {"learning.cache_stats": CacheParams,
                                "learning.secret": CacheParams}},
        table)
    assert problems == ["stability_detector registers learning.secret, which is not in the "
                        "RPC table"]


def test_other_params_than_the_tables_are_reported() -> None:
    table = {"learning.cache_stats": METHODS["learning.cache_stats"]}
    problems = conformance_problems({"stability_detector": {"learning.cache_stats": FacetParams}},
                                    table)
    assert problems == ["stability_detector validates learning.cache_stats with FacetParams, "
                        "not the table's CacheParams"]


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
        MethodSpec("learning.*", "stability_detector", CacheParams, CacheParams, "bad")


def test_rpc_apart_needs_methods_and_projections_and_the_renderer_has_it() -> None:
    with pytest.raises(ValueError, match="rpc_apart needs both RPC methods and projections"):
        ServiceDescriptor("gateway2", "gateway2", rpc_apart=True)
    apart = [s.name for s in registry.services() if s.rpc_apart]
    # prompt.context, read on every agent turn; learning.*, beside the busiest applier;
    # memory.* and habits.*, beside the capture every turn passes through
    assert sorted(apart) == ["habits", "profile_renderer", "stability_detector", "tool_memory"]
