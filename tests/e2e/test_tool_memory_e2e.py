""""Never email Sarah" end to end: a turn through the gateway of `habitus up` becomes a critical
rule in `prompt.context`; it is still there after every service restarted (the whole of
`habitus up`, on the same data), after `habitus replay tools.rules` (the same ids and rows), and
`habitus rules` shows it from a shell."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from habitus.runtime.embedded import free_port
from tests.e2e.test_habitus_up import REPO, data_root, printed_key, start_up, stop, wait_ready
from tests.support.http import TLS

pytestmark = [pytest.mark.slow]
SARAH = "Never email Sarah at sarah@example.com."
__all__ = ["data_root"]  # the fixture, shared


def habitus_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HABITUS_")}
    env["HABITUS_DATA_DIR"] = str(data_dir)
    return subprocess.run([sys.executable, "-m", "habitus.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


async def rpc(base: str, key: str, method: str, **params: Any) -> Any:
    async with httpx.AsyncClient(base_url=base, timeout=30, verify=TLS) as client:
        response = await client.post(f"/v1/rpc/{method}", json=params,
                                     headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    return response.json()["result"]


async def pinned(base: str, key: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        context = await rpc(base, key, "prompt.context", user_id="alice", tools=["send_email"])
        if f"- **[critical]** {SARAH}" in context["text"]:
            return str(context["text"])
        if time.monotonic() > deadline:
            raise AssertionError(f"the rule never reached the prompt: {context['text']!r}")
        await asyncio.sleep(0.2)


async def rules(base: str, key: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The user's rules as tool-memory lists them, once it lists any: the prompt is the
    renderer's view and can show a rule a moment before tool-memory's own list answers it."""
    deadline = time.monotonic() + timeout
    while True:
        found = list((await rpc(base, key, "memory.tool_rule_list", user_id="alice"))["rules"])
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.2)


async def test_never_email_sarah_survives_restarts_and_replay(data_root: Path) -> None:
    data_dir = data_root / "var"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_up(data_dir, port)
    try:
        key = printed_key(wait_ready(proc))
        turn = {"type": "TurnRecorded", "user_id": "alice", "payload": {
            "session_id": "s1", "turn_id": "t1", "channel": "chat", "user_message": SARAH,
            "assistant_message": "Understood.", "user_at": 1_764_000_000.0,
            "assistant_at": 1_764_000_002.0,
            "tool_calls": [{"tool_name": "send_email", "ok": True}]}}
        async with httpx.AsyncClient(base_url=base, verify=TLS) as client:
            response = await client.post("/v1/events", json=[turn],
                                         headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
        await pinned(base, key)
        before = await rules(base, key)
        assert [(r["tool_name"], r["priority"]) for r in before] == [("send_email", "critical")]
    finally:
        assert stop(proc) == 0

    proc = start_up(data_dir, port)  # every service again, on the same data
    try:
        assert printed_key(wait_ready(proc)) == key
        await pinned(base, key)
        assert await rules(base, key) == before

        for projection in ("tools.capture", "tools.rules"):
            # capture again from the turns (publishing nothing new: its consequences were
            # published before), then the rules from the events
            replayed = await asyncio.to_thread(habitus_cli, data_dir, "replay", projection)
            assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        deadline = time.monotonic() + 30
        while await rules(base, key) != before:
            assert time.monotonic() < deadline, "the replay did not rebuild the same rows"
            await asyncio.sleep(0.2)
        await pinned(base, key)

        shown = await asyncio.to_thread(habitus_cli, data_dir, "rules", "list", "--user",
                                        "alice", "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert json.loads(shown.stdout) == before
    finally:
        assert stop(proc) == 0
