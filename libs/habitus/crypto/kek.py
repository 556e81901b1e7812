"""Key-encryption keys: the keys that wrap every user's data key.

A ring holds one current KEK (new data keys are wrapped with it) and any earlier ones (data keys
wrapped before a rotation still unwrap). Rotating adds a KEK and makes it current; rewrapping
the stored data keys (`Keyring.rewrap_all`) then lets the old one be dropped, all while the
system runs: every wrapped key names the KEK that wrapped it.

Where a ring comes from is pluggable (`KekRing` is all the rest needs): `HABITUS_KEK` (one key,
`<id>:<base64 of 32 bytes>`, for containers given a secret), else the file
`HABITUS_KEK_FILE`, created on first use with a fresh key (mode 0600) so `habitus up` works on
a fresh machine. A KMS would implement the same two methods with its own wrap and unwrap calls.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from habitus.crypto.aead import KEY_BYTES, new_key, open_sealed, seal
from habitus.crypto.files import private_temporary


class KekError(ValueError):
    """The KEK material is missing or malformed; the message says which and how to fix it."""


@dataclass
class KekRing:
    current: str
    keys: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.current not in self.keys:
            raise KekError(f"the current KEK {self.current!r} is not in the ring")
        for kek_id, key in self.keys.items():
            if len(key) != KEY_BYTES:
                raise KekError(f"KEK {kek_id!r}: {len(key)} bytes; a KEK has {KEY_BYTES}")

    def wrap(self, dek: bytes, associated: bytes) -> tuple[str, bytes]:
        """(the KEK id, the wrapped key)."""
        return self.current, seal(self.keys[self.current], dek, associated)

    def unwrap(self, kek_id: str, wrapped: bytes, associated: bytes) -> bytes:
        key = self.keys.get(kek_id)
        if key is None:
            raise KekError(f"KEK {kek_id!r} is not in the ring (dropped before every data key "
                           "it wrapped was rewrapped?)")
        return open_sealed(key, wrapped, associated)

    def rotated(self) -> KekRing:
        """A ring with a fresh current KEK, the earlier ones kept for unwrapping."""
        kek_id = f"kek-{secrets.token_hex(4)}"
        return KekRing(kek_id, {**self.keys, kek_id: new_key()})

    def without(self, kek_id: str) -> KekRing:
        if kek_id == self.current:
            raise KekError("the current KEK cannot be dropped; rotate first")
        return KekRing(self.current, {k: v for k, v in self.keys.items() if k != kek_id})

    def to_json(self) -> str:
        return json.dumps({"current": self.current, "keys": {
            k: base64.b64encode(v).decode() for k, v in sorted(self.keys.items())}}, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str) -> KekRing:
        try:
            data = json.loads(text)
            keys = {str(k): base64.b64decode(v, validate=True)
                    for k, v in dict(data["keys"]).items()}
            return cls(str(data["current"]), keys)
        except (ValueError, KeyError, TypeError) as exc:
            raise KekError(f"{where}: not a KEK ring ({exc})") from None


def parse_env_kek(value: str) -> KekRing:
    """`<id>:<base64>[,<id>:<base64>...]`: the first is current, the others still unwrap (a
    rotation: deploy `new,old`, rewrap, then deploy `new` alone)."""
    keys: dict[str, bytes] = {}
    for entry in value.split(","):
        kek_id, sep, encoded = entry.strip().partition(":")
        if not sep or not kek_id:
            raise KekError("HABITUS_KEK: expected <id>:<base64 of 32 bytes>[,<id>:<base64>]")
        try:
            keys[kek_id] = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise KekError(f"HABITUS_KEK: the key {kek_id!r} is not base64") from None
    return KekRing(next(iter(keys)), keys)


def save_ring(ring: KekRing, path: Path) -> None:
    """Write the ring atomically, readable by its owner only."""
    os.replace(private_temporary(path, ring.to_json()), path)


def load_kek_ring(env_value: str | None, path: Path) -> KekRing:
    """The ring from `HABITUS_KEK`, else from `path`, created there with a fresh KEK when
    absent (a race between two processes creating it leaves one file both read)."""
    if env_value:
        return parse_env_kek(env_value)
    if not path.exists():
        # a random id: a ring lost and made again shows as "KEK not in the ring", never as
        # keys that silently fail to open under a new key of the same name
        kek_id = f"kek-{secrets.token_hex(4)}"
        fresh = KekRing(kek_id, {kek_id: new_key()})
        temporary = private_temporary(path, fresh.to_json())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)  # the first process to get here wins
        os.unlink(temporary)
    return KekRing.from_json(path.read_text(), str(path))
