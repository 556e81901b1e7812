"""Sealing what projections keep in Postgres with the user's own key.

A person's words reach the projections too (a window's chunks, an evidence sentence, a facet's
value, a rule, a trace's query, a rendered PROFILE.md). Postgres keeps a deleted row in its heap
and its write-ahead log until they are overwritten, and in every backup made before: only a key
that no longer exists makes those copies unreadable. So every column that holds a person's text
holds it sealed, under a key derived from the user's data key (habitus.crypto.deterministic):
erasure destroys the key and, with it, every copy of every such value.

A sealed value is a string, `hc1:` and the base64 of the AES-SIV ciphertext. Sealing is
deterministic, so a sealed value is still a lookup key (`WHERE value = %s` with the sealed
parameter), a primary key part and a grouping key; what no longer works in SQL is anything
that reads the text itself (ordering by it, `LIKE`, full-text search): services sort after
opening and keep their own per-user index where they search (the trace router's terms).

Values of the tenant itself (user ids beginning with `_`) are not sealed, as in the event log.
A value without the prefix opens as itself: rows written before sealing was turned on, or by a
deployment that runs without encryption (HABITUS_ENCRYPT_EVENTS=false), stay readable. A text
left unsealed that would read as sealed (it begins `hc1:`, or the escape `hc0:`) is stored
behind `hc0:`, so whatever a user writes reads back as written.

A sealed value names no key: it is the user's column key's, derived from the first data key
they had. After an erasure, a user may get keys again (an event of theirs that arrived during
it); a value sealed before then does not open with the new key, and since the store remembers
that the user's keys were destroyed, that reads as `Shredded`, as it would with no keys at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

import pybase64

from habitus.crypto.aead import SealError
from habitus.crypto.compiled import seal_column
from habitus.crypto.keyring import Keyring, Shredded

PREFIX: Final = "hc1:"
#: stands before an unsealed text that would otherwise read as sealed (or as escaped)
ESCAPE: Final = "hc0:"


def _sealable(user_id: str) -> bool:
    return not user_id.startswith("_")


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def _plain(text: str) -> str:
    """`text` as stored unsealed: as it is, unless it would read as sealed or escaped."""
    return ESCAPE + text if text.startswith((PREFIX, ESCAPE)) else text


class Columns:
    """Seals and opens column values for a process (its keyring is installed at start, as the
    event catalog's is); with no keyring, values pass through as they are."""

    def __init__(self, keyring: Keyring | None = None) -> None:
        self.keyring = keyring

    def use_keyring(self, keyring: Keyring | None) -> None:
        self.keyring = keyring

    def seal(self, tenant_id: str, user_id: str, text: str) -> str:
        """`text` sealed for the user: the same text gives the same value, every time."""
        keyring = self.keyring
        if keyring is None or not text or user_id.startswith("_"):  # `_sealable`, inlined
            return _plain(text)
        column = keyring.column(tenant_id, user_id)
        if column.compiled is not None and seal_column is not None:
            sealed = seal_column(column.compiled, column.owner, text)  # one call into C
            if sealed is not None:
                return sealed
        return PREFIX + pybase64.b64encode_as_string(column.seal(text.encode()))

    def lookup(self, tenant_id: str, user_id: str, text: str) -> str:
        """What `seal` stores for `text`, to look it up, without making keys for a user who
        has none (a read must not create key files, least of all for an erased user): with no
        keys nothing of theirs was sealed, so the unsealed form is the one to find."""
        keyring = self.keyring
        if keyring is None or not text or not _sealable(user_id):
            return _plain(text)
        try:
            column = keyring.existing_column(tenant_id, user_id)
        except LookupError:  # no keys (never sealed anything), or destroyed
            return _plain(text)
        return PREFIX + pybase64.b64encode_as_string(column.seal(text.encode()))

    def seal_all(self, tenant_id: str, user_id: str, texts: Iterable[str]) -> list[str]:
        return [self.seal(tenant_id, user_id, text) for text in texts]

    def open(self, tenant_id: str, user_id: str, value: str) -> str:
        """The text of a value `seal` made (any other value as it is). Raises `Shredded` once
        the user's keys are destroyed, `SealError` when the value is another user's or was
        altered, ValueError when a sealed value meets a process without a keyring."""
        if value.startswith(ESCAPE):
            return value[len(ESCAPE):]
        if not is_sealed(value):
            return value
        keyring = self.keyring
        if keyring is None:
            raise ValueError("a sealed column value, and this process has no keyring "
                             "(HABITUS_ENCRYPT_EVENTS is off here but not where it was written)")
        try:
            blob = pybase64.b64decode(value[len(PREFIX):], validate=True)
        except ValueError:
            raise SealError("a sealed column value that is not base64") from None
        try:
            return keyring.existing_column(tenant_id, user_id).open(blob).decode()
        except SealError:
            if keyring.store.erased(tenant_id, user_id):
                # sealed with keys an erasure destroyed; the user has new ones since
                raise Shredded(f"a value of {tenant_id}/{user_id} sealed with destroyed "
                               "keys") from None
            raise

    def open_all(self, tenant_id: str, user_id: str, values: Iterable[str]) -> list[str]:
        return [self.open(tenant_id, user_id, value) for value in values]

    def seal_json(self, tenant_id: str, user_id: str, value: Any) -> Any:
        """A JSON value for a `jsonb` column, sealed whole: a JSON string holding the sealed
        JSON text (unchanged when nothing is sealed: no keyring, or the tenant's own)."""
        if self.keyring is None or not _sealable(user_id):
            return _plain(value) if isinstance(value, str) else value
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return self.seal(tenant_id, user_id, text)

    def open_json(self, tenant_id: str, user_id: str, value: Any) -> Any:
        """What `seal_json` sealed (any other JSON value as it is)."""
        if isinstance(value, str) and value.startswith(ESCAPE):
            return value[len(ESCAPE):]
        if not is_sealed(value):
            return value
        return json.loads(self.open(tenant_id, user_id, value))


class ColumnMemo:
    """One batch's sealed values and their texts, for a projection that reads values and
    writes them back (or writes one text into several rows) within the batch: each text is
    opened, or sealed, once. Exact, since sealing is deterministic (the same text gives the
    same value); it lives for one batch, so it keeps nothing past an erasure."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns
        self._sealed: dict[tuple[str, str, str], str] = {}

    def open(self, tenant_id: str, user_id: str, value: str) -> str:
        text = self._columns.open(tenant_id, user_id, value)
        if is_sealed(value):
            self._sealed[(tenant_id, user_id, text)] = value
        return text

    def seal(self, tenant_id: str, user_id: str, text: str) -> str:
        value = self._sealed.get((tenant_id, user_id, text))
        if value is None:
            value = self._sealed[(tenant_id, user_id, text)] = self._columns.seal(
                tenant_id, user_id, text)
        return value

    def seal_all(self, tenant_id: str, user_id: str, texts: Iterable[str]) -> list[str]:
        return [self.seal(tenant_id, user_id, text) for text in texts]


#: the process's column sealer (its keyring installed where the event catalog's is)
COLUMNS: Final = Columns()
