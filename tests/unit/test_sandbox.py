"""The demo's sandbox: settings that name none of the user's system, a directory that only a
sandbox's removal deletes, and a demo-mode `habitus up` that refuses any other directory."""

from __future__ import annotations

from pathlib import Path

from habitus.config import Settings
from habitus.demo import sandbox
from habitus.demo.system import DemoGuest
from habitus.runtime.embedded.ports import STANDARD_PORTS
from habitus.runtime.up import Up

#: a user's own system as their shell names it (dead ports: nothing here may connect)
USERS_OWN = {
    "HABITUS_NATS_URL": "nats://127.0.0.1:1",
    "HABITUS_DATABASE_URL": "postgresql://me@127.0.0.1:2/mine",
    "HABITUS_REDIS_URL": "redis://127.0.0.1:3/0",
    "HABITUS_DATA_DIR": "./var",
    "HABITUS_HTTP_PORT": "8080",
    "HABITUS_ADMIN_KEYS": "hab_admin",
}


def users_settings(tmp_path: Path) -> Settings:
    return Settings(nats_url=USERS_OWN["HABITUS_NATS_URL"],
                    database_url=USERS_OWN["HABITUS_DATABASE_URL"],
                    redis_url=USERS_OWN["HABITUS_REDIS_URL"], data_dir=tmp_path / "var",
                    http_host="0.0.0.0", http_port=8080, bootstrap_keys="me:hab_mine",
                    admin_keys="hab_admin", raw_retention_days=3.0)


def test_a_sandbox_names_none_of_the_users_system(tmp_path: Path) -> None:
    made = sandbox.create(users_settings(tmp_path), USERS_OWN, parent=tmp_path)
    s = made.settings
    assert (s.nats_url, s.database_url, s.redis_url) == (None, None, None)  # embedded ones
    assert s.data_dir == made.data_dir and made.data_dir.parent == tmp_path.resolve()
    assert made.data_dir.name.startswith(sandbox.PREFIX)
    assert s.data_dir != (tmp_path / "var").resolve()
    assert s.http_host == "127.0.0.1"
    assert s.http_port != 8080 and s.http_port not in STANDARD_PORTS
    assert (s.bootstrap_keys, s.admin_keys) == ("", "")
    assert s.raw_retention_days == 3.0  # what does not name the user's system stays
    assert set(made.ignored) == set(USERS_OWN)
    assert sandbox.is_sandbox(s)
    other = sandbox.create(users_settings(tmp_path), {}, parent=tmp_path)
    assert other.data_dir != made.data_dir and other.ignored == ()


def test_only_a_marked_directory_without_servers_is_a_sandbox(tmp_path: Path) -> None:
    assert not sandbox.is_sandbox(Settings(data_dir=tmp_path))
    (tmp_path / sandbox.MARKER).write_text("")
    assert sandbox.is_sandbox(Settings(data_dir=tmp_path))
    assert not sandbox.is_sandbox(Settings(data_dir=tmp_path,
                                           database_url=USERS_OWN["HABITUS_DATABASE_URL"]))


def test_removal_deletes_a_sandbox_and_nothing_else(tmp_path: Path) -> None:
    users = tmp_path / "var"
    (users / "postgres").mkdir(parents=True)
    (users / "dev-api-key").write_text("hab_mine\n")
    refused = sandbox.remove(users)
    assert refused is not None and "not a demo sandbox" in refused
    assert (users / "dev-api-key").read_text() == "hab_mine\n"

    made = sandbox.create(Settings(data_dir=users), {}, parent=tmp_path)
    (made.data_dir / "postgres" / "pgdata").mkdir(parents=True)
    (made.data_dir / "postgres" / "pgdata" / "PG_VERSION").write_text("16\n")
    assert sandbox.remove(made.data_dir) is None
    assert not made.data_dir.exists()
    assert (users / "dev-api-key").exists()


async def test_demo_mode_refuses_a_directory_that_is_not_a_sandbox(tmp_path: Path) -> None:
    for settings in (Settings(data_dir=tmp_path / "var"),
                     sandbox.create(Settings(), {}, parent=tmp_path).settings.model_copy(
                         update={"database_url": USERS_OWN["HABITUS_DATABASE_URL"]})):
        runner = Up(settings, guest=DemoGuest(keep=False))
        try:
            assert await runner.run() == 1
        finally:
            await runner.shutdown()
        assert not (settings.data_dir / "up.lock").exists()  # not even claimed
    assert not (tmp_path / "var").exists()
