"""`make demo` next to a user's own `make run`: the demo runs in a sandbox of its own and leaves
the user's system as it was.

The user's system is `habitus up` started the way `make run` starts it: from a directory of its
own (its data in `./var` there), with the gateway port a user might export (HABITUS_HTTP_PORT).
Alice tells it a standing preference, a tool rule ("Never email Sarah", with the send_email
call), and more material for the extractor, which is off there (no model): material that the
demo's scripted model would summarise if the demo's services ever saw it.

Then `habitus demo`, the real command, three times from the same directory and the same shell:
once while the user's system runs, with its server URLs exported (HABITUS_NATS_URL, ...: what
a user pointing their tools at it has set), and twice in a row after it stopped. Each must meet
every expectation of its scenario, say where its sandbox is (under TMPDIR) and remove it.
Afterwards the user's system, started again, answers alice's facets, rules, extraction status
(the summaries), habits and PROFILE.md byte for byte as before, its streams hold the same
subjects and counts, its tables hold rows for no other tenant, and while it was stopped not one
byte of `./var` changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import psycopg
import pytest

from habitus.bus.streams import EVENTS, INGEST
from habitus.demo.scenario import build_scenario
from habitus.runtime.embedded import free_port
from habitus.subjects import EVENT_ROOT, INGEST_ROOT
from tests.e2e.test_habitus_up import printed_key, stop, wait_ready
from tests.support.http import TLS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USER = "alice"
SYSTEM = "_system"
SARAH = "Never email Sarah at sarah@example.com."
#: the reads compared byte for byte: (method, params) of the user's facets, rules, summaries
READS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("learning.list_facets", {"user_id": USER}),
    ("memory.tool_rule_list", {"user_id": USER}),
    ("extraction.status", {"user_id": USER}),
    ("habits.list", {"user_id": USER}),
)
#: the scenario's tenants, which the user's system must never hold
DEMO_TENANTS = frozenset(t.tenant_id for t in build_scenario(0.0).tenants)
SANDBOX_LINE = re.compile(r"Habitus demo: in a sandbox of its own, (\S+)")


@pytest.fixture
def data_root() -> Iterator[Path]:
    # Outside pytest's tmp root (see tests/e2e/test_habitus_up.py: Postgres as root).
    root = Path(tempfile.mkdtemp(prefix="habitus-sandbox-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def shell(root: Path, port: int) -> dict[str, str]:
    """The user's shell: no HABITUS_* but their gateway port, and a TMPDIR we can look into."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HABITUS_")}
    env.update(HABITUS_HTTP_PORT=str(port), TMPDIR=str(root / "tmp"))
    return env


def make_run(home: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`make run`: `habitus up` from `home`, so its data is `home/var` (the default ./var)."""
    return subprocess.Popen([sys.executable, "-m", "habitus.cli", "up"], cwd=home, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def make_demo(home: Path, env: dict[str, str]) -> str:
    """`make demo` from the same place and shell; its output, once it met every expectation."""
    done = subprocess.run([sys.executable, "-m", "habitus.cli", "demo"], cwd=home, env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=400)
    assert done.returncode == 0, done.stdout
    assert "every expectation of the scenario met" in done.stdout, done.stdout
    return done.stdout


def alice_turns(now: float) -> list[dict[str, Any]]:
    said = [("From now on, no preamble.", "Understood.", []),
            (SARAH, "Understood.", [{"tool_name": "send_email", "ok": True}]),
            ("I'm preparing the quarterly report on churn for the board.", "Here is a draft.",
             [])]
    return [{"type": "TurnRecorded", "user_id": USER, "payload": {
        "session_id": "s1", "turn_id": f"t{n}", "channel": "chat", "user_message": message,
        "assistant_message": reply, "user_at": now + 20 * n, "assistant_at": now + 20 * n + 2,
        "tool_calls": calls}} for n, (message, reply, calls) in enumerate(said, start=1)]


async def rpc(client: httpx.AsyncClient, method: str, **params: Any) -> httpx.Response:
    response = await client.post(f"/v1/rpc/{method}", json=params)
    assert response.status_code == 200, f"{method}: {response.text}"
    return response


async def settled(client: httpx.AsyncClient, timeout: float = 60.0) -> None:
    """Until alice's statement is a facet, her rule is listed and her PROFILE.md shows the
    facet (the renderer applies after the learning cache, and `habitus up` runs its
    projection process at a lower CPU priority: it may be the last to catch up)."""
    deadline = time.monotonic() + timeout
    while True:
        facets = (await rpc(client, "learning.list_facets", user_id=USER)).json()["result"]
        rules = (await rpc(client, "memory.tool_rule_list", user_id=USER)).json()["result"]
        profile = (await client.get(f"/v1/users/{USER}/profile.md")).text
        if (facets["facets"] and facets["pending_since"] is None and rules["rules"]
                and "**preamble**" in profile):
            return
        assert time.monotonic() < deadline, (facets, rules, profile)
        await asyncio.sleep(0.3)


async def snapshot(client: httpx.AsyncClient) -> dict[str, bytes]:
    """What alice's system answers about her, as the bytes it sends."""
    got = {method: (await rpc(client, method, **params)).content for method, params in READS}
    profile = await client.get(f"/v1/users/{USER}/profile.md")
    assert profile.status_code == 200, profile.text
    got["profile.md"] = profile.content
    return got


async def subjects(nats_url: str) -> dict[str, int]:
    """Every subject the user's streams hold for a tenant, with its message count: the tenant
    is a token of the subject, so a demo tenant written there would be a new subject. (The
    `_system` subjects are left out: each start of `habitus up` publishes a rebuild request.)"""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        out: dict[str, int] = {}
        for stream, root in ((INGEST, INGEST_ROOT), (EVENTS, EVENT_ROOT)):
            info = await js.stream_info(stream, subjects_filter=f"{root}.>")
            out.update({subject: n for subject, n in (info.state.subjects or {}).items()
                        if f".{SYSTEM}." not in subject})
        return out
    finally:
        await nc.close()


async def consumers(nats_url: str) -> dict[str, tuple[int, int]]:
    """How far each durable consumer has read (delivered, acknowledged): alice's turns wait
    unread for the disabled extractor, and any extractor with a model reading them would
    summarise them."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        return {f"{stream}/{c.name}": (c.delivered.stream_seq, c.ack_floor.stream_seq)
                for stream in (INGEST, EVENTS) for c in await js.consumers_info(stream)}
    finally:
        await nc.close()


def tenants_in_tables(database_url: str) -> set[str]:
    """Every tenant any table of the user's database holds a row for."""
    found: set[str] = set()
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.columns "
            "JOIN information_schema.tables USING (table_schema, table_name) "
            "WHERE column_name = 'tenant_id' AND table_type = 'BASE TABLE'").fetchall()
        for schema, table in tables:
            rows = conn.execute(f'SELECT DISTINCT tenant_id FROM "{schema}"."{table}" '
                                "WHERE tenant_id IS NOT NULL").fetchall()
            found.update(str(row[0]) for row in rows)
    return found


def tree_digest(root: Path) -> dict[str, str]:
    """Each file under `root` (relative path) and the SHA-256 of its bytes."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file() and not path.is_symlink()}


def check_sandbox(output: str, root: Path, home: Path, port: int) -> None:
    match = SANDBOX_LINE.search(output)
    assert match, output
    sandbox = Path(match.group(1))
    assert sandbox.parent == (root / "tmp").resolve(), sandbox  # a fresh temporary directory
    assert not sandbox.exists(), f"{sandbox} left behind"
    assert f"Habitus demo: removed its sandbox {sandbox}" in output
    assert f"http://127.0.0.1:{port}" not in output  # never the user's gateway port
    assert "**[critical]**" in output  # PROFILE.md's rule priority, not eaten as markup
    # nothing else where it ran: the user's data, and its key store beside it
    assert sorted(p.name for p in home.iterdir()) == ["var", "var-keys"]


async def test_demos_leave_the_users_own_system_byte_for_byte_as_it_was(data_root: Path) -> None:
    home = data_root / "home"
    home.mkdir()
    (data_root / "tmp").mkdir()
    port = free_port()
    env = shell(data_root, port)
    base = f"http://127.0.0.1:{port}"

    user = make_run(home, env)
    try:
        key = printed_key(wait_ready(user))
        runtime = json.loads((home / "var" / "runtime.json").read_text())
        async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False,
                                     headers={"Authorization": f"Bearer {key}"},
                                     verify=TLS) as client:
            sent = await client.post("/v1/events", json=alice_turns(time.time() - 600))
            assert sent.status_code == 200, sent.text
            await settled(client)
            before = await snapshot(client)
            assert json.loads(before["extraction.status"])["result"]["enabled"] is False
            subjects_before = await subjects(runtime["nats_url"])
            consumers_before = await consumers(runtime["nats_url"])
            tenants_before = await asyncio.to_thread(tenants_in_tables,
                                                     runtime["database_url"])
            assert "dev" in tenants_before and not tenants_before & DEMO_TENANTS

            # A demo while it runs, from a shell that names its servers.
            urls = {f"HABITUS_{name.upper()}": runtime[name]
                    for name in ("nats_url", "database_url", "redis_url")}
            demo_env = {**env, **urls}
            output = await asyncio.to_thread(make_demo, home, demo_env)
            check_sandbox(output, data_root, home, port)
            for variable in (*urls, "HABITUS_HTTP_PORT"):
                assert variable in output.split("not used by the demo", 1)[1].splitlines()[0]
            assert await snapshot(client) == before
            assert await subjects(runtime["nats_url"]) == subjects_before
            assert await consumers(runtime["nats_url"]) == consumers_before
    finally:
        assert stop(user) == 0

    # Two demos in a row after it stopped: not one byte of ./var may change.
    stopped = tree_digest(home / "var"), tree_digest(home / "var-keys")
    for _ in range(2):
        output = await asyncio.to_thread(make_demo, home, demo_env)
        check_sandbox(output, data_root, home, port)
        assert (tree_digest(home / "var"), tree_digest(home / "var-keys")) == stopped
    assert not list((data_root / "tmp").glob("habitus-demo-*"))

    user = make_run(home, env)
    try:
        assert printed_key(wait_ready(user)) == key
        runtime = json.loads((home / "var" / "runtime.json").read_text())
        async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False,
                                     headers={"Authorization": f"Bearer {key}"},
                                     verify=TLS) as client:
            await settled(client)
            after = await snapshot(client)
        for name, content in before.items():
            assert after[name] == content, f"{name} changed:\n{content!r}\n{after[name]!r}"
        assert await subjects(runtime["nats_url"]) == subjects_before
        assert await asyncio.to_thread(tenants_in_tables,
                                       runtime["database_url"]) == tenants_before
    finally:
        assert stop(user) == 0
