"""The keyring a process uses, from its settings."""

from __future__ import annotations

from pathlib import Path

from habitus.config import Settings, keystore_path
from habitus.crypto.kek import KekRing, load_kek_ring
from habitus.crypto.keyring import Keyring
from habitus.crypto.keystore import DirectoryKeyStore


def keyring_from(settings: Settings) -> Keyring | None:
    """None when event encryption is off (HABITUS_ENCRYPT_EVENTS=false)."""
    if not settings.encrypt_events:
        return None
    root = keystore_path(settings)
    ring_file = kek_path(settings)

    def ring() -> KekRing:
        return load_kek_ring(settings.kek, ring_file)

    return Keyring(ring(), DirectoryKeyStore(root / "users"), reload=ring)


def kek_path(settings: Settings) -> Path:
    """The KEK ring file (used when HABITUS_KEK is unset)."""
    return settings.kek_file or keystore_path(settings) / "kek.json"
