"""`habitus up`: the whole system on one machine, from nothing but Python.

Fills in whatever the environment does not configure (embedded NATS, Postgres, Redis under
HABITUS_DATA_DIR), migrates, starts every service as a supervised process and the gateway, and
prints where to reach it. A second run reuses the data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from habitus.auth.keys import generate_key
from habitus.bus import connect, ensure_streams
from habitus.config import Settings
from habitus.db.migrate import migrate
from habitus.runtime.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedServer,
    free_port,
)
from habitus.runtime.supervisor import ProcessSpec, Supervisor

SERVICE_GROUP = "habitus.services"
RUNTIME_FILE = "runtime.json"
DEV_TENANT = "dev"


def service_names() -> list[str]:
    """Every installed service, the gateway last (it checks the others are ready)."""
    names = sorted(ep.name for ep in entry_points(group=SERVICE_GROUP))
    return [n for n in names if n != "gateway"] + (["gateway"] if "gateway" in names else [])


def dev_key(data_dir: Path) -> str:
    """A key for the local `dev` tenant, made once and kept with the data."""
    path = data_dir / "dev-api-key"
    if path.exists():
        return path.read_text().strip()
    key = generate_key()
    path.write_text(key + "\n")
    path.chmod(0o600)
    return key


def example_turn() -> dict[str, object]:
    now = round(time.time(), 3)
    return {
        "type": "TurnRecorded",
        "user_id": "alice",
        "payload": {
            "session_id": "s1", "turn_id": "t1", "channel": "cli",
            "user_message": "Shorter answers please, just code.",
            "assistant_message": "def add(a, b): return a + b",
            "user_at": now, "assistant_at": now + 2, "tool_calls": [],
        },
    }


def runtime_file(data_dir: Path) -> Path:
    return data_dir / RUNTIME_FILE


def _say(text: str) -> None:
    print(text, flush=True)


def _ready(url: str) -> bool:
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except Exception:
        return False


def run_demo(base_url: str, key: str) -> None:
    """Ingest a first turn through the gateway, exactly as the printed curl would."""
    body = json.dumps([example_turn()]).encode()
    request = urllib.request.Request(
        f"{base_url}/v1/events", data=body, method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        _say(f"  demo: POST /v1/events -> {response.status} {response.read().decode()}")


class Up:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.embedded: list[EmbeddedServer] = []
        self.supervisor = Supervisor()
        self.env: dict[str, str] = {}

    def start_infrastructure(self) -> dict[str, str]:
        s = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        urls = {"nats": s.nats_url, "database": s.database_url, "redis": s.redis_url}
        makers: dict[str, Callable[[], EmbeddedServer]] = {
            "nats": lambda: EmbeddedNats(self.data_dir),
            "database": lambda: EmbeddedPostgres(self.data_dir),
            "redis": lambda: EmbeddedRedis(self.data_dir),
        }
        for key, url in urls.items():
            if url:
                _say(f"  {key:<9} {url} (configured)")
                continue
            server = makers[key]()
            urls[key] = server.start(timeout=60)
            self.embedded.append(server)
            _say(f"  {key:<9} {urls[key]} (embedded, data in {server.home})")
        return {k: v for k, v in urls.items() if v}

    def stop_infrastructure(self) -> None:
        for server in reversed(self.embedded):
            with contextlib.suppress(Exception):
                server.stop()
        self.embedded.clear()

    async def run(self, ready_timeout: float = 120.0, demo: bool = False) -> int:
        s = self.settings
        _say("Habitus: starting")
        # Blocking work (server start-up, migrations) runs off the event loop, so Ctrl-C is
        # handled at once even while Postgres initialises.
        urls = await asyncio.to_thread(self.start_infrastructure)
        _say("  migrating")
        for result in await asyncio.to_thread(migrate, urls["database"]):
            _say(f"    {result.schema}: {result.before or 'empty'} -> {result.after}")
        nc = await connect(urls["nats"], "habitus-up")
        for r in await ensure_streams(nc.jetstream(), s):
            _say(f"    stream {r.name}: {r.action}")
        await nc.drain()

        key = dev_key(self.data_dir)
        names = service_names()
        others = [n for n in names if n != "gateway"]
        bootstrap = ",".join(filter(None, [s.bootstrap_keys, f"{DEV_TENANT}:{key}"]))
        base_env = {
            **os.environ,
            "HABITUS_NATS_URL": urls["nats"],
            "HABITUS_DATABASE_URL": urls["database"],
            "HABITUS_REDIS_URL": urls["redis"],
            "HABITUS_DATA_DIR": str(self.data_dir),
            "HABITUS_BOOTSTRAP_KEYS": bootstrap,
            "HABITUS_EXPECTED_SERVICES": ",".join(others),
            "HABITUS_PROFILE_MIRROR": os.environ.get("HABITUS_PROFILE_MIRROR", "true"),
        }
        logs = self.data_dir / "logs"
        for name in names:
            env = dict(base_env)
            if name != "gateway":
                env["HABITUS_METRICS_PORT"] = str(free_port())
            self.supervisor.add(ProcessSpec(
                name, [sys.executable, "-m", "habitus.cli", "serve", name], env,
                logs / f"{name}.log"))
        base_url = f"http://{s.http_host}:{s.http_port}"
        runtime_file(self.data_dir).write_text(json.dumps({
            "pid": os.getpid(), "gateway": base_url, **{f"{k}_url": v for k, v in urls.items()},
        }))
        _say(f"  services: {', '.join(names)} (logs in {logs})")
        deadline = time.monotonic() + ready_timeout
        while not await asyncio.to_thread(_ready, f"{base_url}/readyz"):
            if time.monotonic() > deadline:
                _say(f"Habitus did not become ready in {ready_timeout:.0f}s; see {logs}")
                return 1
            await asyncio.sleep(0.3)
        _say("")
        _say(f"  gateway   {base_url}   (OpenAPI: {base_url}/docs)")
        _say(f"  API key   {key}   (tenant '{DEV_TENANT}')")
        _say(f"  try       curl -s -X POST {base_url}/v1/events "
             f"-H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' "
             f"-d '{json.dumps([example_turn()])}'")
        _say("")
        _say(f"Habitus is ready at {base_url} (Ctrl-C to stop)")
        if demo:
            await asyncio.to_thread(run_demo, base_url, key)
        return 0

    async def shutdown(self) -> None:
        _say("Habitus: stopping")
        await self.supervisor.stop()
        await asyncio.to_thread(self.stop_infrastructure)
        with contextlib.suppress(FileNotFoundError):
            runtime_file(self.data_dir).unlink()
        _say("Habitus: stopped")


async def up(settings: Settings, demo: bool = False) -> int:
    runner = Up(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        start = asyncio.create_task(runner.run(demo=demo))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({start, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if start in done:
            code = start.result()
            if code != 0:
                return code
            await stop.wait()
        else:
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await start
        return 0
    finally:
        await runner.shutdown()
