"""The extractor with no LLM configured: it starts, says why once, folds no material, answers
its reads, refuses re-extraction, and is ready (not failing) with the reason in /readyz; an
erasure does not wait for the views it does not build, even after it once ran enabled."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from habitus.auth.keys import create_key
from habitus.llm import LlmSettings
from habitus.service.migrations import migrate
from services.extractor.main import build as extractor
from services.extractor.settings import ExtractorSettings
from services.gateway.main import service as gateway
from tests.conftest import ServerUrls
from tests.support.factories import turn_item, unique
from tests.support.http import TLS
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


async def test_without_an_endpoint_the_extractor_is_disabled_not_failing(
        servers: ServerUrls, pool: Any, caplog: pytest.LogCaptureFixture) -> None:
    migrate(servers.database)
    settings = servers.settings()
    off = ExtractorSettings(llm=LlmSettings(base_url=None, model=None))
    with caplog.at_level(logging.WARNING):
        async with running(extractor(off), settings) as host, \
                running(gateway, settings) as gw:
            said = [r for r in caplog.records if "disabled" in r.getMessage()]
            assert len([r for r in said if r.name == "services.extractor.main"]) == 1
            async with httpx.AsyncClient(timeout=10, verify=TLS) as client:
                ready = await client.get(f"http://127.0.0.1:{host.bound_port}/readyz")
                assert ready.status_code == 200
                body = ready.json()
                assert body["status"] == "ready"
                assert body["details"] == {
                    "extractor": "disabled: HABITUS_LLM_BASE_URL is unset"}

                tenant = unique("acme")
                headers = {"Authorization": f"Bearer {await create_key(pool, tenant)}"}
                base = f"http://127.0.0.1:{gw.bound_port}"
                user = unique("dana")
                sent = await client.post(f"{base}/v1/events", headers=headers, json=[
                    turn_item(user, "We moved the site to Astro.")])
                assert sent.status_code in (200, 202)
                status = await client.post(f"{base}/v1/rpc/extraction.status",
                                           headers=headers, json={"user_id": user})
                assert status.status_code == 200
                result = status.json()["result"]
                assert (result["enabled"], result["reason"]) == (
                    False, "HABITUS_LLM_BASE_URL is unset")
                refused = await client.post(f"{base}/v1/rpc/extraction.reextract",
                                            headers=headers, json={"since": 0})
                assert refused.status_code == 409
                assert "disabled" in refused.json()["error"]["message"]
            # it folded nothing: its projections only pass over the material
            assert sorted(type(r.projection).__name__ for r in host.runners) == [
                "Erasure_extractor", "PausedRequestsProjection", "PausedWindowsProjection"]
            async with pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM extractor.open_windows WHERE tenant_id = %s",
                    (tenant,))
                assert (await cur.fetchone())[0] == 0


async def test_an_extractor_disabled_after_it_ran_does_not_hold_up_an_erasure(
        servers: ServerUrls, nc: Any) -> None:
    """Enabled once (its checkpoints exist, behind the stream), then run with no model: an
    erasure used to wait for its windows until the deadline and answer 504, and the user's
    data stayed. Its projections now pass over what arrives, so the erasure goes through.

    A database of its own: the erasure waits for every view that exists, and in the shared
    one earlier modules' services left views that nothing here runs."""
    from habitus.db.pool import open_pool
    from tests.support.services import isolated_database, skip_history

    off = ExtractorSettings(llm=LlmSettings(base_url=None, model=None))
    tenant, user = unique("acme"), unique("dana")
    with isolated_database(servers.database) as database:
        # what an enabled run left behind: the checkpoints, at the stream's end of that time
        for projection in ("extractor.windows", "extractor.requests"):
            await skip_history(database, servers.nats, "extractor", projection)
        settings = servers.settings(database_url=database)
        own = await open_pool(database, min_size=1, max_size=2, name="test")
        try:
            headers = {"Authorization": f"Bearer {await create_key(own, tenant)}"}
            async with running(extractor(off), settings), running(gateway, settings) as gw:
                base = f"http://127.0.0.1:{gw.bound_port}"
                async with httpx.AsyncClient(timeout=30, verify=TLS) as client:
                    sent = await client.post(f"{base}/v1/events", headers=headers, json=[
                        turn_item(user, "Please keep answers short.")])
                    assert sent.status_code in (200, 202), sent.text
                    erased = await client.post(f"{base}/v1/rpc/admin.erase_user",
                                               headers=headers, json={"user_id": user})
                    assert erased.status_code == 200, erased.text
            async with own.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM extractor.open_windows WHERE tenant_id = %s",
                    (tenant,))
                assert (await cur.fetchone())[0] == 0
        finally:
            await own.close()
