"""`habitus up` as an owner of processes: it restarts the servers it embeds, owns its data directory
alone, leaves nothing running when it is killed, and the CLI never waits on a stale runtime.json.

Each test runs the real `habitus up` (or the real embedded server) in a fresh directory on free
ports; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest

from habitus.runtime.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from habitus.runtime.lifetime import ProcessRef
from habitus.runtime.state import InstanceLock, write_runtime
from habitus.runtime.up import RPC_PROCESS_SUFFIX
from tests.support.http import TLS

REPO = Path(__file__).resolve().parents[2]


def _until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _clean_env(data_dir: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HABITUS_")}
    env.update(HABITUS_DATA_DIR=str(data_dir), HABITUS_HTTP_PORT=str(port))
    return env


class UpProcess:
    """`habitus up` in a child process; its output is collected by a thread as it comes."""

    def __init__(self, data_dir: Path, port: int, *args: str) -> None:
        self.data_dir = data_dir
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "habitus.cli", "up", *args], cwd=REPO,
            env=_clean_env(data_dir, port), text=True, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_line(self, pattern: str, timeout: float = 120.0, after: int = 0) -> str:
        regex = re.compile(pattern)
        found: list[str] = []

        def seen() -> bool:
            found.extend(line for line in self.lines[after:] if regex.search(line))
            if not found and self.proc.poll() is not None:
                self._reader.join(5)
                found.extend(line for line in self.lines[after:] if regex.search(line))
                if not found:
                    raise AssertionError(f"habitus up exited ({self.proc.returncode}):\n"
                                         + self.output)
            return bool(found)

        try:
            _until(seen, timeout, f"a line matching {pattern!r}")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.output}") from None
        return found[0]

    def wait_ready(self) -> None:
        self.wait_line(r"^Habitus is ready at")

    def runtime(self) -> dict[str, Any]:
        return dict(json.loads((self.data_dir / "runtime.json").read_text()))

    def children(self) -> dict[str, int]:
        """The live direct children of `habitus up`, by service or server name."""
        found: dict[str, int] = {}
        for child in psutil.Process(self.proc.pid).children():
            with_name = _child_name(child)
            if with_name is not None:
                found[with_name] = child.pid
        return found

    def child_pid(self, name: str) -> int | None:
        return self.children().get(name)


    def wait_readyz(self, timeout: float = 90.0) -> None:
        last: list[str] = []

        def ready() -> bool:
            try:
                response = httpx.get(f"{self.base_url}/readyz", timeout=3, verify=TLS)
            except httpx.HTTPError as exc:
                last[:] = [repr(exc)]
                return False
            last[:] = [response.text]
            return response.status_code == 200

        try:
            _until(ready, timeout, "/readyz 200")
        except AssertionError as err:  # what it last said, and what up said meanwhile
            raise AssertionError(f"{err}: {last}\n{self.output[-3000:]}") from None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return int(self.proc.returncode)


_SERVER_NAMES = {"nats-server": "nats", "postgres": "postgres", "redis-server": "redis"}


def _child_name(proc: psutil.Process) -> str | None:
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if proc.name() in _SERVER_NAMES:
            return _SERVER_NAMES[proc.name()]
        # A service forked by the fork server shows its command as a title, one string (what
        # `ps` prints): read it as words either way.
        argv = " ".join(proc.cmdline()).split()
    except psutil.Error:
        return None
    if "habitus.runtime.zygote" in argv:
        return "forkserver"
    if "serve" in argv and argv.index("serve") + 1 < len(argv):
        # A service's RPC process beside its own is named as `habitus up` names it.
        suffix = RPC_PROCESS_SUFFIX if argv[-2:] == ["--role", "rpc"] else ""
        return argv[argv.index("serve") + 1] + suffix
    return None


@pytest.fixture
def data_root() -> Iterator[Path]:
    """A directory outside pytest's tmp root: as root, Postgres runs as another user and needs
    o+x on every ancestor, which a concurrently starting pytest session takes away from
    /tmp/pytest-of-<user> (it resets that directory to 0700)."""
    root = Path(tempfile.mkdtemp(prefix="habitus-up-test-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ups() -> Iterator[list[UpProcess]]:
    started: list[UpProcess] = []
    yield started
    for up in reversed(started):
        up.stop()


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _habitus_cli(data_dir: Path, *args: str, timeout: float = 20.0
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "habitus.cli", *args], cwd=REPO,
                          env=_clean_env(data_dir, free_port()), capture_output=True, text=True,
                          timeout=timeout)


def _ingest_turn(base_url: str, key: str, turn_id: str) -> dict[str, Any]:
    turn = {"type": "TurnRecorded", "user_id": "u1", "payload": {
        "session_id": f"s-{turn_id}", "turn_id": turn_id, "channel": "cli",
        "user_message": "hello", "assistant_message": "hi", "user_at": 1_764_000_001.0,
        "assistant_at": 1_764_000_002.0}}
    deadline = time.monotonic() + 60
    while True:
        response = httpx.post(f"{base_url}/v1/events", json=[turn], timeout=10,
                              headers={"Authorization": f"Bearer {key}"}, verify=TLS)
        # Right after a server came back the pipeline is seconds behind, and the gateway asks
        # the only sender to wait (429 with Retry-After), as it would any client: wait it out.
        if response.status_code not in (429, 503) or time.monotonic() > deadline:
            break
        assert response.headers.get("retry-after"), response.headers
        time.sleep(min(float(response.headers["retry-after"]), 5.0))
    assert response.status_code == 200, response.text
    return dict(response.json()["results"][0])


def _key(data_dir: Path) -> str:
    return (data_dir / "dev-api-key").read_text().strip()


# -- embedded servers are supervised -------------------------------------------------------------

@pytest.mark.slow
def test_killed_servers_come_back_on_their_ports_and_the_services_reconnect(
    data_root: Path, ups: list[UpProcess]
) -> None:
    """With two replicas of each service (`--replicas 2`) sharing the partitions: each
    server killed in turn comes back, the services reconnect, and both replicas of each
    service own partitions again (`habitus partitions`)."""
    data_dir = data_root / "var"
    up = UpProcess(data_dir, free_port(), "--replicas", "2", "--partitions", "2")
    ups.append(up)
    up.wait_ready()
    assert any(line.startswith("  replicas: 2 of each of") for line in up.lines), up.output
    names = set(up.runtime()["children"])
    assert {"producers", "producers-2", "stability_detector", "stability_detector-2"} <= names
    assert "gateway-2" not in names and "profile_renderer_rpc-2" not in names
    urls = {k: v for k, v in up.runtime().items() if k.endswith("_url")}
    for name in ("nats", "postgres", "redis"):
        before = len(up.lines)
        old = up.child_pid(name)
        assert old is not None, up.children()
        os.kill(old, signal.SIGKILL)
        line = up.wait_line(rf"^  restarting {name} in ", timeout=30, after=before)
        assert "signal SIGKILL" in line
        _until(lambda n=name, o=old: up.child_pid(n) not in (None, o), 60,  # type: ignore[misc]
               f"{name} restarted")
        up.wait_readyz()
        assert {k: v for k, v in up.runtime().items() if k.endswith("_url")} == urls
        assert _ingest_turn(up.base_url, _key(up.data_dir), f"after-{name}")["status"] in (
            "accepted", "duplicate")
    restarts = [line for line in up.lines if line.startswith("  restarting ")]
    assert len(restarts) == 3, up.output

    def owners() -> dict[str, set[str]]:
        """Per service schema, the live replicas owning its partitions (a partition not yet
        claimed, or claimed by a replica whose lease lapsed, counts as nobody's)."""
        shown = _habitus_cli(data_dir, "partitions", "--json", timeout=60)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        found: dict[str, set[str]] = {}
        for part in json.loads(shown.stdout):
            owner = part["owner"] if part["owner_alive"] else None
            found.setdefault(part["projection"].split(".")[0], set()).add(str(owner))
        return found

    def shared() -> bool:
        by_schema = owners()
        return by_schema.get("learning") == {"stability_detector", "stability_detector-2"} \
            and by_schema.get("producers") == {"producers", "producers-2"}

    _until(shared, 60, "both replicas of each service to own partitions")
    table = _habitus_cli(data_dir, "partitions", timeout=60)
    assert "owners: " in table.stdout and "producers-2" in table.stdout, table.stdout


def test_postgres_restarts_although_a_backend_of_the_killed_postmaster_lives_on(
    data_root: Path
) -> None:
    server = EmbeddedPostgres(data_root, extra_options={"fsync": "off"})
    server.start()
    try:
        server.pin_ports()
        conn = psycopg.connect(server._conninfo("postgres"), autocommit=True)
        backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        # A stopped backend cannot notice that its postmaster died: it keeps the shared memory
        # attached, as a busy one would, and a new postmaster refuses the data directory.
        os.kill(backend, signal.SIGSTOP)
        postmaster = server.pid
        assert postmaster is not None
        os.kill(postmaster, signal.SIGKILL)
        _until(lambda: not server.is_running(), 10, "the postmaster to die")
        url = server.start(timeout=30)
        assert _gone(backend)
        with psycopg.connect(server._conninfo("postgres"), autocommit=True) as again:
            assert again.execute("SELECT 1").fetchone() == (1,)
        assert url == server.url
    finally:
        server.stop()


# -- one owner per data directory; nothing outlives it --------------------------------------------

@pytest.mark.slow
def test_a_second_up_is_refused_and_a_killed_up_leaves_nothing_running(
    data_root: Path, ups: list[UpProcess]
) -> None:
    data_dir = data_root / "var"
    first = UpProcess(data_dir, free_port())
    ups.append(first)
    first.wait_ready()
    children = first.children()
    assert set(children) >= {"nats", "postgres", "redis", "forkserver", "gateway", "producers",
                             "profile_renderer", "profile_renderer_rpc", "stability_detector",
                             "stability_detector_rpc", "tool_memory", "tool_memory_rpc",
                             "habits", "habits_rpc", "trace_router"}
    # What answers no reads yields the cores to what does (habitus.runtime.priority).
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    nice = {name: psutil.Process(children[name]).nice() for name in (
        "gateway", "producers", "profile_renderer", "profile_renderer_rpc", "stability_detector",
        "stability_detector_rpc", "tool_memory", "tool_memory_rpc", "trace_router")}
    assert nice == {"gateway": ours, "profile_renderer_rpc": ours,
                    "stability_detector_rpc": ours, "tool_memory_rpc": ours,
                    "trace_router": ours,  # one process: it answers its reads too
                    "producers": max(ours, 10), "profile_renderer": max(ours, 10),
                    "stability_detector": max(ours, 10), "tool_memory": max(ours, 10)}
    # the producers read statements in a process of their own, at the producers' priority
    producers = psutil.Process(children["producers"])

    def readers() -> list[psutil.Process]:
        return [p for p in producers.children() if "spawn_main" in " ".join(p.cmdline())]

    _until(lambda: len(readers()) == 1, 30, "the producers' reader process")
    assert readers()[0].nice() == max(ours, 10)

    second = subprocess.run(
        [sys.executable, "-m", "habitus.cli", "up"], cwd=REPO, text=True, capture_output=True,
        env=_clean_env(data_dir, free_port()), timeout=60)
    assert second.returncode != 0
    assert (f"already running on {data_dir} (pid {first.proc.pid}, {first.base_url})"
            in second.stderr + second.stdout)
    assert "stopping stale server" not in second.stderr + second.stdout
    assert all(not _gone(pid) for pid in children.values())
    assert first.children() == children
    first.wait_readyz(timeout=10)

    reader = readers()[0].pid
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(10)
    _until(lambda: all(_gone(pid) for pid in [*children.values(), reader]), 30,
           "every child of the killed habitus up to exit, and the producers' reader")

    # The CLI sees at once that the runtime.json left behind is stale.
    began = time.monotonic()
    keys = _habitus_cli(data_dir, "keys", "list")
    assert keys.returncode == 2, keys.stdout + keys.stderr
    assert "habitus up is not running" in keys.stdout + keys.stderr
    assert "Traceback" not in keys.stdout + keys.stderr
    assert time.monotonic() - began < 15  # bounded by the subprocess timeout anyway

    # The same port and directory are free again for the next start.
    again = UpProcess(data_dir, first.port)
    ups.append(again)
    again.wait_ready()
    assert again.stop() == 0


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)


def test_a_start_stops_what_a_crashed_run_left_and_nothing_else(
    data_root: Path, ups: list[UpProcess]
) -> None:
    data_dir = data_root / "var"
    data_dir.mkdir()
    service = _sleeper()  # a service of the crashed run
    server = EmbeddedRedis(data_dir)  # and one of its servers, on its data directory
    server.start()
    bystander = _sleeper()  # recorded with another start time: its pid was "reused"
    try:
        ref = ProcessRef.of(service.pid)
        server_ref = server.process_ref
        other = ProcessRef.of(bystander.pid)
        assert ref is not None and server_ref is not None and other is not None
        write_runtime(data_dir, {"pid": 1, "children": {
            "gateway": {"pid": ref.pid, "create_time": ref.create_time, "kind": "service"},
            "redis": {"pid": server_ref.pid, "create_time": server_ref.create_time,
                      "kind": "server", "stop_signal": int(server.stop_signal)},
            "nats": {"pid": other.pid, "create_time": other.create_time - 3600,
                     "kind": "server"},
        }})
        up = UpProcess(data_dir, free_port())
        ups.append(up)
        line = up.wait_line(r"cleaned up after a run that did not stop", timeout=60)
        assert f"gateway (pid {service.pid})" in line
        assert f"redis (pid {server_ref.pid})" in line
        assert "nats" not in line
        assert service.wait(10) is not None
        assert not server.is_running()
        assert bystander.poll() is None
        up.wait_ready()
    finally:
        server.stop()
        for proc in (service, bystander):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def test_a_gateway_port_in_use_is_reported_at_once(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "habitus.cli", "up"], cwd=REPO, text=True,
            capture_output=True, env=_clean_env(tmp_path / "var", port), timeout=60)
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stdout
    assert not (tmp_path / "var" / "runtime.json").exists()


# -- the CLI next to a runtime.json ---------------------------------------------------------------

def _closed_port_url(scheme: str) -> str:
    return f"{scheme}://127.0.0.1:{free_port()}"


def _stale_runtime(data_dir: Path) -> None:
    write_runtime(data_dir, {
        "pid": 999_999, "gateway": "http://127.0.0.1:1",
        "nats_url": _closed_port_url("nats"),
        "database_url": _closed_port_url("postgresql") + "/habitus",
        "redis_url": _closed_port_url("redis") + "/0",
    })


def test_a_stale_runtime_file_fails_fast_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    _stale_runtime(data_dir)
    result = _habitus_cli(data_dir, "keys", "list")
    assert result.returncode == 2
    out = (result.stdout + result.stderr).strip()
    assert "Traceback" not in out
    assert out.startswith(f"habitus up is not running on {data_dir}")
    assert len(out.splitlines()) == 1


def test_servers_that_do_not_answer_fail_fast_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    _stale_runtime(data_dir)
    lock = InstanceLock(data_dir)  # as if a live habitus up owned it, its servers down
    lock.acquire()
    try:
        result = _habitus_cli(data_dir, "keys", "list")
    finally:
        lock.release()
    assert result.returncode == 2
    out = (result.stdout + result.stderr).strip()
    assert "Traceback" not in out
    assert re.search(r"its \w+ server at 127\.0\.0\.1:\d+ does not answer", out), out
    assert len(out.splitlines()) == 1


def test_a_starting_up_is_reported_instead_of_a_missing_url(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    write_runtime(data_dir, {"pid": os.getpid(), "gateway": "http://127.0.0.1:1", "children": {}})
    lock = InstanceLock(data_dir)
    lock.acquire()
    try:
        result = _habitus_cli(data_dir, "keys", "list")
    finally:
        lock.release()
    assert result.returncode == 2
    out = (result.stdout + result.stderr).strip()
    assert "has not started its" in out and len(out.splitlines()) == 1, out

