"""`/docs` and `/redoc` work with no network: the HTML names no host but the gateway's own, and
every script, style sheet and icon it loads is served by the gateway from the installed package.

Before, Swagger UI came from a CDN, and on an air-gapped deployment `/docs` was a blank page.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import urljoin, urlparse

import httpx
import pytest
import pytest_asyncio

from services.gateway.main import service as gateway
from tests.conftest import ServerUrls
from tests.support.http import TLS
from tests.support.services import running

pytestmark = [pytest.mark.asyncio]

#: what a page loads: <script src>, <link href>, and the URL literals in its inline script
LOADED = re.compile(r"""(?:src|href)=["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""")


@pytest_asyncio.fixture(scope="module")
async def base(servers: ServerUrls) -> AsyncIterator[str]:
    async with running(gateway, servers.settings()) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_pages_load_everything_from_the_gateway(base: str, page: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=10, verify=TLS) as http:
        html = (await http.get(page)).raise_for_status().text
        loaded = [a or b for a, b in LOADED.findall(html)]
        assert any(u.endswith(".js") for u in loaded), html
        hosts = {urlparse(u).netloc for u in re.findall(r"""https?://[^\s"'<>)]+""", html)}
        assert hosts <= {urlparse(base).netloc}, hosts
        for url in loaded:
            answer = await http.get(urljoin(base + page, url))
            assert answer.status_code == 200, url
            assert len(answer.content) > 100, url
        document = (await http.get("/openapi.json")).json()
        assert "/v1/rpc/prompt.context" in document["paths"]


async def test_swagger_ui_sends_the_document_to_no_validator(base: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=10, verify=TLS) as http:
        html = (await http.get("/docs")).text
    assert '"validatorUrl": null' in html
