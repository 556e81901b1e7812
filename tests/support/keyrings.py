"""A keyring of a test's own for the process's column sealer (`habitus.crypto.columns.COLUMNS`),
the suite's restored after it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from habitus.crypto import DirectoryKeyStore, Keyring, load_kek_ring
from habitus.crypto.columns import COLUMNS


@contextmanager
def own_column_keyring(root: Path) -> Iterator[Keyring]:
    ring = Keyring(load_kek_ring(None, root / "kek.json"), DirectoryKeyStore(root / "u"))
    before = COLUMNS.keyring
    COLUMNS.use_keyring(ring)
    try:
        yield ring
    finally:
        COLUMNS.use_keyring(before)
