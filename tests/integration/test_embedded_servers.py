"""The embedded servers really run, keep their data across restarts, and clean up after crashes.

Every server here is started on a port from free_port(), never a standard one: the machine may run
system NATS/Postgres/Redis on 4222/5432/6379, and these tests must neither use nor disturb them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import psutil
import psycopg
import pytest
import redis

from habitus.runtime.embedded import (
    STANDARD_PORTS,
    EmbeddedNats,
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedServer,
    EmbeddedServerError,
    free_port,
    wait_for_tcp,
)

FAST_PG = {"fsync": "off", "synchronous_commit": "off"}


@pytest.fixture
def cleanup() -> Iterator[list[EmbeddedServer]]:
    """Servers appended here are stopped even when the test fails."""
    servers: list[EmbeddedServer] = []
    yield servers
    for server in reversed(servers):
        server.stop()


def _direct_get(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        return int(response.status)


def test_free_port_never_hands_out_standard_or_duplicate_ports() -> None:
    ports = [free_port() for _ in range(50)]
    assert not set(ports) & STANDARD_PORTS
    assert len(set(ports)) == len(ports)


def test_free_ports_come_from_below_the_ephemeral_range_and_are_bindable() -> None:
    """The source port of an outgoing connection comes from the kernel's ephemeral range; a
    port handed out from there could be taken by a database connection and held while a pinned
    server waits for it (a test's `habitus up` gateway restarted for minutes on exit code 3)."""
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    held = []
    for port in (free_port() for _ in range(20)):
        assert port < ephemeral
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))  # free, as said
        held.append(sock)
    for sock in held:
        sock.close()


def test_wait_for_tcp() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert wait_for_tcp("127.0.0.1", listener.getsockname()[1], timeout=2)
    assert not wait_for_tcp("127.0.0.1", free_port(), timeout=0.3)


# -- NATS ---------------------------------------------------------------------------------------


async def _publish_two_and_consume_one(url: str) -> None:
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        await js.add_stream(name="EMBEDDED", subjects=["embedded.>"])
        first = await js.publish("embedded.one", b"first")
        second = await js.publish("embedded.two", b"second")
        assert (first.seq, second.seq) == (1, 2)
        sub = await js.pull_subscribe("embedded.>", durable="reader")
        [msg] = await sub.fetch(1, timeout=5)
        assert msg.data == b"first"
        await msg.ack_sync()
    finally:
        await nc.close()


async def _read_back_after_restart(url: str) -> None:
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        info = await js.stream_info("EMBEDDED")
        assert info.state.messages == 2
        stored = await js.get_msg("EMBEDDED", 1)
        assert stored.data == b"first"
        # The durable consumer's ack position survived too: it resumes at the second message.
        sub = await js.pull_subscribe("embedded.>", durable="reader")
        [msg] = await sub.fetch(1, timeout=5)
        assert msg.data == b"second"
        await msg.ack_sync()
    finally:
        await nc.close()


def test_nats_jetstream_roundtrip_restart_keeps_stream(
    tmp_path: Path, cleanup: list[EmbeddedServer]
) -> None:
    server = EmbeddedNats(tmp_path)
    cleanup.append(server)
    assert server.port not in STANDARD_PORTS
    assert server.monitor_port not in STANDARD_PORTS

    url = server.start()
    assert url == f"nats://127.0.0.1:{server.port}"
    assert server.is_running()
    assert _direct_get(f"{server.monitor_url}/healthz?js-enabled-only=true") == 200
    assert server.start() == url  # already running: no-op
    asyncio.run(_publish_two_and_consume_one(url))

    server.stop()
    assert not server.is_running()
    server.stop()  # idempotent
    assert not wait_for_tcp("127.0.0.1", server.port, timeout=0.2)

    assert server.start() == url  # same port on restart
    asyncio.run(_read_back_after_restart(url))
    assert (server.store_dir / "jetstream").is_dir()


# -- Postgres -----------------------------------------------------------------------------------


def test_postgres_roundtrip_restart_keeps_rows(
    tmp_path: Path, cleanup: list[EmbeddedServer]
) -> None:
    server = EmbeddedPostgres(tmp_path, database="habitus_test", extra_options=FAST_PG)
    cleanup.append(server)
    assert server.port not in STANDARD_PORTS

    url = server.start()
    assert url == f"postgresql://postgres@127.0.0.1:{server.port}/habitus_test"
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("habitus_test",)
        assert conn.execute("SHOW max_connections").fetchone() == ("200",)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL)")
        conn.execute("INSERT INTO notes VALUES (1, 'kept across restarts')")
        assert conn.execute("SELECT body FROM notes").fetchall() == [("kept across restarts",)]

    server.stop()
    assert not server.is_running()
    server.stop()  # idempotent
    assert not (server.pgdata / "postmaster.pid").exists()  # a clean shutdown

    assert server.start() == url
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT body FROM notes WHERE id = 1").fetchone() == (
            "kept across restarts",
        )


def test_postgres_bad_option_raises_with_log_tail(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path, extra_options={**FAST_PG, "no_such_setting": "1"})
    with pytest.raises(EmbeddedServerError, match="no_such_setting"):
        server.start(timeout=30)
    assert not server.is_running()
    server.stop()


# -- Redis --------------------------------------------------------------------------------------


def test_redis_roundtrip_and_restart(tmp_path: Path, cleanup: list[EmbeddedServer]) -> None:
    server = EmbeddedRedis(tmp_path)
    cleanup.append(server)
    assert server.port not in STANDARD_PORTS

    url = server.start()
    assert url == f"redis://127.0.0.1:{server.port}/0"
    client = redis.Redis.from_url(url)
    try:
        assert client.set("greeting", "hello")
        assert client.get("greeting") == b"hello"
    finally:
        client.close()

    server.stop()
    server.stop()  # idempotent
    assert not server.is_running()
    assert server.start() == url
    client = redis.Redis.from_url(url)
    try:
        assert client.ping()
    finally:
        client.close()
    assert not list(server.home.glob("*.rdb"))  # a cache: nothing is snapshotted


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        assert server.is_running()
        pid = server.pid
        assert pid is not None
    assert not server.is_running()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_pinned_port_in_use_raises_with_log_tail(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        server = EmbeddedRedis(tmp_path, port=squatter.getsockname()[1])
        with pytest.raises(EmbeddedServerError, match=r"(?i)address already in use"):
            server.start(timeout=10)
    assert not server.is_running()


def test_auto_port_taken_before_start_is_repicked(
    tmp_path: Path, cleanup: list[EmbeddedServer]
) -> None:
    server = EmbeddedRedis(tmp_path)
    cleanup.append(server)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        taken = server.port
        url = server.start(timeout=20)
    assert server.port != taken
    assert server.port not in STANDARD_PORTS
    assert url.endswith(f":{server.port}/0")


# -- a server left behind by a crashed owner ----------------------------------------------------

_CRASHING_OWNER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path

    import psycopg

    from habitus.runtime.embedded import EmbeddedNats, EmbeddedPostgres, EmbeddedRedis

    kind, data_dir = sys.argv[1], Path(sys.argv[2])
    if kind == "postgres":
        server = EmbeddedPostgres(data_dir, extra_options={"fsync": "off"})
    else:
        server = {"nats": EmbeddedNats, "redis": EmbeddedRedis}[kind](data_dir)
    url = server.start()
    if kind == "postgres":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE survivors (name text)")
            conn.execute("INSERT INTO survivors VALUES ('written before the crash')")
    print(server.pid, flush=True)
    os._exit(0)  # the owner dies without stop(): its server keeps running
    """
)


def _kill_if_alive(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("kind", ["postgres", "nats", "redis"])
def test_stale_server_from_crashed_owner_is_stopped(
    kind: str, tmp_path: Path, cleanup: list[EmbeddedServer]
) -> None:
    owner = subprocess.run(
        [sys.executable, "-c", _CRASHING_OWNER, kind, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert owner.returncode == 0, owner.stderr
    stale_pid = int(owner.stdout.split()[0])
    try:
        assert psutil.pid_exists(stale_pid), "the crashed owner's server should still run"

        server: EmbeddedServer
        if kind == "postgres":
            server = EmbeddedPostgres(tmp_path, extra_options=FAST_PG)
        elif kind == "nats":
            server = EmbeddedNats(tmp_path)
        else:
            server = EmbeddedRedis(tmp_path)
        cleanup.append(server)
        url = server.start()

        assert _gone(stale_pid), "the stale server must be stopped before the new start"
        assert server.pid != stale_pid
        if kind == "postgres":
            with psycopg.connect(url) as conn:
                assert conn.execute("SELECT name FROM survivors").fetchall() == [
                    ("written before the crash",)
                ]
        elif kind == "redis":
            client = redis.Redis.from_url(url)
            try:
                assert client.ping()
            finally:
                client.close()
        else:
            assert isinstance(server, EmbeddedNats)
            assert _direct_get(f"{server.monitor_url}/healthz") == 200
    finally:
        _kill_if_alive(stale_pid)


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a system user needs root")
def test_processes_creating_the_postgres_user_at_once_agree_on_one_uid() -> None:
    """Two test workers (or two `habitus up`) starting Postgres as root on a fresh machine both
    find the user missing; useradd refuses to run while another holds the passwd lock ("cannot
    lock /etc/passwd"), so creation is serialised by a lock of ours and re-checked under it."""
    import pwd
    import uuid

    name = f"habitus_t{uuid.uuid4().hex[:8]}"
    code = ("import sys; from habitus.runtime.embedded.permissions import _ensure_system_user"
            " as ensure; print(ensure(sys.argv[1]).uid)")
    try:
        children = [subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE,
                                     text=True) for _ in range(4)]
        uids = {int(child.communicate(timeout=60)[0]) for child in children}
        assert [child.returncode for child in children] == [0, 0, 0, 0]
        assert uids == {pwd.getpwnam(name).pw_uid}
    finally:
        subprocess.run(["userdel", name], capture_output=True)
