"""The owner's side of the fork-server tests, run as a process of its own.

The fork server makes its owner a subreaper (orphaned descendants become its children), which
must not happen to a pytest worker; so each test runs one scenario here, ``python -m
tests.support.forkserver_owner <scenario> <dir>``, and reads the JSON line it prints.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

from habitus.runtime.forkserver import ForkedProcess, ForkServer, Preforked, prefork
from habitus.runtime.lifetime import reap_adopted_orphans
from habitus.runtime.supervisor import ProcessSpec, Supervisor

CHILD = [sys.executable, "-m", "tests.support.forked_child"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FORKED_ONLY_IN_OWNER"}
    return {**env, "FORKED_PROBE": "given"}


def _report(log: Path) -> dict[str, Any]:
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            return dict(json.loads(line))
    return {}


async def _until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.02)


async def exit_status(work: Path, server: ForkServer) -> dict[str, Any]:
    spec = ProcessSpec("child", [*CHILD, "3"], {}, work / "child.log")
    proc = await server.launch(spec, _env())
    code = await proc.wait()
    return {"forked": isinstance(proc, ForkedProcess), "code": code, "pid": proc.pid,
            "report": _report(spec.log_path), "log": spec.log_path.read_text()}


async def killed(work: Path, server: ForkServer) -> dict[str, Any]:
    spec = ProcessSpec("sleeper", [*CHILD, "sleep"], {}, work / "sleeper.log")
    proc = await server.launch(spec, _env())
    await _until(lambda: bool(_report(spec.log_path)))
    proc.send_signal(signal.SIGKILL)
    return {"forked": isinstance(proc, ForkedProcess), "code": await proc.wait()}


async def raises(work: Path, server: ForkServer) -> dict[str, Any]:
    spec = ProcessSpec("raiser", [*CHILD, "raise"], {}, work / "raiser.log")
    proc = await server.launch(spec, _env())
    return {"code": await proc.wait(), "log": spec.log_path.read_text()}


async def not_a_module(work: Path, server: ForkServer) -> dict[str, Any]:
    spec = ProcessSpec("script", [sys.executable, "-c", "raise SystemExit(4)"], {},
                       work / "script.log")
    proc = await server.launch(spec, _env())
    return {"forked": isinstance(proc, ForkedProcess), "code": await proc.wait()}


async def zygote_dies(work: Path, server: ForkServer) -> dict[str, Any]:
    first = ProcessSpec("first", [*CHILD, "sleep"], {}, work / "first.log")
    sleeper = await server.launch(first, _env())
    before = server.process_ref
    assert before is not None
    os.kill(before.pid, signal.SIGKILL)
    await _until(lambda: server.process_ref is None)
    second = ProcessSpec("second", [*CHILD, "5"], {}, work / "second.log")
    proc = await server.launch(second, _env())
    code = await proc.wait()
    after = server.process_ref
    survived = sleeper.returncode is None
    sleeper.send_signal(signal.SIGTERM)
    await sleeper.wait()
    return {"forked": isinstance(proc, ForkedProcess), "code": code, "sleeper_survived": survived,
            "restarted": after is not None and after.pid != before.pid}


async def supervised(work: Path, server: ForkServer) -> dict[str, Any]:
    supervisor = Supervisor(launch=server.launch, backoff=lambda _: 0.05)
    child = supervisor.add(ProcessSpec("flaky", [*CHILD, "3"], _env(), work / "flaky.log"))
    try:
        await _until(lambda: len(child.history) >= 3)
        kinds = isinstance(child.process, ForkedProcess)
    finally:
        await supervisor.stop()
    return {"history": child.history[:3], "forked": kinds,
            "starts": work.joinpath("flaky.log").read_text().count('"probe": "given"')}


async def owner_killed(work: Path, server: ForkServer) -> dict[str, Any]:
    spec = ProcessSpec("orphan", [*CHILD, "sleep"], {}, work / "orphan.log")
    proc = await server.launch(spec, _env())
    await _until(lambda: bool(_report(spec.log_path)))
    print(json.dumps({"pid": proc.pid}), flush=True)
    await asyncio.sleep(600)  # the test SIGKILLs us here
    return {}


async def adopted_orphans(work: Path, server: ForkServer) -> dict[str, Any]:
    # A shell that leaves a short sleep behind: the sleep is adopted, exits, and is a zombie
    # of ours until reaped; the shell itself (a session leader, like all we start) is not.
    await server.launch(ProcessSpec("probe", [*CHILD, "0"], {}, work / "probe.log"), _env())
    spec = ProcessSpec("shell", ["/bin/sh", "-c", "sleep 0.2 & echo $!"], {},
                       work / "shell.log")
    shell = await server.launch(spec, _env())
    await shell.wait()
    orphan = int(spec.log_path.read_text().split()[0])
    # And one of our own that exited and is not yet waited for: it leads its session.
    own = subprocess.Popen(["/bin/sh", "-c", "exit 6"], start_new_session=True)  # noqa: ASYNC220 - waited for below, after the reap
    await asyncio.sleep(0.6)
    zombies_before = [_is_zombie_child(orphan), _is_zombie_child(own.pid)]
    reaped = reap_adopted_orphans()
    return {"orphan": orphan, "zombies_before": zombies_before, "reaped": reaped,
            "zombie_after": _is_zombie_child(orphan), "own_status": own.wait(5)}


def _is_zombie_child(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return bool(proc.ppid() == os.getpid() and proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


async def preforked(work: Path, server: ForkServer) -> dict[str, Any]:
    # `main` forked the zygote from this process (see below) after reading its settings with
    # HABITUS_METRICS_PORT=1111; the service is given 2222.
    spec = ProcessSpec("child", [*CHILD, "0"], {}, work / "child.log")
    proc = await server.launch(spec, {**_env(), "HABITUS_METRICS_PORT": "2222"})
    code = await proc.wait()
    zygote = server.process_ref
    return {"forked": isinstance(proc, ForkedProcess), "code": code,
            "report": _report(spec.log_path), "zygote": zygote.pid if zygote else None}


SCENARIOS: dict[str, Callable[[Path, ForkServer], Awaitable[dict[str, Any]]]] = {
    f.__name__: f
    for f in (exit_status, killed, raises, not_a_module, zygote_dies, supervised, owner_killed,
              adopted_orphans, preforked)
}


async def main(scenario: str, work: Path, preload: list[str],
               early: Preforked | None = None) -> None:
    server = ForkServer(preload, work / "forkserver.log", preforked=early)
    server.start()
    try:
        result = await SCENARIOS[scenario](work, server)
    finally:
        await server.stop()
    print(json.dumps({"owner": os.getpid(), **result}), flush=True)


if __name__ == "__main__":
    early = None
    if sys.argv[1] == "preforked":  # as `habitus up` does: settings read, then the fork
        from habitus.config import get_settings

        os.environ["HABITUS_METRICS_PORT"] = "1111"
        assert get_settings().metrics_port == 1111
        early = prefork(sys.argv[3:])
        assert early is not None
        print(json.dumps({"preforked": early.pid}), flush=True)
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:], early))
