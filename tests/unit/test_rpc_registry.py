"""RpcRegistry.dispatch: the fixed wire shape, error codes, and never raising."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from pydantic import BaseModel, Field

from habitus.bus.rpc import HTTP_STATUS, RpcContext, RpcError, RpcRegistry

METHOD = "learning.pin_facet"


class PinParams(BaseModel):
    key: str = Field(min_length=1)
    weight: int = 1


class PinResult(BaseModel):
    key: str
    tenant: str
    pinned: bool = True


def req(tenant: Any = "acme", params: Any = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"tenant_id": tenant, "params": params if params is not None
                            else {"key": "tone"}}
    body.update(extra)
    return json.dumps(body).encode()


def reply(raw: bytes) -> dict[str, Any]:
    out = json.loads(raw)
    assert isinstance(out, dict)
    assert set(out) in ({"result"}, {"error"})
    return out


def error(raw: bytes) -> dict[str, str]:
    out = reply(raw)
    assert "error" in out, out
    assert set(out["error"]) == {"code", "message"}
    return out["error"]


@pytest.fixture
def registry() -> RpcRegistry:
    reg = RpcRegistry()
    seen: list[RpcContext] = []
    reg.seen = seen  # type: ignore[attr-defined]

    @reg.method(METHOD, PinParams)
    async def pin(params: PinParams, ctx: RpcContext) -> dict[str, Any]:
        seen.append(ctx)
        return {"key": params.key, "weight": params.weight, "tenant": ctx.tenant_id}

    @reg.method("learning.model", PinParams)
    async def model(params: PinParams, ctx: RpcContext) -> PinResult:
        return PinResult(key=params.key, tenant=ctx.tenant_id)

    @reg.method("learning.conflict", PinParams)
    async def conflict(params: PinParams, ctx: RpcContext) -> None:
        raise RpcError("conflict", "facet already pinned")

    @reg.method("learning.bad_code", PinParams)
    async def bad_code(params: PinParams, ctx: RpcContext) -> None:
        raise RpcError("teapot", "short and stout")

    @reg.method("learning.crash", PinParams)
    async def crash(params: PinParams, ctx: RpcContext) -> None:
        raise ValueError("secret internal detail")

    @reg.method("learning.none", PinParams)
    async def none(params: PinParams, ctx: RpcContext) -> None:
        return None

    return reg


async def test_success_shape(registry: RpcRegistry) -> None:
    out = reply(await registry.dispatch(METHOD, req(params={"key": "tone", "weight": 3},
                                                    correlation_id="corr-1")))
    assert out == {"result": {"key": "tone", "weight": 3, "tenant": "acme"}}
    ctx = registry.seen[-1]  # type: ignore[attr-defined]
    assert ctx == RpcContext("acme", METHOD, "corr-1")


async def test_params_default_to_empty_object(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch(METHOD, b'{"tenant_id": "acme"}'))
    assert err["code"] == "invalid_argument"
    assert "key" in err["message"]


async def test_pydantic_result_is_dumped(registry: RpcRegistry) -> None:
    out = reply(await registry.dispatch("learning.model", req()))
    assert out == {"result": {"key": "tone", "tenant": "acme", "pinned": True}}


async def test_none_result(registry: RpcRegistry) -> None:
    assert reply(await registry.dispatch("learning.none", req())) == {"result": None}


async def test_unknown_method(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch("learning.nope", req()))
    assert err["code"] == "not_found"
    assert "learning.nope" in err["message"]


@pytest.mark.parametrize("data", [b"", b"not json", b"{", b"\xff"])
async def test_bad_json_is_invalid_argument(registry: RpcRegistry, data: bytes) -> None:
    err = error(await registry.dispatch(METHOD, data))
    assert err["code"] == "invalid_argument"


async def test_request_not_an_object(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch(METHOD, b"[1,2]"))
    assert err["code"] == "invalid_argument"


async def test_missing_tenant_is_named(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch(METHOD, b'{"params": {"key": "k"}}'))
    assert err["code"] == "invalid_argument"
    assert "tenant_id" in err["message"]


async def test_unknown_request_field_is_named(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch(METHOD, req(sneaky=1)))
    assert err["code"] == "invalid_argument"
    assert "sneaky" in err["message"]


async def test_params_not_an_object(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch(METHOD, req(params=[1])))
    assert err["code"] == "invalid_argument"
    assert "params" in err["message"]


@pytest.mark.parametrize(
    ("params", "field"),
    [({}, "key"), ({"key": ""}, "key"), ({"key": "k", "weight": "heavy"}, "weight")],
)
async def test_bad_params_name_the_field(registry: RpcRegistry, params: dict[str, Any],
                                         field: str) -> None:
    err = error(await registry.dispatch(METHOD, req(params=params)))
    assert err["code"] == "invalid_argument"
    assert field in err["message"]
    assert registry.seen == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("tenant", ["a.b", "", "a b", "*", ">", "x" * 65])
async def test_bad_tenant_is_invalid_argument(registry: RpcRegistry, tenant: str) -> None:
    err = error(await registry.dispatch(METHOD, req(tenant=tenant)))
    assert err["code"] == "invalid_argument"
    assert "tenant_id" in err["message"]
    assert registry.seen == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("tenant", [1, None, ["acme"]])
async def test_non_string_tenant(registry: RpcRegistry, tenant: Any) -> None:
    err = error(await registry.dispatch(METHOD, req(tenant=tenant)))
    assert err["code"] == "invalid_argument"


async def test_handler_rpc_error_code_is_kept(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch("learning.conflict", req()))
    assert err == {"code": "conflict", "message": "facet already pinned"}


async def test_unknown_rpc_error_code_becomes_internal(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch("learning.bad_code", req()))
    assert err["code"] == "internal"


async def test_handler_crash_is_internal_and_not_leaked(
    registry: RpcRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="habitus.bus.rpc"):
        err = error(await registry.dispatch("learning.crash", req()))
    assert err["code"] == "internal"
    assert "learning.crash" in err["message"]
    assert "secret internal detail" not in err["message"]
    assert any(r.exc_info and isinstance(r.exc_info[1], ValueError) for r in caplog.records)
    # the registry keeps serving after a crash
    out = reply(await registry.dispatch(METHOD, req()))
    assert out["result"]["key"] == "tone"


def test_http_status_mapping() -> None:
    expected = {
        "invalid_argument": 400,
        "unauthenticated": 401,
        "permission_denied": 403,
        "not_found": 404,
        "conflict": 409,
        "payload_too_large": 413,
        "rate_limited": 429,
        "internal": 500,
        "unavailable": 503,
        "deadline_exceeded": 504,
    }
    # other codes may be added; these may not change
    assert {k: HTTP_STATUS.get(k) for k in expected} == expected
    assert all(400 <= v <= 599 for v in HTTP_STATUS.values())


@pytest.mark.parametrize(("code", "status"), list(HTTP_STATUS.items()))
def test_rpc_error_http_status(code: str, status: int) -> None:
    exc = RpcError(code, "m")
    assert exc.code == code
    assert exc.http_status == status
    assert exc.as_reply() == {"error": {"code": code, "message": "m"}}


def test_rpc_error_unknown_code_is_internal() -> None:
    exc = RpcError("nope", "m")
    assert exc.code == "internal"
    assert exc.http_status == 500


def test_register_twice_raises() -> None:
    reg = RpcRegistry()

    async def h(params: PinParams, ctx: RpcContext) -> None:
        return None

    reg.method(METHOD, PinParams)(h)
    with pytest.raises(ValueError, match="twice"):
        reg.method(METHOD, PinParams)(h)
    assert list(reg.methods) == [METHOD]


@pytest.mark.parametrize("name", ["bad name", "a..b", "a.*", ""])
def test_register_bad_method_name_raises_early(name: str) -> None:
    reg = RpcRegistry()
    with pytest.raises(ValueError):
        reg.method(name, PinParams)
    assert reg.methods == {}


def test_registries_do_not_share_methods() -> None:
    a, b = RpcRegistry(), RpcRegistry()

    async def h(params: PinParams, ctx: RpcContext) -> None:
        return None

    a.method(METHOD, PinParams)(h)
    assert METHOD not in b.methods
    b.method(METHOD, PinParams)(h)  # no clash across registries


async def test_tenant_with_trailing_newline_is_invalid_argument(registry: RpcRegistry) -> None:
    err = error(await registry.dispatch(METHOD, req(tenant="acme\n")))
    assert err["code"] == "invalid_argument"
