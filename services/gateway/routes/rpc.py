"""`POST /v1/rpc/{method}`: a Habitus method called with the caller's tenant, over the bus.

`prompt.context` cache hits are the exception: answered here from the context cache
(services.gateway.context_reads), the same result the renderer would give, without its queue."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from habitus.auth.roles import TENANT_ADMIN, may_call
from habitus.bus.rpc import RpcError
from habitus.contract import METHODS, method_names
from habitus.service.context import ServiceContext
from habitus.telemetry import metrics
from services.gateway.access import Access, budget_of
from services.gateway.auth import authenticate
from services.gateway.body import (
    DuplicateKey,
    TooDeep,
    check_media_type,
    format_path,
    parse_json,
    unstorable,
)
from services.gateway.body_limit import BodyReader, BodyTooLarge
from services.gateway.context_reads import METHOD as CONTEXT_METHOD
from services.gateway.context_reads import SERVED_BY_RENDERER, SERVED_FROM_MEMORY, ContextReads
from services.gateway.errors import GatewayError

_TABLE_PREFIXES = frozenset(name.split(".", 1)[0] for name in METHODS)


def _unknown(method: str) -> RpcError:
    return RpcError("not_found", f"unknown method {method!r}; the methods are "
                                 + ", ".join(method_names()))


async def _params(request: Request, bodies: BodyReader, max_json_depth: int
                  ) -> dict[str, Any]:
    """The call's parameters: a JSON object (an empty body: none), or the reason it is not."""
    try:
        raw = await bodies.read(request)
    except BodyTooLarge:
        raise RpcError("payload_too_large", "body too large") from None
    if raw.strip():
        check_media_type(request)
    try:
        params = parse_json(raw, max_json_depth) if raw.strip() else {}
    except TooDeep as exc:
        raise RpcError("invalid_argument", f"{format_path(exc.path)}: nested deeper than "
                                           f"{exc.limit} levels") from None
    except DuplicateKey as exc:
        raise RpcError("invalid_argument", str(exc)) from None
    except ValueError as exc:
        raise RpcError("invalid_argument", f"body: not JSON ({exc})") from None
    if not isinstance(params, dict):
        raise RpcError("invalid_argument", "body: must be a JSON object of parameters")
    for where, reason in unstorable(params):
        raise RpcError("invalid_argument", f"{where}: {reason}")
    return params


def add_rpc_route(app: FastAPI, ctx: ServiceContext, access: Access,
                  contexts: ContextReads) -> None:
    settings = ctx.settings

    # The method comes from the path as matched, not as a declared parameter: FastAPI would
    # solve and validate it on every call (a tenth of a context hit's CPU), and the document
    # describes each method as its own path anyway (services.gateway.openapi).
    @app.post("/v1/rpc/{method}", summary="Call a Habitus method with the caller's tenant")
    async def rpc(request: Request) -> Response:
        method: str = request.path_params["method"]
        caller = await authenticate(request, access.keys)
        # Reads and commands have budgets of their own: ingest never spends a read's.
        budget = budget_of(method)
        try:
            params = await _params(request, access.bodies, settings.max_json_depth)
        except (RpcError, GatewayError):
            await access.charge(caller, 1, budget)  # a bad call spends the budget too; 429 wins
            raise
        if method not in METHODS and method.split(".", 1)[0] in _TABLE_PREFIXES:
            await access.charge(caller, 1, budget)
            # The owner answers its whole prefix; a name under it the table lacks is a typo.
            metrics.RPC_REQUESTS.labels("unknown", "not_found").inc()
            raise _unknown(method)
        # The caller's name must not become a label unless the table knows it.
        label = method if method in METHODS else "unknown"
        role = caller.principal.role
        if not may_call(role, method, params):
            await access.charge(caller, 1, budget)
            metrics.RPC_REQUESTS.labels(label, "permission_denied").inc()
            raise RpcError("permission_denied",
                           f"{method}: a tenant-wide call (the tenant's law, routing, "
                           f"settings, optimisation, erasure), so it needs a {TENANT_ADMIN} "
                           f"key; this key's role is {role}")
        wanted = contexts.wanted(params) if method == CONTEXT_METHOD else None
        if wanted is not None:
            kept = contexts.kept(caller.tenant_id, wanted)
            if kept is not None:  # from memory: no round trip for the entry or the charge
                await access.charge_leased_read(caller)
                metrics.RPC_REQUESTS.labels(label, "ok").inc()
                return Response(kept, media_type="application/json", headers=SERVED_FROM_MEMORY)
            # The charge and the cache read in one Redis round trip, on the read every agent
            # turn makes. If the charge refuses, the entry read is dropped unseen.
            ticket = contexts.ticket()
            read = await access.charge_and_read(
                caller, 1, budget, lambda pipe: contexts.queue(pipe, caller.tenant_id, wanted))
            cached = contexts.result(read, caller.tenant_id, wanted, ticket)
            if cached is not None:
                metrics.RPC_REQUESTS.labels(label, "ok").inc()
                return cached
        else:
            await access.charge(caller, 1, budget)
        try:
            spec = METHODS.get(method)
            reply = await ctx.rpc.call_raw(
                method,
                {"tenant_id": caller.tenant_id, "params": params,
                 "correlation_id": request.headers.get("x-correlation-id")},
                settings.rpc_timeout_seconds * (spec.timeout_factor if spec else 1.0),
            )
        except ValueError as exc:  # an unspellable method name
            metrics.RPC_REQUESTS.labels("invalid", "invalid_argument").inc()
            raise RpcError("invalid_argument", str(exc)) from None
        except RpcError as exc:
            if exc.code == "unavailable" and method not in METHODS:
                # Nobody answers a name the RPC table lacks: the caller's mistake, not an outage.
                exc = _unknown(method)
            metrics.RPC_REQUESTS.labels(label, exc.code).inc()
            raise exc from None
        if "error" in reply:
            err = RpcError(str(reply["error"].get("code")), str(reply["error"].get("message")))
            metrics.RPC_REQUESTS.labels(label, err.code).inc()
            raise err  # the handlers add Retry-After to "unavailable"
        metrics.RPC_REQUESTS.labels(label, "ok").inc()
        return JSONResponse({"result": reply["result"]},
                            headers=SERVED_BY_RENDERER if method == CONTEXT_METHOD else None)
