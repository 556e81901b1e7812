"""The encoded-bank cache: what it gives back is what the encoder gives, it is read from disk
once stored, and a damaged or foreign file is never believed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from habitus import encoder
from habitus.encoder_cache import ENV, cache_dir, encode_cached, key_of

TEXTS = ["Please keep answers short.", "Bitte antworte auf Deutsch.", "Call me Sam."]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENV, str(tmp_path / "encoded"))
    return tmp_path / "encoded"


def test_the_first_call_encodes_and_stores_and_a_later_one_reads_the_store(folder: Path
                                                                             ) -> None:
    first = encode_cached(TEXTS)
    assert np.allclose(first, encoder.encode(TEXTS), atol=1e-6)
    stored = folder / f"{key_of(TEXTS)}.npy"
    assert stored.is_file() and not list(folder.glob("*.tmp"))
    # the rows on disk are what a later process gets: store them in another order, and that
    # order comes back (a cache that encoded again would give the encoder's)
    np.save(stored, first[::-1].copy())
    assert np.array_equal(encode_cached(TEXTS), first[::-1])


@pytest.mark.parametrize("damage", ["garbage", "wrong shape", "not unit rows", "float64"])
def test_a_damaged_file_is_encoded_again_and_replaced(folder: Path, damage: str) -> None:
    expected = encode_cached(TEXTS)
    stored = folder / f"{key_of(TEXTS)}.npy"
    if damage == "garbage":
        stored.write_bytes(b"\x93NUMPY not really")
    elif damage == "wrong shape":
        np.save(stored, expected[:2])
    elif damage == "not unit rows":
        np.save(stored, expected * 3)
    else:
        np.save(stored, expected.astype(np.float64))
    assert np.allclose(encode_cached(TEXTS), expected, atol=1e-6)
    assert np.array_equal(np.load(stored), encode_cached(TEXTS))  # replaced by good rows


def test_other_texts_or_another_order_are_another_entry(folder: Path) -> None:
    assert len({key_of(TEXTS), key_of(TEXTS[::-1]), key_of(TEXTS[:2]),
                key_of(["ab", "c"]), key_of(["a", "bc"])}) == 5
    encode_cached(TEXTS)
    encode_cached(TEXTS[:2])
    assert len(list(folder.glob("*.npy"))) == 2


def test_off_keeps_nothing_and_an_unwritable_folder_is_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "off")
    assert cache_dir() is None
    assert np.allclose(encode_cached(TEXTS), encoder.encode(TEXTS), atol=1e-6)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(ENV, str(blocker / "encoded"))
    assert np.allclose(encode_cached(TEXTS), encoder.encode(TEXTS), atol=1e-6)
    assert blocker.read_text() == "not a directory"


def test_without_a_setting_it_lives_in_the_users_cache_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "habitus" / "encoded"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "habitus" / "encoded"
    monkeypatch.delenv("HOME")
    assert cache_dir() is None
