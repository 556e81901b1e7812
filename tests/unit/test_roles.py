"""Which calls need a tenant-admin key: the RPC table's `tenant_wide` column, read by
`required_role`, and the OpenAPI document saying so."""

from __future__ import annotations

from typing import Any

import pytest

from habitus.auth.roles import AGENT, TENANT_ADMIN, check_role, may_call, required_role
from habitus.contract import METHODS
from services.gateway.openapi import TENANT_WIDE_WHEN


@pytest.mark.parametrize(("method", "params", "role"), [
    ("habits.set_law", {"text": "deny: x"}, TENANT_ADMIN),
    ("habits.configure", {"retention_days": 30}, TENANT_ADMIN),
    ("habits.configure", {}, AGENT),  # reads the settings
    ("router.set_default_policy", {"policy": "bandit"}, TENANT_ADMIN),
    ("router.update_policy", {}, TENANT_ADMIN),
    ("router.select_model", {"query": "hi"}, AGENT),
    ("memory.tool_rule_put", {"scope": "tenant", "tool_name": "*", "rule": "r"}, TENANT_ADMIN),
    ("memory.tool_rule_put", {"user_id": "u", "tool_name": "x", "rule": "r"}, AGENT),
    ("memory.tool_rule_delete", {"scope": "tenant", "tool_name": "*", "id": "r"},
     TENANT_ADMIN),
    ("memory.tool_rule_delete", {"user_id": "u", "scope": "user", "tool_name": "x", "id": "r"},
     AGENT),
    ("extraction.reextract", {"since": 0}, TENANT_ADMIN),
    ("extraction.reextract", {"since": 0, "user_id": "u"}, AGENT),
    ("optimize.apply", {"run_id": "r", "trial_id": "t"}, TENANT_ADMIN),
    ("optimize.status", {"run_id": "r"}, AGENT),
    ("admin.erase_user", {"user_id": "u"}, TENANT_ADMIN),
    ("learning.pin_facet", {"user_id": "u"}, AGENT),
    ("prompt.context", {"user_id": "u"}, AGENT),
    ("echo.whoami", {}, AGENT),  # not in the table: nothing more than an agent's
])
def test_the_role_a_call_needs(method: str, params: dict[str, Any], role: str) -> None:
    assert required_role(method, params) == role
    assert may_call(TENANT_ADMIN, method, params)
    assert may_call(AGENT, method, params) == (role == AGENT)


def test_every_method_tenant_wide_for_some_parameters_says_when_in_the_document() -> None:
    partly = {name for name, spec in METHODS.items() if callable(spec.tenant_wide)}
    assert partly == set(TENANT_WIDE_WHEN)


def test_an_unknown_role_is_refused_naming_the_roles() -> None:
    with pytest.raises(ValueError, match="tenant-admin, agent"):
        check_role("owner")
