"""Per-user data keys for crypto-shredding: what a person said is sealed with a key of their own,
so destroying that key makes every copy unreadable, the ones erasure cannot reach included
(stream blocks, write-ahead logs, backups made before).

- `aead`: AES-256-GCM, each ciphertext bound to its owner, its key and its event.
- `kek`: the key-encryption keys that wrap the data keys (a local file by default, pluggable).
- `keystore`: where wrapped data keys live, apart from the data they protect.
- `keyring`: a process's view: data keys unwrapped on first use and cached, created when a user
  has none, rotated, destroyed.
"""

from habitus.crypto.aead import KEY_BYTES, SealError, open_sealed, seal
from habitus.crypto.kek import KekRing, load_kek_ring
from habitus.crypto.keyring import Keyring, Shredded
from habitus.crypto.keystore import DirectoryKeyStore, KeyStore, WrappedKey

__all__ = ["KEY_BYTES", "DirectoryKeyStore", "KekRing", "KeyStore", "Keyring", "SealError",
           "Shredded", "WrappedKey", "load_kek_ring", "open_sealed", "seal"]
