"""`habitus up` as a newcomer runs it: embedded servers, the ready line, a first ingest, Ctrl-C,
and a second start that finds the data again."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from habitus.bus.streams import INGEST
from habitus.config import Settings
from habitus.crypto.sealing import open_event
from habitus.crypto.setup import keyring_from
from habitus.runtime.embedded import free_port
from tests.support.http import TLS

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def start_up(data_dir: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HABITUS_")}
    env.update(HABITUS_DATA_DIR=str(data_dir), HABITUS_HTTP_PORT=str(port))
    return subprocess.Popen(
        [sys.executable, "-m", "habitus.cli", "up"], cwd=REPO, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )


def wait_ready(proc: subprocess.Popen[str], timeout: float = 120.0) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("habitus up exited early:\n" + "".join(lines))
        lines.append(line)
        if line.startswith("Habitus is ready at"):
            return lines
    raise AssertionError("no ready line:\n" + "".join(lines))


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGINT) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def printed_key(lines: list[str]) -> str:
    match = next(m for line in lines if (m := re.search(r"API key\s+(\S+)", line)))
    return match.group(1)


async def stored(nats_url: str, seq: int) -> bytes:
    nc = await nats.connect(nats_url)
    try:
        msg = await nc.jetstream().get_msg(INGEST, seq)
        return bytes(msg.data)
    finally:
        await nc.close()


def opened(event: bytes, data_dir: Path) -> dict[str, Any]:
    """The event opened with the keys of the `habitus up` on `data_dir` (its key store is
    `<data_dir>-keys`: the test's own HABITUS_KEYSTORE_DIR is not passed to it)."""
    keystore = data_dir.resolve().with_name(f"{data_dir.name}-keys")
    keyring = keyring_from(Settings(data_dir=data_dir, keystore_dir=keystore, kek=None,
                                    kek_file=None))
    assert keyring is not None
    return open_event(event, keyring)


@pytest.fixture
def data_root() -> Iterator[Path]:
    """Outside pytest's tmp root: as root, Postgres runs as another user and needs o+x on every
    ancestor, which a concurrently starting pytest session takes from /tmp/pytest-of-<user>."""
    root = Path(tempfile.mkdtemp(prefix="habitus-e2e-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def test_up_ingest_stop_and_restart_reuses_data(data_root: Path) -> None:
    data_dir = data_root / "var"
    port = free_port()
    proc = start_up(data_dir, port)
    try:
        lines = wait_ready(proc)
        key = printed_key(lines)
        assert f"http://127.0.0.1:{port}" in "".join(lines)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", verify=TLS) as client:
            turn = {"type": "TurnRecorded", "user_id": "alice", "payload": {
                "session_id": "s1", "turn_id": "t1", "channel": "cli",
                "user_message": "Shorter answers please", "assistant_message": "ok",
                "user_at": 1_764_000_001.0, "assistant_at": 1_764_000_002.0}}
            response = await client.post("/v1/events", json=[turn],
                                         headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
        result = response.json()["results"][0]
        runtime = json.loads((data_dir / "runtime.json").read_text())
        raw = await stored(runtime["nats_url"], result["seq"])
        event = json.loads(raw)
        assert event["type"] == "TurnRecorded"
        assert event["tenant_id"] == "dev"
        # sealed on the stream with alice's key, kept in the key store beside the data
        assert event["sealed"]["alg"] == "A256GCM"
        assert opened(raw, data_dir)["payload"]["user_message"] == "Shorter answers please"
    finally:
        code = stop(proc)
    assert code == 0
    assert not (data_dir / "runtime.json").exists()

    again = start_up(data_dir, port)
    try:
        lines = wait_ready(again)
        assert printed_key(lines) == key  # the dev key is kept with the data
        runtime = json.loads((data_dir / "runtime.json").read_text())
        event_again = await stored(runtime["nats_url"], result["seq"])
        assert json.loads(event_again)["event_id"] == result["event_id"]
        assert opened(event_again, data_dir)["payload"]["assistant_message"] == "ok"
    finally:
        assert stop(again, signal.SIGTERM) == 0
