"""What the learning schema keeps of a person's words (services/stability_detector/sealing.py and
the row decoders of store.py): keys, values and sentences sealed per user, each distinct text
once per batch, read back as text; rows from before sealing read as they are and flagged for
rewriting; the tenant's own, and a deployment without encryption, unsealed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from habitus.crypto import Keyring, Shredded
from habitus.crypto.columns import COLUMNS, is_sealed
from services.stability_detector import store
from services.stability_detector.sealing import Texts, UserText
from tests.support.keyrings import own_column_keyring

T, U = "acme", "zoe"
SAID = "no-preamble-Ottoline"


@pytest.fixture
def keyring(tmp_path: Path) -> Iterator[Keyring]:
    """The process's column sealer with a keyring of the test's own (as it was, after)."""
    with own_column_keyring(tmp_path) as ring:
        yield ring


def row(seq: int, *, user: str = U, sentence: str | None = None) -> store.EvidenceRow:
    return store.EvidenceRow(T, user, f"e{seq}", seq, "veto", SAID, "skip it", "explicit",
                             1.0, 0.9, "tests", "[]", 1.0, "standing", sentence)


def test_a_batch_is_sealed_per_user_each_text_once(keyring: Keyring) -> None:
    texts = Texts()
    rows = [store._sealed_row(row(n, user=f"u{n % 2}", sentence=f"Said by Ottoline {n}"), texts)
            for n in range(6)]
    for r in rows:
        for value in (r.key, r.value, r.sentence):
            assert is_sealed(value) and "Ottoline" not in str(value)
    assert set(texts) == {(T, "u0"), (T, "u1")}
    assert rows[0].key == rows[2].key != rows[1].key  # deterministic per user, not across
    assert len({r.sentence for r in rows}) == 6
    opened = UserText(T, "u0")
    assert opened.open(rows[0].sentence or "") == "Said by Ottoline 0"


def facet_row(key: str, value: str) -> tuple[object, ...]:
    """A learning.facets row as `store` reads it (class, key, value, state, ...)."""
    return ("veto", key, value, "active", 2.0, "auto", [], {}, 3, 1.0, 1.0, None, "learned",
            1.0)


def test_rows_read_back_as_text_and_rows_from_before_sealing_as_they_are(
        keyring: Keyring) -> None:
    text = UserText(T, U)
    sealed = text.seal(SAID)
    stored = [facet_row(sealed, text.seal("skip it"))]
    facets = store._facets_from(stored, UserText(T, U))
    assert facets[("veto", SAID)].value == "skip it"
    assert not UserText(T, U).written_plain([sealed, text.seal("skip it")])
    assert store._facets_from([facet_row(SAID, "skip it")], UserText(T, U)) == facets
    assert UserText(T, U).written_plain([SAID, "skip it"])  # stored before sealing
    assert UserText(T, U).forms(SAID) == [sealed, SAID]  # one key's rows: either form
    # opening a legacy value teaches nothing about sealing it
    mixed = UserText(T, U)
    assert mixed.open(SAID) == SAID and mixed.seal(SAID) == sealed


def test_the_tenants_own_and_no_encryption_pass_through(keyring: Keyring) -> None:
    tenant_wide = UserText(T, "_tenant")
    assert tenant_wide.seal(SAID) == SAID and tenant_wide.forms(SAID) == [SAID]
    assert not tenant_wide.written_plain([SAID])
    COLUMNS.use_keyring(None)
    plain = UserText(T, U)
    assert plain.seal(SAID) == SAID and not plain.written_plain([SAID])


def test_a_nul_is_refused_as_postgres_refuses_it(keyring: Keyring) -> None:
    with pytest.raises(psycopg.DataError):
        UserText(T, U).seal("for\x00mal")


def test_an_erased_users_values_do_not_open(keyring: Keyring) -> None:
    sealed = UserText(T, U).seal(SAID)
    keyring.destroy(T, U)
    with pytest.raises(Shredded):
        UserText(T, U).open(sealed)
