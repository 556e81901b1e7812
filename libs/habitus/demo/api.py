"""Talking to the gateway as the scenario's agents would: one tenant's key each, the public HTTP
API only (`POST /v1/events`, `POST /v1/rpc/<method>`, PROFILE.md).

`tenant_keys` makes those keys in the key table when the database is known (the demo's own
sandbox); without it every tenant acts through the one key given.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from habitus.auth.keys import create_key
from habitus.client import RetryPolicy
from habitus.client._http import retry_after
from habitus.demo.scenario import Scenario

#: items per POST /v1/events
BATCH = 25
#: How a batch the gateway pushes back (429: the pipeline is behind and this tenant sent more
#: than its share; 503: a dependency is down) is sent again: with habitus.client's backoff,
#: never sooner than Retry-After, and never past two minutes in all. A demo replays three
#: weeks as fast as it can, so on a busy machine it is the tenant the gateway slows down.
RESEND = RetryPolicy(backoff=0.25, max_backoff=10.0)
RESEND_FOR_SECONDS = 120.0


class Api:
    """One tenant's view of the gateway."""

    def __init__(self, base_url: str, key: str, timeout: float = 60.0):
        self.client = httpx.Client(base_url=base_url, timeout=timeout, trust_env=False,
                                   headers={"Authorization": f"Bearer {key}"})

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, **params: Any) -> httpx.Response:
        return self.client.post(f"/v1/rpc/{method}", json=params)

    def rpc(self, method: str, *, attempts: int = 1, **params: Any) -> Any:
        """The method's result. With `attempts` > 1 (idempotent commands only), a 504 (the
        change is recorded, but its views did not apply it within the gateway's deadline, as
        on a machine still starting every service) is asked again, which waits for the views
        once more."""
        response = self.call(method, **params)
        for _ in range(attempts - 1):
            if response.status_code != 504:
                break
            response = self.call(method, **params)
        if response.status_code != 200:
            raise RuntimeError(f"{method} answered {response.status_code}: {response.text}")
        return response.json()["result"]

    def send(self, items: Sequence[dict[str, Any]], *, sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> int:
        """Post one batch; pushed back (429, 503), it is sent again after the wait the gateway
        asks for (RESEND). Items carry their ids, so a batch sent twice is stored once."""
        give_up = clock() + RESEND_FOR_SECONDS
        attempt = 0
        while True:
            response = self.client.post("/v1/events", json=list(items))
            if response.status_code in (429, 503):
                attempt += 1
                wait = RESEND.delay(attempt, retry_after(response))
                if clock() + wait <= give_up:
                    sleep(wait)
                    continue
            if response.status_code not in (200, 202):
                raise RuntimeError(f"POST /v1/events answered {response.status_code}: "
                                   f"{response.text[:500]}")
            return int(response.json().get("accepted", len(items)))

    def profile_md(self, user: str) -> str:
        return self.client.get(f"/v1/users/{user}/profile.md").text


def apis(base_url: str, keys: dict[str, str]) -> dict[str, Api]:
    return {tenant: Api(base_url, key) for tenant, key in keys.items()}


def configure(api: dict[str, Api], scenario: Scenario) -> None:
    """What each tenant sets before its agents report (habits keep a month of turns)."""
    for t in scenario.tenants:
        # the first command of a sandbox whose services have just started: asked again when
        # its views were slower than the deadline (the same setting, so the same outcome)
        api[t.tenant_id].rpc("habits.configure", attempts=3, retention_days=t.retention_days)


def send(api: dict[str, Api], pairs: Sequence[tuple[str, dict[str, Any]]],
         on_batch: Callable[[int], None] | None = None) -> int:
    """Send the items in order, a batch at a time (a batch holds one tenant's items)."""
    accepted, i = 0, 0
    while i < len(pairs):
        tenant = pairs[i][0]
        batch: list[dict[str, Any]] = []
        while i < len(pairs) and pairs[i][0] == tenant and len(batch) < BATCH:
            batch.append(pairs[i][1])
            i += 1
        accepted += api[tenant].send(batch)
        if on_batch is not None:
            on_batch(len(batch))
    return accepted


def tenant_keys(scenario: Scenario, key: str, database_url: str | None) -> dict[str, str]:
    """A key per tenant of the scenario (made in the key table when the database is known;
    else every tenant acts through `key`'s own tenant)."""
    if database_url is None:
        return {t.tenant_id: key for t in scenario.tenants}

    async def make() -> dict[str, str]:
        async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False
                                       ) as pool:
            return {t.tenant_id: await create_key(pool, t.tenant_id, label="habitus demo")
                    for t in scenario.tenants}

    return asyncio.run(make())
