"""A person's words in the `learning` tables, sealed with their own key (habitus.crypto.columns).

What a user said reaches every table of the schema: a facet's key ("no preamble" is a veto the
user named) and value, an evidence row's sentence, a command's value. So `store` seals every
key, value and sentence it writes and opens every one it reads; nothing above it (scoring, the
projection, the RPCs, the events published) ever sees a sealed value. `class` is a fixed
vocabulary and stays plain.

Sealing is deterministic per user, so the schema's set-based SQL keeps working unchanged: the
upserts on (tenant, user, class, key[, value]), the joins of a batch's values against
`value_stats`, the filter of one key's evidence all compare sealed with sealed. Nothing in the
schema orders by or parses a key or value (sorting happens in Python, on opened text).

A batch repeats its users' keys and values (a candidate intake of 2,000 rows has a handful of
keys per user; a rebuild reads the same key on every value of it), so `UserText` seals and
opens each distinct text once per call.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from habitus.crypto.columns import COLUMNS, is_sealed


class UserText:
    """One user's column values, sealed and opened through the process's `COLUMNS`, each
    distinct text once (what one sealed is known opened, and the other way round)."""

    __slots__ = ("_opened", "_sealed", "tenant_id", "user_id")

    def __init__(self, tenant_id: str, user_id: str) -> None:
        self.tenant_id = tenant_id
        self.user_id = user_id
        self._sealed: dict[str, str] = {}
        self._opened: dict[str, str] = {}

    def seal(self, text: str) -> str:
        """`text` sealed. A NUL is refused as Postgres refuses it in a text column: sealed, it
        would be stored, and the same event would be poison or not depending on whether
        encryption is on (and what opens it would meet plain text columns downstream)."""
        found = self._sealed.get(text)
        if found is None:
            if "\x00" in text:
                raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
            found = self._sealed[text] = COLUMNS.seal(self.tenant_id, self.user_id, text)
            self._opened[found] = text
        return found

    def seal_opt(self, text: str | None) -> str | None:
        return None if text is None else self.seal(text)

    def open(self, value: str) -> str:
        """The text of a stored value (`Shredded` once the user's keys were destroyed)."""
        found = self._opened.get(value)
        if found is None:
            found = self._opened[value] = COLUMNS.open(self.tenant_id, self.user_id, value)
            if is_sealed(value):  # a value stored unsealed says nothing of how text seals
                self._sealed.setdefault(found, value)
        return found

    def open_opt(self, value: str | None) -> str | None:
        return None if value is None else self.open(value)

    def forms(self, text: str) -> list[str]:
        """What a stored `text` can look like: sealed, and as written before its column was
        sealed (rows from before sealing are never rewritten in bulk, so a lookup of one key's
        rows matches both)."""
        sealed = COLUMNS.lookup(self.tenant_id, self.user_id, text)  # a read makes no keys
        return [sealed] if sealed == text else [sealed, text]

    def written_plain(self, values: Iterable[str | None]) -> bool:
        """Whether any of these stored values was written unsealed where this process seals
        (a row from before sealing, or from a deployment without encryption): rows keyed by
        such a value would stand beside their sealed twins, so the caller rewrites them."""
        return any(v and not is_sealed(v) and self.seal(v) != v for v in values)


class Texts(dict[tuple[str, str], UserText]):
    """The `UserText` of each user of a batch, made on first use."""

    def __missing__(self, user: tuple[str, str]) -> UserText:
        text = self[user] = UserText(*user)
        return text
