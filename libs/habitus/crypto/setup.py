"""The keyring a process uses, from its settings."""

from __future__ import annotations

from habitus.config import Settings, keystore_path
from habitus.crypto.kek import load_kek_ring
from habitus.crypto.keyring import Keyring
from habitus.crypto.keystore import DirectoryKeyStore


def keyring_from(settings: Settings) -> Keyring | None:
    """None when event encryption is off (HABITUS_ENCRYPT_EVENTS=false)."""
    if not settings.encrypt_events:
        return None
    root = keystore_path(settings)
    kek = load_kek_ring(settings.kek, settings.kek_file or root / "kek.json")
    return Keyring(kek, DirectoryKeyStore(root / "users"))
