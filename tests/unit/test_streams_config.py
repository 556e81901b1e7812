"""Stream definitions: retention per stream, disjoint subjects, and change detection."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from habitus.bus.streams import DLQ, EVENTS, INGEST, _differs, stream_configs, stream_for
from habitus.config import Settings
from habitus.subjects import (
    dlq_subject,
    event_subject,
    ingest_subject,
    rpc_subject,
)

DAY = 86_400


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HABITUS_"):
            monkeypatch.delenv(name)


def by_name(settings: Settings | None = None) -> dict[str, StreamConfig]:
    return {c.name: c for c in stream_configs(settings or Settings())}  # type: ignore[misc]


def test_three_streams() -> None:
    assert set(by_name()) == {INGEST, EVENTS, DLQ}
    assert (INGEST, EVENTS, DLQ) == ("HABITUS_INGEST", "HABITUS_EVENTS", "HABITUS_DLQ")


def test_ingest_max_age_is_raw_retention() -> None:
    assert by_name()[INGEST].max_age == 7 * DAY
    assert by_name(Settings(raw_retention_days=1.5))[INGEST].max_age == 1.5 * DAY


def test_ingest_max_age_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_RAW_RETENTION_DAYS", "2")
    assert by_name(Settings())[INGEST].max_age == 2 * DAY


def test_ingest_discards_old() -> None:
    assert by_name()[INGEST].discard == DiscardPolicy.OLD


def test_events_is_kept_forever_and_append_only() -> None:
    events = by_name(Settings(raw_retention_days=1, dlq_retention_days=1))[EVENTS]
    assert not events.max_age  # 0 / None: no max age
    assert events.discard == DiscardPolicy.NEW
    assert events.deny_delete is True
    # purging by subject must stay possible: it is how a user is erased
    assert not events.deny_purge
    assert events.retention == RetentionPolicy.LIMITS


def test_events_storage_is_file_by_default() -> None:
    for cfg in by_name().values():
        assert cfg.storage == StorageType.FILE
    for cfg in by_name(Settings(stream_storage="memory")).values():
        assert cfg.storage == StorageType.MEMORY


def test_dlq_thirty_days() -> None:
    assert by_name()[DLQ].max_age == 30 * DAY
    assert by_name(Settings(dlq_retention_days=3))[DLQ].max_age == 3 * DAY


def test_common_settings() -> None:
    s = Settings(duplicate_window_seconds=42, stream_replicas=3)
    for cfg in stream_configs(s):
        assert cfg.duplicate_window == 42
        assert cfg.num_replicas == 3
        assert cfg.retention == RetentionPolicy.LIMITS


def _overlap(a: str, b: str) -> bool:
    """Whether two NATS subject filters can match a common subject."""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and "*" not in (x, y):
            return False
    return True


def test_overlap_helper() -> None:
    assert _overlap("a.>", "a.b.c")
    assert _overlap("a.*.c", "a.b.>")
    assert not _overlap("a.b.>", "a.c.>")
    assert not _overlap("a.>", "a")
    assert not _overlap("a.b", "a.b.c")


def test_stream_subjects_do_not_overlap() -> None:
    subjects = [(c.name, s) for c in stream_configs(Settings()) for s in c.subjects or []]
    for i, (na, a) in enumerate(subjects):
        for nb, b in subjects[i + 1:]:
            assert not _overlap(a, b), (na, a, nb, b)


def test_each_family_lands_in_exactly_its_stream() -> None:
    samples = {
        INGEST: ingest_subject("turn", "acme", "u1"),
        EVENTS: event_subject("CandidateEmitted", "acme", "u1"),
        DLQ: dlq_subject("learning", "acme", "u1"),
    }
    configs = by_name()
    for stream, subject in samples.items():
        owners = [n for n, c in configs.items() if any(_overlap(f, subject)
                                                       for f in c.subjects or [])]
        assert owners == [stream], (subject, owners)


def test_rpc_subjects_are_not_captured_by_any_stream() -> None:
    rpc = rpc_subject("learning.pin_facet")
    for cfg in stream_configs(Settings()):
        assert not any(_overlap(f, rpc) for f in cfg.subjects or []), cfg.name


def test_stream_for() -> None:
    assert stream_for("ingest") == INGEST
    assert stream_for("events") == EVENTS
    assert stream_for("dlq") == DLQ
    with pytest.raises(KeyError):
        stream_for("other")


# --------------------------------------------------------------------------- _differs


def _as_server_returns(cfg: StreamConfig) -> StreamConfig:
    """Round-trip through the wire form (durations in nanoseconds, enums as strings)."""
    raw: dict[str, Any] = {
        k: (v.value if hasattr(v, "value") else v) for k, v in cfg.as_dict().items()
    }
    return StreamConfig.from_response(raw)


@pytest.mark.parametrize("name", [INGEST, EVENTS, DLQ])
def test_identical_config_does_not_differ(name: str) -> None:
    wanted = by_name()[name]
    assert _differs(dataclasses.replace(wanted), wanted) == []


@pytest.mark.parametrize("name", [INGEST, EVENTS, DLQ])
def test_config_read_back_from_server_does_not_differ(name: str) -> None:
    wanted = by_name()[name]
    assert _differs(_as_server_returns(by_name()[name]), wanted) == []


def test_changed_max_age_is_detected() -> None:
    current = _as_server_returns(by_name()[INGEST])
    wanted = by_name(Settings(raw_retention_days=14))[INGEST]
    assert _differs(current, wanted) == ["max_age"]


def test_changed_dlq_retention_is_detected() -> None:
    current = by_name()[DLQ]
    wanted = by_name(Settings(dlq_retention_days=31))[DLQ]
    assert _differs(current, wanted) == ["max_age"]


def test_events_max_age_none_vs_zero_is_the_same() -> None:
    wanted = by_name()[EVENTS]
    current = dataclasses.replace(wanted, max_age=None)
    assert _differs(current, wanted) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"subjects": ["habitus.v1.ingest.turn.>"]}, "subjects"),
        ({"discard": DiscardPolicy.NEW}, "discard"),
        ({"deny_delete": True}, "deny_delete"),
        ({"duplicate_window": 5.0}, "duplicate_window"),
        ({"num_replicas": 3}, "num_replicas"),
        ({"description": "other"}, "description"),
        ({"allow_direct": False}, "allow_direct"),
    ],
)
def test_other_changes_detected(change: dict[str, Any], field: str) -> None:
    wanted = by_name()[INGEST]
    current = dataclasses.replace(wanted, **change)
    assert _differs(current, wanted) == [field]


def test_sub_microsecond_float_noise_is_ignored() -> None:
    wanted = by_name()[INGEST]
    current = dataclasses.replace(wanted, max_age=wanted.max_age + 1e-9)  # type: ignore[operator]
    assert _differs(current, wanted) == []
