"""A client generated from the live `/openapi.json` by a tool nobody here wrote
(`openapi-python-client`) is whole, and works against the real services.

A document a validator accepts can still lose half the API in a generator: two components under
one class name make it drop both, an untyped result comes back as `None`, an error without a
schema as a bare status. So the suite generates a client the way an integrator would, fails on
any warning the generator prints, and then calls ingest, `prompt.context`,
`learning.list_facets` and a refused call through the generated code, checking that each answer
arrives as the generated model, not a dict or `None`.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.producers.main import build as producers
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

PACKAGE = "habitus_generated_client"
BIN = Path(sys.executable).parent


@pytest_asyncio.fixture(scope="module")
async def base(servers: ServerUrls) -> AsyncIterator[str]:
    migrate(servers.database)
    s = servers.settings()
    async with running(producers(), s), running(learning(LearningSettings()), s), \
            running(profile_renderer(), s), running(gateway, s) as host:
        yield f"http://127.0.0.1:{host.bound_port}"


@pytest_asyncio.fixture(scope="module")
async def generated(base: str, tmp_path_factory: pytest.TempPathFactory
                    ) -> AsyncIterator[tuple[ModuleType, str]]:
    """Generate the client from the running gateway's document; yield its package and what the
    generator printed."""
    root = tmp_path_factory.mktemp("generated")
    spec = root / "openapi.json"
    async with httpx.AsyncClient(verify=TLS) as http:
        spec.write_bytes((await http.get(f"{base}/openapi.json", timeout=10)).content)
    # The generator formats its output with ruff, which it finds on PATH: the venv's.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "openapi-python-client"), "generate", "--path", str(spec), "--meta", "none",
        "--output-path", str(root / PACKAGE), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=300)
    printed = out.decode()
    assert proc.returncode == 0, printed
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE), printed
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def mod(package: ModuleType, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


@pytest_asyncio.fixture
async def key(pool: Any) -> tuple[str, str]:
    tenant = unique("acme")
    return tenant, await create_key(pool, tenant)


async def test_the_generator_takes_the_whole_document_without_a_warning(
        generated: tuple[ModuleType, str]) -> None:
    package, printed = generated
    assert "warning" not in printed.lower(), printed
    models = mod(package, "models")
    # The models a generator used to drop: the error shapes, the facets, an explanation.
    for name in ("Error", "ErrorDetail", "IngestError", "Facet", "FacetList", "Explanation",
                 "IngestResponse", "PromptContext", "AgentTraceRef", "TraceRef"):
        assert hasattr(models, name), name


async def test_ingest_facets_prompt_and_a_refusal_through_the_generated_client(
        generated: tuple[ModuleType, str], base: str, key: tuple[str, str]) -> None:
    package, _ = generated
    models = mod(package, "models")
    _, secret = key
    client = package.AuthenticatedClient(base_url=base, token=secret, timeout=httpx.Timeout(30))
    user = unique("lena")
    said = "I'd rather you skip the intro and keep answers short."

    item = models.TurnRecordedItem(
        type_="TurnRecorded", user_id=user,
        payload=models.TurnRecorded(session_id="s1", turn_id=unique("t"), channel="chat",
                                    user_message=said, assistant_message="Understood.",
                                    user_at=time.time(), assistant_at=time.time()))
    ingest = mod(package, "api.ingest.ingest")
    answer = await asyncio.to_thread(ingest.sync, client=client, body=[item])
    assert isinstance(answer, models.IngestResponse), answer
    assert (answer.accepted, answer.rejected) == (1, 0)
    assert answer.results[0].status.value == "accepted"

    list_facets = mod(package, "api.learning.learning_list_facets")

    def facets() -> Any:
        got = list_facets.sync(client=client, body=models.ListFacets(user_id=user))
        assert isinstance(got, models.FacetListResponse), got
        return got.result

    deadline = time.monotonic() + 30
    listed = await asyncio.to_thread(facets)
    while not listed.facets and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        listed = await asyncio.to_thread(facets)
    assert isinstance(listed, models.FacetList)
    assert all(isinstance(f, models.Facet) for f in listed.facets)
    held = {(f.key, f.value) for f in listed.facets}
    assert ("verbosity", "terse") in held, held

    # The renderer applies the learning's change a moment later.
    context = mod(package, "api.prompt.prompt_context")

    def rendered() -> Any:
        got = context.sync(client=client, body=models.PromptContextParams(user_id=user))
        assert isinstance(got, models.PromptContextResponse), got
        return got

    prompt = await asyncio.to_thread(rendered)
    while not prompt.result.text and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        prompt = await asyncio.to_thread(rendered)
    assert isinstance(prompt.result, models.PromptContext)
    assert all(isinstance(s, models.Section) for s in prompt.result.sections)
    assert prompt.result.user_id == user
    assert "**style/verbosity**: terse" in prompt.result.text, prompt.result.text

    # Refused: a key nobody issued. A typed Error with the code, not `401 None`.
    stranger = package.AuthenticatedClient(base_url=base, token="hk_not_a_key",
                                           timeout=httpx.Timeout(30))
    refused = await asyncio.to_thread(
        list_facets.sync_detailed, client=stranger, body=models.ListFacets(user_id=user))
    assert refused.status_code == 401
    assert isinstance(refused.parsed, models.Error), refused.parsed
    assert refused.parsed.error.code == "unauthenticated"
    assert refused.parsed.error.message

    # Refused: a bad parameter, answered 400 with the field named, through the same types.
    bad = await asyncio.to_thread(
        list_facets.sync_detailed, client=client,
        body=models.ListFacets(user_id="not a user id"))
    assert bad.status_code == 400
    assert isinstance(bad.parsed, models.Error)
    assert bad.parsed.error.code == "invalid_argument"
    assert "user_id" in bad.parsed.error.message
