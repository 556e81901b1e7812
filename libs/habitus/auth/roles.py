"""Roles on API keys, and which a call needs.

A platform gives its agents keys that ingest what happened and read or change what Habitus
learned about one user at a time (`agent`); its operators hold keys that change what applies to
every user of the tenant: the law habits follow, routing policy and configuration, tenant-wide
tool rules, re-extraction across users, optimisation runs, erasure (`tenant-admin`). A leaked
agent key then cannot rewrite the tenant's rules or erase its users.

Which calls are tenant-wide is a column of the RPC table (`MethodSpec.tenant_wide`), so a new
method states it where it is declared; the gateway checks it with `required_role`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from habitus.contract.rpc import METHODS

Role = Literal["tenant-admin", "agent"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
TENANT_ADMIN: Final[Role] = "tenant-admin"
AGENT: Final[Role] = "agent"


def check_role(value: str) -> Role:
    if value not in ROLES:
        raise ValueError(f"role: {value!r} is not a role; the roles are {', '.join(ROLES)}")
    return value


def required_role(method: str, params: Mapping[str, Any]) -> Role:
    """The role a call of `method` with `params` needs. A name the table lacks needs no more
    than an agent's (nobody implements it, or it is a test's own service)."""
    spec = METHODS.get(method)
    if spec is None:
        return AGENT
    wide = spec.tenant_wide(params) if callable(spec.tenant_wide) else spec.tenant_wide
    return TENANT_ADMIN if wide else AGENT


def may_call(role: Role, method: str, params: Mapping[str, Any]) -> bool:
    return role == TENANT_ADMIN or required_role(method, params) == AGENT
