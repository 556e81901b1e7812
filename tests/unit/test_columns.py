"""Sealed projection columns: deterministic per user, bound to the user, gone with the keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from habitus.crypto import DirectoryKeyStore, Keyring, SealError, Shredded, load_kek_ring
from habitus.crypto.columns import PREFIX, Columns, is_sealed
from habitus.crypto.keyring import KeyMissing


def keyring(root: Path) -> Keyring:
    return Keyring(load_kek_ring(None, root / "kek.json"), DirectoryKeyStore(root / "users"))


@pytest.fixture
def columns(tmp_path: Path) -> Columns:
    return Columns(keyring(tmp_path))


ADDRESS = "Mail the draft to zoe.quantum@example.org, signed Zoe Quantum-Fairweather."


def test_a_sealed_value_hides_the_text_is_stable_and_opens_back(columns: Columns) -> None:
    sealed = columns.seal("acme", "zoe", ADDRESS)
    assert sealed.startswith(PREFIX) and "zoe.quantum" not in sealed
    assert "Quantum" not in sealed and is_sealed(sealed)
    # deterministic: a lookup by the sealed value finds what was stored sealed
    assert columns.seal("acme", "zoe", ADDRESS) == sealed
    assert columns.open("acme", "zoe", sealed) == ADDRESS


def test_the_same_text_seals_differently_for_another_user_and_does_not_open_as_theirs(
        columns: Columns) -> None:
    zoe = columns.seal("acme", "zoe", "terse")
    max_ = columns.seal("acme", "max", "terse")
    other_tenant = columns.seal("globex", "zoe", "terse")
    assert len({zoe, max_, other_tenant}) == 3
    with pytest.raises(SealError):
        columns.open("acme", "max", zoe)
    with pytest.raises(SealError):
        columns.open("globex", "zoe", zoe)


def test_tenant_values_empty_text_and_plain_rows_pass_through(columns: Columns) -> None:
    assert columns.seal("acme", "_tenant", "deny: customer names") == "deny: customer names"
    assert columns.seal("acme", "zoe", "") == ""
    # a row written before sealing was on (or by a deployment without it) reads as it is
    assert columns.open("acme", "zoe", "Berlin") == "Berlin"
    assert Columns(None).seal("acme", "zoe", "Berlin") == "Berlin"


def test_a_sealed_value_needs_a_keyring_to_open(columns: Columns) -> None:
    sealed = columns.seal("acme", "zoe", "Berlin")
    with pytest.raises(ValueError, match="no keyring"):
        Columns(None).open("acme", "zoe", sealed)


def test_json_values_are_sealed_whole_and_open_back(columns: Columns) -> None:
    chunks = [{"id": "c1", "text": ADDRESS, "at": 1.5}, {"id": "c2", "text": "ok"}]
    sealed = columns.seal_json("acme", "zoe", chunks)
    assert isinstance(sealed, str) and "zoe.quantum" not in sealed
    assert columns.open_json("acme", "zoe", sealed) == chunks
    assert columns.open_json("acme", "zoe", chunks) == chunks  # stored before: as it is
    assert columns.seal_json("acme", "_tenant", chunks) == chunks


def test_rotating_the_data_key_keeps_sealed_values_equal(tmp_path: Path) -> None:
    ring = keyring(tmp_path)
    columns = Columns(ring)
    before = columns.seal("acme", "zoe", "neovim")
    ring.rotate("acme", "zoe")
    again = Columns(keyring(tmp_path))  # another process, after the rotation
    assert again.seal("acme", "zoe", "neovim") == before
    assert again.open("acme", "zoe", before) == "neovim"


def test_destroying_the_keys_shreds_every_sealed_value_in_every_process(tmp_path: Path
                                                                        ) -> None:
    ring = keyring(tmp_path)
    sealed = Columns(ring).seal("acme", "zoe", ADDRESS)
    kept = Columns(ring).seal("acme", "max", "terse")
    ring.destroy("acme", "zoe")
    elsewhere = Columns(keyring(tmp_path))
    with pytest.raises(Shredded):
        elsewhere.open("acme", "zoe", sealed)
    assert elsewhere.open("acme", "max", kept) == "terse"


def test_opening_never_creates_keys_and_says_when_the_store_lacks_them(tmp_path: Path) -> None:
    sealed = Columns(keyring(tmp_path / "one")).seal("acme", "zoe", "Berlin")
    other = keyring(tmp_path / "two")  # a process pointed at another, empty key store
    with pytest.raises(KeyMissing):
        Columns(other).open("acme", "zoe", sealed)
    assert other.store.load("acme", "zoe") is None


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Columns:
    return Columns(keyring(tmp_path_factory.mktemp("columns")))


@given(text=st.text(min_size=1, max_size=200))
def test_any_text_round_trips(shared: Columns, text: str) -> None:
    sealed = shared.seal("t", "u", text)
    assert is_sealed(sealed) and shared.open("t", "u", sealed) == text


def test_a_value_sealed_before_an_erasure_is_shredded_even_once_the_user_has_new_keys(
        tmp_path: Path) -> None:
    ring = keyring(tmp_path)
    columns = Columns(ring)
    before = columns.seal("acme", "zoe", ADDRESS)
    ring.destroy("acme", "zoe")
    again = columns.seal("acme", "zoe", "terse")  # an event of hers arrived during the erasure
    assert Columns(keyring(tmp_path)).open("acme", "zoe", again) == "terse"
    with pytest.raises(Shredded):
        Columns(keyring(tmp_path)).open("acme", "zoe", before)
    columns.seal("acme", "max", "terse")  # max has keys, never erased
    with pytest.raises(SealError):  # so a value that is not his is an error, not an erasure
        columns.open("acme", "max", columns.seal("acme", "zoe", "terse"))


def test_whatever_a_user_writes_reads_back_even_when_it_looks_sealed(columns: Columns) -> None:
    plain = Columns(None)
    for text in ("hc1:abc", "hc0:abc", "hc0:hc1:x", "hc1", "plain"):
        assert plain.open("acme", "zoe", plain.seal("acme", "zoe", text)) == text
        assert columns.open("acme", "_tenant", columns.seal("acme", "_tenant", text)) == text
        assert columns.open("acme", "zoe", columns.seal("acme", "zoe", text)) == text
        assert plain.open_json("acme", "zoe", plain.seal_json("acme", "zoe", text)) == text


def test_a_lookup_seals_as_storing_does_but_never_makes_keys(tmp_path: Path) -> None:
    ring = keyring(tmp_path)
    columns = Columns(ring)
    assert columns.lookup("acme", "zoe", "terse") == "terse"  # no keys: nothing sealed yet
    assert ring.store.load("acme", "zoe") is None
    stored = columns.seal("acme", "zoe", "terse")
    assert columns.lookup("acme", "zoe", "terse") == stored
    ring.destroy("acme", "zoe")
    assert columns.lookup("acme", "zoe", "terse") == "terse"
    assert ring.store.load("acme", "zoe") is None  # an erased user gets no key file back


def test_a_batchs_memo_seals_and_opens_each_text_once_to_the_same_values(
        columns: Columns) -> None:
    """A window read, grown and written back in one batch (and its texts written again into
    a closed window) costs one opening or sealing per distinct text, with the values sealing
    them one by one gives."""
    from habitus.crypto.columns import ColumnMemo

    class Counting(Columns):
        def __init__(self, inner: Columns) -> None:
            super().__init__(inner.keyring)
            self.seals = 0

        def seal(self, tenant_id: str, user_id: str, text: str) -> str:
            self.seals += 1
            return super().seal(tenant_id, user_id, text)

    counting = Counting(columns)
    stored = columns.seal_all("acme", "zoe", ["first", "second"])
    memo = ColumnMemo(counting)
    assert [memo.open("acme", "zoe", v) for v in stored] == ["first", "second"]
    written = memo.seal_all("acme", "zoe", ["first", "second", "third"])
    again = memo.seal_all("acme", "zoe", ["third", "first"])
    assert counting.seals == 1  # only "third" was sealed
    assert written == columns.seal_all("acme", "zoe", ["first", "second", "third"])
    assert again == [written[2], written[0]]
    # per user: the same text of another user is sealed for them
    assert memo.seal_all("acme", "max", ["first"]) == [columns.seal("acme", "max", "first")]
    assert counting.seals == 2
