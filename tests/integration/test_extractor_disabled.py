"""The extractor with no LLM configured: it starts, says why once, folds no material, answers
its reads, refuses re-extraction, and is ready (not failing) with the reason in /readyz."""

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
            async with httpx.AsyncClient(timeout=10) as client:
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
            # it folded nothing: no runner of its material ever started
            assert [r.projection.name for r in host.runners] == ["extractor.erasure"]
            async with pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM extractor.open_windows WHERE tenant_id = %s",
                    (tenant,))
                assert (await cur.fetchone())[0] == 0
