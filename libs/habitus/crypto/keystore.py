"""Where wrapped data keys live: apart from the data they protect.

Crypto-shredding only holds if a backup of the data does not carry the keys: so the keys are
not in Postgres, the streams or Redis, but in a key store of their own (`HABITUS_KEYSTORE_DIR`;
a KMS or vault in production, behind the same four methods). `DirectoryKeyStore` keeps one
small file per user, named by a digest of the tenant and user (no id in a file name), holding
the user's wrapped keys; a key store shared by several hosts is a shared volume, or another
implementation.

Destroying a user's keys overwrites the file before unlinking it. On an SSD or a copy-on-write
file system the old blocks may survive the overwrite; what protects them is that the keys are
wrapped by the KEK, which never lives in the key store.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class WrappedKey:
    kid: str
    kek_id: str
    wrapped: bytes
    created_at: float


@dataclass(frozen=True, slots=True)
class UserKeys:
    """A user's data keys, wrapped; `current` seals what is published from now on."""

    tenant_id: str
    user_id: str
    current: str
    keys: tuple[WrappedKey, ...]

    def get(self, kid: str) -> WrappedKey | None:
        return next((k for k in self.keys if k.kid == kid), None)

    def to_json(self) -> str:
        return json.dumps({
            "tenant_id": self.tenant_id, "user_id": self.user_id, "current": self.current,
            "keys": [{"kid": k.kid, "kek": k.kek_id, "wrapped": k.wrapped.hex(),
                      "created_at": k.created_at} for k in self.keys]})

    @classmethod
    def from_json(cls, text: str) -> UserKeys:
        data = json.loads(text)
        return cls(str(data["tenant_id"]), str(data["user_id"]), str(data["current"]),
                   tuple(WrappedKey(str(k["kid"]), str(k["kek"]), bytes.fromhex(k["wrapped"]),
                                    float(k["created_at"])) for k in data["keys"]))


class KeyStore(Protocol):
    def load(self, tenant_id: str, user_id: str) -> UserKeys | None: ...

    def create(self, keys: UserKeys) -> UserKeys:
        """Store `keys` unless the user has keys already; either way, the user's keys."""
        ...

    def replace(self, keys: UserKeys) -> None:
        """Store `keys` over the user's existing ones (rotation, rewrapping)."""
        ...

    def destroy(self, tenant_id: str, user_id: str) -> bool: ...

    def owners(self) -> Iterator[tuple[str, str]]: ...


class DirectoryKeyStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, tenant_id: str, user_id: str) -> Path:
        digest = hashlib.sha256(f"{tenant_id}\x00{user_id}".encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.key"

    def load(self, tenant_id: str, user_id: str) -> UserKeys | None:
        try:
            return UserKeys.from_json(self.path(tenant_id, user_id).read_text())
        except FileNotFoundError:
            return None

    def _temporary(self, keys: UserKeys, final: Path) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = final.with_name(f".{final.name}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(keys.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        return temporary

    def create(self, keys: UserKeys) -> UserKeys:
        final = self.path(keys.tenant_id, keys.user_id)
        temporary = self._temporary(keys, final)
        try:
            os.link(temporary, final)  # atomic: fails if another process created it first
        except FileExistsError:
            found = self.load(keys.tenant_id, keys.user_id)
            if found is not None:
                return found
            os.replace(temporary, final)  # destroyed in between: ours stands
            return keys
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        return keys

    def replace(self, keys: UserKeys) -> None:
        final = self.path(keys.tenant_id, keys.user_id)
        os.replace(self._temporary(keys, final), final)

    def destroy(self, tenant_id: str, user_id: str) -> bool:
        final = self.path(tenant_id, user_id)
        try:
            descriptor = os.open(final, os.O_RDWR)
        except FileNotFoundError:
            return False
        with os.fdopen(descriptor, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            size = os.fstat(handle.fileno()).st_size
            handle.write(b"\0" * size)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(final)
        return True

    def owners(self) -> Iterator[tuple[str, str]]:
        for path in sorted(self.root.glob("*/*.key")):
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
                keys = UserKeys.from_json(path.read_text())
                yield keys.tenant_id, keys.user_id
