"""Where wrapped data keys live: apart from the data they protect.

Crypto-shredding only holds if a backup of the data does not carry the keys: so the keys are
not in Postgres, the streams or Redis, but in a key store of their own (`HABITUS_KEYSTORE_DIR`;
a KMS or vault in production, behind the same four methods). `DirectoryKeyStore` keeps one
small file per user, named by a digest of the tenant and user (no id in a file name), holding
the user's wrapped keys; a key store shared by several hosts is a shared volume, or another
implementation.

Destroying a user's keys unlinks the file and overwrites what it held. On an SSD or a
copy-on-write file system the old blocks may survive the overwrite; what protects them then is
that the keys are wrapped by the KEK. In production the KEK comes from `HABITUS_KEK` (a secret,
never on the key store's volume); the ring file `make run` creates by default sits in the key
store directory, which is enough on one machine but means a copy of that directory holds both.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from habitus.crypto.files import private_temporary


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

    def update(self, tenant_id: str, user_id: str,
               change: Callable[[UserKeys], UserKeys]) -> UserKeys | None:
        """Replace the user's keys with `change(current)`, atomically with respect to every
        other update and to `destroy`; None (nothing written) when the user has no keys."""
        ...

    def destroy(self, tenant_id: str, user_id: str) -> bool:
        """Destroy the user's keys and remember that they were destroyed (`erased`)."""
        ...

    def erased(self, tenant_id: str, user_id: str) -> bool:
        """Whether keys of the user were destroyed: a key the store lacks is then shredded,
        not missing (a store not mounted, a path misconfigured)."""
        ...

    def owners(self) -> Iterator[tuple[str, str]]: ...


class DirectoryKeyStore:
    """One file per user. Updates and destruction take an exclusive `flock` on the user's file
    and check, once they hold it, that the path still names the file they locked (an update
    replaces the file, so a second writer must read what the first wrote); destruction unlinks
    before it overwrites, so a reader sees the file or nothing, never zeros. A destroyed user
    leaves `<digest>.erased` (no key material, no id) behind."""

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
        except ValueError:
            return None  # caught between an unlink and its overwrite: gone

    def _temporary(self, keys: UserKeys, final: Path) -> Path:
        return private_temporary(final, keys.to_json())

    def create(self, keys: UserKeys) -> UserKeys:
        final = self.path(keys.tenant_id, keys.user_id)
        temporary = self._temporary(keys, final)
        try:
            while True:
                try:
                    os.link(temporary, final)  # atomic: fails if another process was first
                    return keys
                except FileExistsError:
                    found = self.load(keys.tenant_id, keys.user_id)
                    if found is not None:
                        return found
                    # destroyed in between: try again rather than overwrite a newcomer's
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    @contextlib.contextmanager
    def _locked(self, final: Path) -> Iterator[IO[bytes] | None]:
        """The user's file, open and exclusively locked, still at its path; None if absent."""
        while True:
            try:
                handle = open(final, "r+b")
            except FileNotFoundError:
                yield None
                return
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    same = os.stat(final).st_ino == os.fstat(handle.fileno()).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    yield handle
                    return
            finally:
                handle.close()  # closing releases the lock

    def update(self, tenant_id: str, user_id: str,
               change: Callable[[UserKeys], UserKeys]) -> UserKeys | None:
        final = self.path(tenant_id, user_id)
        with self._locked(final) as handle:
            if handle is None:
                return None
            changed = change(UserKeys.from_json(handle.read().decode()))
            os.replace(self._temporary(changed, final), final)
            return changed

    def destroy(self, tenant_id: str, user_id: str) -> bool:
        final = self.path(tenant_id, user_id)
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        final.with_suffix(".erased").touch(mode=0o600)
        with self._locked(final) as handle:
            if handle is None:
                return False
            os.unlink(final)
            size = os.fstat(handle.fileno()).st_size
            handle.seek(0)
            handle.write(b"\0" * size)
            handle.flush()
            os.fsync(handle.fileno())
            return True

    def erased(self, tenant_id: str, user_id: str) -> bool:
        return self.path(tenant_id, user_id).with_suffix(".erased").exists()

    def owners(self) -> Iterator[tuple[str, str]]:
        for path in sorted(self.root.glob("*/*.key")):
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
                keys = UserKeys.from_json(path.read_text())
                yield keys.tenant_id, keys.user_id
