"""Small pure helpers: supervisor backoff, JSON log formatting, API key material."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from habitus.auth.keys import KEY_PREFIX, generate_key, hash_key, key_prefix
from habitus.runtime.supervisor import backoff_delay
from habitus.telemetry.logging import JsonFormatter

# --------------------------------------------------------------------------- backoff


def test_backoff_doubles_from_base() -> None:
    assert [backoff_delay(n) for n in range(0, 7)] == [0.5, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]


def test_backoff_caps() -> None:
    assert backoff_delay(7) == 30.0
    assert backoff_delay(100) == 30.0
    assert backoff_delay(1024) == 30.0


@pytest.mark.parametrize("restarts", [1025, 10_000])
def test_backoff_no_overflow_in_a_long_crash_loop(restarts: int) -> None:
    assert backoff_delay(restarts) == 30.0


def test_backoff_custom_base_and_cap() -> None:
    assert [backoff_delay(n, base=1, cap=5) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_backoff_is_monotonic_and_float() -> None:
    delays = [backoff_delay(n) for n in range(0, 50)]
    assert delays == sorted(delays)
    assert all(isinstance(d, float) for d in delays)
    assert all(0 < d <= 30.0 for d in delays)


def test_backoff_negative_restarts_is_base() -> None:
    assert backoff_delay(-3) == 0.5


# --------------------------------------------------------------------------- JSON logs


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("learning"))
    logger = logging.getLogger("habitus.tests.jsonfmt")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.handlers.clear()
        logger.propagate = True


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    out = stream.getvalue().splitlines()
    return [json.loads(line) for line in out]


def test_one_json_object_per_record(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    logger.info("hello %s", "world")
    logger.warning("multi\nline message")
    docs = lines(stream)
    assert len(docs) == 2
    first = docs[0]
    assert first["msg"] == "hello world"
    assert first["level"] == "info"
    assert first["service"] == "learning"
    assert first["logger"] == "habitus.tests.jsonfmt"
    assert isinstance(first["ts"], float)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", str(first["time"]))
    assert docs[1]["msg"] == "multi\nline message"
    assert docs[1]["level"] == "warning"


def test_extra_fields_kept(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    logger.info("applied", extra={"stream": "HABITUS_EVENTS", "seq": 42, "fields": ["a"],
                                  "obj": object()})
    (doc,) = lines(stream)
    assert doc["stream"] == "HABITUS_EVENTS"
    assert doc["seq"] == 42
    assert doc["fields"] == ["a"]
    assert str(doc["obj"]).startswith("<object object")  # non-JSON value stringified


def test_reserved_record_attributes_not_dumped(
    json_log: tuple[logging.Logger, io.StringIO]
) -> None:
    logger, stream = json_log
    logger.info("x")
    (doc,) = lines(stream)
    for noisy in ("args", "levelno", "pathname", "lineno", "msecs", "thread", "processName",
                  "exc_info", "exc_text", "stack_info", "message"):
        assert noisy not in doc
    assert set(doc) == {"ts", "time", "level", "service", "logger", "msg"}


def test_exception_included(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        logger.exception("boom", extra={"method": "learning.pin"})
    (doc,) = lines(stream)
    assert doc["level"] == "error"
    assert doc["msg"] == "boom"
    assert doc["method"] == "learning.pin"
    assert "ZeroDivisionError" in str(doc["exc"])
    assert "Traceback" in str(doc["exc"])
    assert len(stream.getvalue().strip().splitlines()) == 1


def test_no_exc_key_without_exception(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    logger.error("plain")
    assert "exc" not in lines(stream)[0]


def test_formatter_directly_on_a_record() -> None:
    record = logging.LogRecord("n", logging.DEBUG, __file__, 1, "v=%d", (3,), None)
    record.custom = "yes"
    out = JsonFormatter("svc").format(record)
    assert "\n" not in out
    doc = json.loads(out)
    assert doc["msg"] == "v=3"
    assert doc["level"] == "debug"
    assert doc["custom"] == "yes"
    assert doc["service"] == "svc"


# --------------------------------------------------------------------------- API keys


def test_generate_key_prefix_and_alphabet() -> None:
    key = generate_key()
    assert key.startswith(KEY_PREFIX)
    assert KEY_PREFIX == "hab_"
    body = key[len(KEY_PREFIX):]
    assert re.fullmatch(r"[A-Za-z0-9_-]+", body)
    # 32 random bytes, URL-safe base64 without padding: 43 characters = 256 bits
    assert len(body) == 43


def test_generate_key_is_unique() -> None:
    keys = {generate_key() for _ in range(500)}
    assert len(keys) == 500


def test_generate_key_has_entropy_in_every_position() -> None:
    bodies = [generate_key()[len(KEY_PREFIX):] for _ in range(300)]
    for pos in range(42):  # the last char carries only 4 bits
        assert len({b[pos] for b in bodies}) > 10, pos


def test_hash_key_is_stable_sha256_hex() -> None:
    assert hash_key("hab_secret") == hashlib.sha256(b"hab_secret").hexdigest()
    assert hash_key("hab_secret") == hash_key("hab_secret")
    assert re.fullmatch(r"[0-9a-f]{64}", hash_key(generate_key()))
    assert hash_key("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_hash_key_distinguishes_keys() -> None:
    assert hash_key("hab_a") != hash_key("hab_b")
    assert hash_key("hab_a") != hash_key("hab_a ")


def test_hash_key_utf8() -> None:
    assert hash_key("clé") == hashlib.sha256("clé".encode()).hexdigest()


def test_key_prefix_is_short_and_not_the_secret() -> None:
    key = generate_key()
    assert key_prefix(key) == key[:12]
    assert key_prefix(key).startswith(KEY_PREFIX)
    assert len(key_prefix(key)) < len(key)
