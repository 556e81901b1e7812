"""The fork server: services forked from a process that imported them once, yet each a real
child of its owner, started as ``python -m`` would start it.

Each scenario runs in an owner process of its own (`tests.support.forkserver_owner`), since the
owner becomes a subreaper; the forked command (`tests.support.forked_child`) reports what it
found at its start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from habitus.runtime.forkserver import forkable

REPO = Path(__file__).resolve().parents[2]
#: a module the forked command does not import itself (light: each test starts its own zygote)
PRELOAD = ["csv"]


def _owner(scenario: str, work: Path, *preload: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.forkserver_owner", scenario, str(work),
         *(preload or PRELOAD)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "FORKED_ONLY_IN_OWNER": "the owner's own"})
    assert done.returncode == 0, done.stdout + done.stderr
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    result["said"] = done.stdout
    return result


def test_a_forked_command_is_its_owners_child_with_the_given_environment_and_log(
    tmp_path: Path,
) -> None:
    result = _owner("exit_status", tmp_path)
    report = result["report"]
    assert result["forked"] is True
    assert result["code"] == 3  # SystemExit(3) in the command is the status its owner reads
    assert report["ppid"] == result["owner"]  # re-parented: the owner waits for it
    assert report["session_leader"] is True  # its own session, as start_new_session gives
    assert report["probe"] == "given"
    assert report["inherited"] is None  # the environment is the one given, not the zygote's
    assert report["argv"] == ["3"]
    assert report["stdin"] == ""  # /dev/null, not the zygote's request pipe
    assert report["preloaded"] is True  # started with the preloaded modules in memory
    assert report["cmdline"] == f"{sys.executable} -m tests.support.forked_child 3"
    assert "to stderr" in result["log"]  # stdout and stderr both go to its log


def test_a_signal_that_kills_a_forked_process_is_its_exit_status(tmp_path: Path) -> None:
    result = _owner("killed", tmp_path)
    assert result == {**result, "forked": True, "code": -signal.SIGKILL}


def test_a_command_that_raises_exits_1_with_its_traceback_in_its_log(tmp_path: Path) -> None:
    result = _owner("raises", tmp_path)
    assert result["code"] == 1
    assert "RuntimeError: a service that fails at start" in result["log"]


def test_what_is_not_a_python_module_command_is_started_the_ordinary_way(
    tmp_path: Path,
) -> None:
    result = _owner("not_a_module", tmp_path)
    assert result["forked"] is False
    assert result["code"] == 4
    assert forkable([sys.executable, "-m", "habitus.cli", "serve", "x"]) == (
        "habitus.cli", ["serve", "x"])
    assert forkable(["/usr/bin/prometheus", "--config.file=x"]) is None
    assert forkable(["/some/other/python", "-m", "habitus.cli"]) is None


def test_a_killed_zygote_is_started_again_and_its_services_live_on(tmp_path: Path) -> None:
    result = _owner("zygote_dies", tmp_path)
    assert result["sleeper_survived"] is True  # forked services are not the zygote's children
    assert result["restarted"] is True
    assert result["forked"] is True and result["code"] == 5
    assert "fork server exited with -9; starting it again" in result["said"]


def test_the_supervisor_restarts_a_forked_service_that_exits(tmp_path: Path) -> None:
    result = _owner("supervised", tmp_path)
    assert result["history"] == [3, 3, 3]
    assert result["forked"] is True
    assert result["starts"] >= 3  # each start ran the command afresh, with its environment


def test_a_module_that_cannot_be_preloaded_is_not_fatal(tmp_path: Path) -> None:
    result = _owner("exit_status", tmp_path, "habitus.no_such_module", *PRELOAD)
    assert result["forked"] is True and result["code"] == 3


def test_a_forked_service_stops_when_its_owner_is_killed(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-m", "tests.support.forkserver_owner", "owner_killed", str(tmp_path),
         *PRELOAD],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pid = int(json.loads(owner.stdout.readline())["pid"])
        service = psutil.Process(pid)
        assert service.ppid() == owner.pid
        owner.kill()
        owner.wait(10)
        deadline = time.monotonic() + 20
        while service.is_running() and service.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the service outlived its owner"
            time.sleep(0.05)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


@pytest.mark.parametrize("line", [b"not json\n", b"[1, 2]\n", b'{"module": "x"}\n'])
def test_a_bad_request_gets_an_error_and_the_zygote_keeps_serving(line: bytes) -> None:
    zygote = subprocess.Popen(
        [sys.executable, "-m", "habitus.runtime.zygote"], cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert zygote.stdin is not None and zygote.stdout is not None
        assert json.loads(zygote.stdout.readline()) == {"ready": True, "failed": []}
        zygote.stdin.write(line)
        zygote.stdin.flush()
        answer = json.loads(zygote.stdout.readline())
        assert set(answer) == {"error"}
        zygote.stdin.write(b"{}\n")  # still answering
        zygote.stdin.flush()
        assert "no 'module'" in json.loads(zygote.stdout.readline())["error"]
        zygote.stdin.close()  # its owner gone: it exits
        assert zygote.wait(10) == 0
    finally:
        if zygote.poll() is None:
            zygote.kill()
            zygote.wait()


def test_orphans_adopted_as_a_subreaper_are_reaped_and_nothing_else(tmp_path: Path) -> None:
    result = _owner("adopted_orphans", tmp_path)
    assert result["zombies_before"] == [True, True]  # both exited, waiting to be reaped
    assert result["reaped"] == [result["orphan"]]  # only the adopted one
    assert result["zombie_after"] is False
    assert result["own_status"] == 6  # our own child's status was left for its owner to read


def test_a_zygote_forked_from_its_owner_serves_and_the_service_reads_its_own_settings(
    tmp_path: Path,
) -> None:
    # `habitus up` forks its zygote from itself before its event loop starts; the owner had
    # read its settings by then, and the service must not inherit them.
    result = _owner("preforked", tmp_path)
    said = [json.loads(line) for line in result["said"].splitlines() if line.startswith("{")]
    assert result["zygote"] == said[0]["preforked"]  # the preforked zygote, not a fresh one
    assert result["forked"] is True and result["code"] == 0
    assert result["report"]["ppid"] == result["owner"]
    assert result["report"]["metrics_port"] == 2222  # its environment, not the owner's 1111
