"""Roles on keys and revocation at once, through real gateways.

Every service runs in-process behind one gateway: each tenant-wide call is refused to an agent
key with 403 naming the role, and answered to a tenant-admin key as before; an agent key still
ingests and reads and changes one user's things. Then two gateway processes of their own, with
a key cache of five minutes, both refuse a key within moments of `habitus keys revoke`
returning: only the announcement can explain it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key, list_keys
from habitus.service.migrations import migrate
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import turn_item, unique
from tests.support.http import TLS
from tests.support.processes import serve
from tests.support.services import every_service, skip_all_history

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    presets = {"stability_detector": LearningSettings(scheduler_enabled=False)}
    await skip_all_history(servers.database, servers.nats)  # this module's events only
    async with every_service(servers.settings(), presets) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


async def call(base: str, key: str, method: str, params: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=60, verify=TLS) as client:
        return await client.post(f"/v1/rpc/{method}", json=params,
                                 headers={"Authorization": f"Bearer {key}"})


#: every tenant-wide call, with parameters that are valid
TENANT_WIDE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("habits.set_law", {"text": "deny: \\bproject falcon\\b"}),
    ("habits.configure", {"retention_days": 30}),
    ("router.set_default_policy", {"policy": "bandit"}),
    ("router.update_policy", {"policy": "learned"}),
    ("memory.tool_rule_put", {"scope": "tenant", "tool_name": "*",
                              "rule": "Never share credentials.", "priority": "critical"}),
    ("memory.tool_rule_delete", {"scope": "tenant", "tool_name": "*", "id": "no-such-rule"}),
    ("extraction.reextract", {"since": 1_764_000_000}),
    ("optimize.configure", {"params": {"routing.policy": "learned"}}),
    ("optimize.run", {"space": {"search": [{"name": "routing.policy",
                                            "values": ["learned", "bandit"]}]},
                      "max_trials": 1}),
    ("optimize.stop", {"run_id": "r0000000000000000000000000"}),
    ("optimize.apply", {"run_id": "r0000000000000000000000000",
                        "trial_id": "r0000000000000000000000000-t0"}),
    ("optimize.undo", {"run_id": "r0000000000000000000000000",
                       "trial_id": "r0000000000000000000000000-t0"}),
    ("admin.partitions", {}),
    ("admin.erase_user", {"user_id": "someone-leaving", "reason": "asked"}),
]


async def test_every_tenant_wide_call_needs_a_tenant_admin_key(stack: str, pool: Any) -> None:
    tenant = unique("roles")
    agent = await create_key(pool, tenant, role="agent")
    admin = await create_key(pool, tenant, role="tenant-admin")
    from habitus.contract import METHODS

    covered = {name for name, _ in TENANT_WIDE_CALLS}
    assert covered == {name for name, spec in METHODS.items() if spec.tenant_wide}
    for method, params in TENANT_WIDE_CALLS:
        refused = await call(stack, agent, method, params)
        assert refused.status_code == 403, (method, refused.text)
        message = refused.json()["error"]["message"]
        assert message.startswith(f"{method}:") and "needs a tenant-admin key" in message
        assert "this key's role is agent" in message
        answered = await call(stack, admin, method, params)
        # as before roles: answered, or refused for what the parameters name, never for the key
        assert answered.status_code in (200, 404, 409), (method, answered.text)
    law = await call(stack, agent, "habits.get_law", {})
    assert law.status_code == 200 and "project falcon" in law.text  # the admin's law stands


async def test_an_agent_key_ingests_and_reads_and_changes_one_users_things(
        stack: str, pool: Any) -> None:
    tenant = unique("agents")
    agent = await create_key(pool, tenant, role="agent")
    async with httpx.AsyncClient(base_url=stack, timeout=30, verify=TLS) as client:
        ingested = await client.post("/v1/events", json=[turn_item("ana", "Keep it short.")],
                                     headers={"Authorization": f"Bearer {agent}"})
    assert ingested.status_code == 200, ingested.text
    own_rule = await call(stack, agent, "memory.tool_rule_put",
                          {"user_id": "ana", "tool_name": "send_email",
                           "rule": "Never email Sarah."})
    assert own_rule.status_code == 200, own_rule.text
    for method, params in [("prompt.context", {"user_id": "ana"}),
                           ("habits.configure", {}),
                           ("extraction.reextract", {"since": 1_764_000_000, "user_id": "ana"}),
                           ("router.select_model", {"query": "hi", "available_models": ["a"]})]:
        answer = await call(stack, agent, method, params)
        assert answer.status_code != 403, (method, answer.text)
        assert answer.status_code < 500, (method, answer.text)


# ------------------------------------------------------------------------------- revocation

def habitus(servers: ServerUrls, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **servers.env()}
    return subprocess.run([sys.executable, "-m", "habitus.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def two_gateways(servers: ServerUrls) -> Iterator[tuple[str, str]]:
    env = {**servers.env(), "HABITUS_KEY_CACHE_SECONDS": "300", "HABITUS_LOG_LEVEL": "WARNING",
           "HABITUS_RATE_LIMIT_PER_MINUTE": "0", "HABITUS_READ_RATE_LIMIT_PER_MINUTE": "0"}
    with serve("gateway", env) as first, serve("gateway", env) as second:
        yield first, second


async def ingest(base: str, key: str) -> int:
    async with httpx.AsyncClient(base_url=base, timeout=10, verify=TLS) as client:
        answer = await client.post("/v1/events", json=[turn_item("kim", "hello")],
                                   headers={"Authorization": f"Bearer {key}"})
    return answer.status_code


async def test_a_revoked_key_is_refused_by_every_gateway_at_once(servers: ServerUrls) -> None:
    migrate(servers.database)
    tenant = unique("revoked")
    created = await asyncio.to_thread(habitus, servers, "keys", "create", "--tenant", tenant)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    listed = await asyncio.to_thread(habitus, servers, "keys", "list", "--tenant", tenant,
                                     "--json")
    assert json.loads(listed.stdout)[0]["role"] == "agent"  # the CLI's default
    with two_gateways(servers) as gateways:
        # both have the key in their five-minute cache
        for base in gateways:
            assert await ingest(base, key) == 200
        revoked = await asyncio.to_thread(habitus, servers, "keys", "revoke", key)
        returned = time.monotonic()
        assert revoked.returncode == 0, revoked.stdout + revoked.stderr
        assert "running gateways refuse it now" in revoked.stdout

        async def first_refusal(base: str) -> float:
            while await ingest(base, key) != 401:
                assert time.monotonic() - returned < 30, f"{base} still takes the key"
                await asyncio.sleep(0.02)
            return time.monotonic() - returned

        took = await asyncio.gather(*(first_refusal(base) for base in gateways))
    # no cache entry could have expired (300 s): the announcement did it
    print(f"first refusal after `habitus keys revoke` returned: "
          f"{', '.join(f'{t * 1000:.0f} ms' for t in took)}")


async def test_keys_are_made_with_the_role_asked_for(servers: ServerUrls, pool: Any) -> None:
    tenant = unique("made")
    admin = await asyncio.to_thread(habitus, servers, "keys", "create", "--tenant", tenant,
                                    "--role", "tenant-admin", "--label", "ops")
    assert admin.returncode == 0, admin.stderr
    wrong = await asyncio.to_thread(habitus, servers, "keys", "create", "--tenant", tenant,
                                    "--role", "owner")
    assert wrong.returncode == 2 and "tenant-admin, agent" in wrong.stdout + wrong.stderr
    rows = await list_keys(pool, tenant)
    assert [(r["role"], r["label"]) for r in rows] == [("tenant-admin", "ops")]
