"""Settings: environment first; blank URLs mean "embedded"; bootstrap keys parsing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from habitus.config import Settings, _parse_pairs


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HABITUS_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    s = Settings()
    assert s.nats_url is None and s.database_url is None and s.redis_url is None
    assert s.data_dir == Path("./var")
    assert s.http_port == 8080
    assert s.raw_retention_days == 7.0
    assert s.dlq_retention_days == 30.0
    assert s.bootstrap_key_pairs() == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("acme:k1", [("acme", "k1")]),
        ("acme:k1,beta:k2", [("acme", "k1"), ("beta", "k2")]),
        ("  acme : k1 ,\tbeta:k2  ", [("acme", "k1"), ("beta", "k2")]),
        ("acme:k1,,beta:k2,", [("acme", "k1"), ("beta", "k2")]),
        (" , ,", []),
        ("", []),
        ("acme:key:with:colons", [("acme", "key:with:colons")]),
        ("acme:k1,acme:k2", [("acme", "k1"), ("acme", "k2")]),
    ],
)
def test_bootstrap_keys_pairs(monkeypatch: pytest.MonkeyPatch, raw: str,
                              expected: list[tuple[str, str]]) -> None:
    monkeypatch.setenv("HABITUS_BOOTSTRAP_KEYS", raw)
    assert Settings().bootstrap_key_pairs() == expected


@pytest.mark.parametrize("bad", ["acme", "acme:", ":key", " : ", "acme:k1,broken", "acme:  "])
def test_bootstrap_keys_bad_entry_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                     bad: str) -> None:
    monkeypatch.setenv("HABITUS_BOOTSTRAP_KEYS", bad)
    with pytest.raises(ValueError, match="HABITUS_BOOTSTRAP_KEYS") as info:
        Settings().bootstrap_key_pairs()
    assert "tenant:key" in str(info.value)


def test_bad_entry_message_quotes_the_entry() -> None:
    with pytest.raises(ValueError, match="'broken'"):
        _parse_pairs("acme:k1, broken ", "X")


@pytest.mark.parametrize(
    ("env", "attr"),
    [
        ("HABITUS_NATS_URL", "nats_url"),
        ("HABITUS_DATABASE_URL", "database_url"),
        ("HABITUS_REDIS_URL", "redis_url"),
    ],
)
@pytest.mark.parametrize("blank", ["", " ", "\t", "  \n"])
def test_blank_url_is_unset(monkeypatch: pytest.MonkeyPatch, env: str, attr: str,
                            blank: str) -> None:
    monkeypatch.setenv(env, blank)
    assert getattr(Settings(), attr) is None


@pytest.mark.parametrize(
    ("env", "attr", "value"),
    [
        ("HABITUS_NATS_URL", "nats_url", "nats://n:4222"),
        ("HABITUS_DATABASE_URL", "database_url", "postgresql://u@h/db"),
        ("HABITUS_REDIS_URL", "redis_url", "redis://r:6379/0"),
    ],
)
def test_url_env_is_read(monkeypatch: pytest.MonkeyPatch, env: str, attr: str,
                         value: str) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(Settings(), attr) == value


def test_numeric_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_RAW_RETENTION_DAYS", "1.5")
    monkeypatch.setenv("HABITUS_HTTP_PORT", "9999")
    s = Settings()
    assert s.raw_retention_days == 1.5
    assert s.http_port == 9999


def test_stream_storage_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_STREAM_STORAGE", "memory")
    assert Settings().stream_storage == "memory"
    monkeypatch.setenv("HABITUS_STREAM_STORAGE", "disk")
    with pytest.raises(ValidationError):
        Settings()


def test_expected_services_and_admin_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_EXPECTED_SERVICES", " learning , ,profile,")
    monkeypatch.setenv("HABITUS_ADMIN_KEYS", "k1, k2 ,")
    s = Settings()
    assert s.expected_service_list() == ["learning", "profile"]
    assert s.admin_key_list() == ["k1", "k2"]
