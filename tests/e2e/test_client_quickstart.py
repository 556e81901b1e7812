"""The client quick start, as written: the first code block of docs/client.md (which the
README embeds) runs against a stack started in-process, configured only by HABITUS_URL and
HABITUS_API_KEY, and what it claims holds: the stated preference is in the prompt within
seconds. examples/client_quickstart.py must be the same text, and runs as a script too."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.client import AsyncClient
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import learning_stack

pytestmark = [pytest.mark.slow]  # async tests run by asyncio_mode = "auto"

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "client.md"
EXAMPLE = ROOT / "examples" / "client_quickstart.py"
LEARNED = ("**style/verbosity**: terse", "**style/preamble**: skip")


def quick_start() -> str:
    found = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert found is not None, "docs/client.md has no python code block"
    return found.group(1)


def test_the_example_file_is_the_quick_start_of_the_docs() -> None:
    block = quick_start()
    assert EXAMPLE.read_text() == block
    assert len(block.strip().splitlines()) <= 12


def test_the_readme_embeds_the_same_quick_start() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert quick_start() in blocks, "the README's Python block is not docs/client.md's"


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    # the learning services as deployed: the scheduler turns settled evidence into rebuilds
    async with learning_stack(servers.database, servers.settings()) as url:
        yield url


async def learned(url: str, key: str, user: str, within: float = 10.0) -> str:
    async with AsyncClient(url, key) as habitus:
        deadline = time.monotonic() + within
        text = ""
        while time.monotonic() < deadline:
            text = (await habitus.context(user)).text
            if all(line in text for line in LEARNED):
                return text
            await asyncio.sleep(0.2)
    raise AssertionError(f"not in the prompt {within:g} s after the quick start:\n{text}")


async def test_the_quick_start_block_runs_and_its_user_is_learned(
        stack: str, pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    key = await create_key(pool, unique("quick"))  # its own tenant: "dana" is its own user
    monkeypatch.setenv("HABITUS_URL", stack)
    monkeypatch.setenv("HABITUS_API_KEY", key)
    out = io.StringIO()

    def run() -> None:  # off the loop: the sync client blocks, the stack serves on this loop
        with contextlib.redirect_stdout(out):
            exec(compile(quick_start(), str(DOC), "exec"), {"__name__": "__main__"})

    await asyncio.to_thread(run)  # it waits for the context to show what was said
    assert all(line in out.getvalue() for line in LEARNED), out.getvalue()
    text = await learned(stack, key, "dana")
    assert "*(set by the user)*" not in text  # said once: learned, not a setting


async def test_the_example_runs_as_a_script(stack: str, pool: Any) -> None:
    key = await create_key(pool, unique("quick"))
    env = {**os.environ, "HABITUS_URL": stack, "HABITUS_API_KEY": key}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    assert all(line in stdout.decode() for line in LEARNED), stdout.decode()
