"""A process's keyring: each user's data keys, unwrapped on first use and kept in memory.

Sealing asks for the user's current key (created, wrapped and stored the first time a user has
anything sealed); opening asks for the key a blob names. A key the store no longer has was
destroyed by erasure: `Shredded`, which readers treat as "erased", not as a fault. The
process that erases drops the keys at once; every other process holds an unwrapped key at most
`ttl` seconds before reading the store again, so no process keeps an erased user's key in
memory for long.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from habitus.crypto.aead import Cipher, SealError, cipher, new_key
from habitus.crypto.compiled import CompiledKey, data_key
from habitus.crypto.deterministic import ColumnCipher, column_cipher
from habitus.crypto.kek import KekRing
from habitus.crypto.keystore import KeyStore, UserKeys, WrappedKey

#: `Keyring.kid_memo`'s entries: (keys read at, key, the owner as an envelope writes it
#: (`"tenant_id":"…","user_id":"…"`), the offset it had in the envelope it was read from,
#: the key made ready for the compiled opener (habitus.crypto.compiled), or None)
KidMemo = tuple[float, Cipher, bytes, int, CompiledKey | None]


class Shredded(LookupError):
    """The user's key is gone: what it sealed can no longer be read, by design."""


#: what a key id looks like (`Keyring.rotate` makes "k" and twelve hex digits)
_KID = re.compile(rb"[A-Za-z0-9_.-]{1,64}")


def is_key_id(kid: str) -> bool:
    return _KID.fullmatch(kid.encode()) is not None

class KeyMissing(LookupError):
    """The key store lacks a key no erasure destroyed: a store not mounted or misconfigured,
    never to be taken for an erasure (the event is dead-lettered, visibly, not skipped)."""


def dek_context(tenant_id: str, user_id: str, kid: str) -> bytes:
    """What a wrapped data key is bound to."""
    return f"habitus/dek/{tenant_id}/{user_id}/{kid}".encode()


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are given once each: an envelope naming its user twice was not
    written by a sealer, and is refused before any key is looked for under either name."""
    found = dict(pairs)
    if len(found) != len(pairs):
        raise SealError("a key given twice")
    return found


def data_context(tenant_id: str, user_id: str, kid: str, event_id: str, event_type: str
                 ) -> bytes:
    """What a sealed payload is bound to: its owner and key, and the event it is the payload
    of (moved into another envelope, even of the same user, it does not open)."""
    return f"habitus/data/{tenant_id}/{user_id}/{kid}/{event_id}/{event_type}".encode()


@dataclass(frozen=True, slots=True)
class Sealer:
    """What sealing one user's payloads needs, made once per key: the current key id (as
    text and as the bytes a body carries), its cipher and the same key made ready for the
    compiled sealer (habitus.crypto.compiled; None where it was not built), the associated
    data's fixed part (`data_context` up to the event id), and the user's column cipher."""

    kid: str
    kid_bytes: bytes
    cipher: Cipher
    context_prefix: bytes
    column: ColumnCipher
    compiled: CompiledKey | None


@dataclass(frozen=True)
class _Entry:
    current: str
    ciphers: dict[str, Cipher]
    column: ColumnCipher
    #: when the keys were read from the store (time.monotonic): they count for `ttl` from then
    read_at: float
    #: the keys made ready for the compiled sealer and opener, by key id (habitus.crypto.compiled)
    compiled: dict[str, CompiledKey | None]


class Keyring:
    def __init__(self, kek: KekRing, store: KeyStore, cache_size: int = 100_000,
                 ttl: float = 60.0, reload: Callable[[], KekRing] | None = None) -> None:
        self.kek = kek
        #: where the ring came from, read again when a key names a KEK this process does not
        #: know yet (another process rotated the ring while this one ran)
        self._reload = reload
        self.store = store
        self._cache_size = cache_size
        self._ttl = ttl
        #: (tenant, user) -> (when read, current kid, {kid: cipher}, column cipher)
        self._cache: OrderedDict[tuple[str, str], tuple[float, _Entry]] = OrderedDict()
        self._lock = threading.Lock()
        #: (tenant, user) -> the lock of the one thread reading or making their keys
        self._flights: dict[tuple[str, str], threading.Lock] = {}
        #: (tenant, user, kid) as a message's bytes -> (read at, key, associated data's
        #: prefix): `opener`'s memo
        self._memo: dict[tuple[bytes, bytes, bytes], tuple[float, Cipher, bytes]] = {}
        #: kid as a message's bytes -> (read at, key, the owner as the envelope writes it,
        #: where the envelope it was read from has the owner): `envelope_key`'s memo, which
        #: `EnvelopeOpener` reads without a call
        self._by_kid: dict[bytes, KidMemo] = {}
        #: (tenant, user) -> (read at, sealer): `sealer`'s memo, lock-free like `_memo`
        self._sealers: dict[tuple[str, str], tuple[float, Sealer]] = {}
        #: (tenant, user) -> when a reader's warming found no keys of theirs (plain events of
        #: a user who never had anything sealed, an erased user): not looked for again for
        #: `ttl`, or every batch naming them would read the store
        self._absent: dict[tuple[str, str], float] = {}

    def _unwrap(self, keys: UserKeys, key: WrappedKey) -> bytes:
        context = dek_context(keys.tenant_id, keys.user_id, key.kid)
        if key.kek_id not in self.kek.keys and self._reload is not None:
            self.kek = self._reload()
        return self.kek.unwrap(key.kek_id, key.wrapped, context)

    def _unwrapped(self, keys: UserKeys) -> _Entry:
        raw = [(k.kid, self._unwrap(keys, k)) for k in keys.keys]
        # the column key comes from the user's first data key, which rotation keeps: a value
        # sealed into a column before a rotation still equals the same value sealed after it
        column = column_cipher(raw[0][1], keys.tenant_id, keys.user_id)
        return _Entry(keys.current, {kid: cipher(key) for kid, key in raw}, column,
                      time.monotonic(), {kid: data_key(key) for kid, key in raw})

    def _remember(self, owner: tuple[str, str], entry: _Entry) -> None:
        with self._lock:
            self._absent.pop(owner, None)
            self._cache[owner] = (entry.read_at, entry)
            self._cache.move_to_end(owner)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _cached(self, owner: tuple[str, str]) -> _Entry | None:
        with self._lock:
            found = self._cache.get(owner)
            if found is None:
                return None
            if time.monotonic() - found[0] > self._ttl:
                del self._cache[owner]
                return None
            self._cache.move_to_end(owner)
            return found[1]

    def _fresh(self, tenant_id: str, user_id: str) -> UserKeys:
        if self._reload is not None:
            # a new key is wrapped with the ring's current KEK as it is now, not as it was
            # when this process started (a rotation may have made another KEK current since)
            self.kek = self._reload()
        kid = f"k{secrets.token_hex(6)}"
        kek_id, wrapped = self.kek.wrap(new_key(), dek_context(tenant_id, user_id, kid))
        return UserKeys(tenant_id, user_id, kid, (WrappedKey(kid, kek_id, wrapped, time.time()),))

    def _own(self, tenant_id: str, user_id: str) -> _Entry:
        """The user's keys, created if they have none."""
        owner = (tenant_id, user_id)
        entry = self._cached(owner)
        if entry is not None:
            return entry
        # one reader or maker per user at a time: concurrent batches naming the same new users
        # (threads warming them) wait for the first instead of each writing and syncing a key
        # file that loses the race
        with self._lock:
            flight = self._flights.setdefault(owner, threading.Lock())
        try:
            with flight:
                entry = self._cached(owner)
                if entry is None:
                    keys = self.store.load(tenant_id, user_id) or self.store.create(
                        self._fresh(tenant_id, user_id))
                    entry = self._unwrapped(keys)
                    self._remember(owner, entry)
                return entry
        finally:
            with self._lock:
                self._flights.pop(owner, None)

    def cold(self, owners: Iterable[tuple[str, str]], *, creating: bool = False
             ) -> list[tuple[str, str]]:
        """The owners among `owners` whose keys are not in memory (reading them means the key
        store's files, and creating a new user's an fsync). For a reader (`creating` false),
        not those whose keys a reader's warming found missing within `ttl`."""
        now, ttl = time.monotonic(), self._ttl
        absent = {} if creating else self._absent
        with self._lock:
            return [o for o in owners
                    if ((found := self._cache.get(o)) is None or now - found[0] > ttl)
                    and now - absent.get(o, -ttl - 1.0) > ttl]

    def warm(self, owners: Iterable[tuple[str, str]], create: bool) -> None:
        """Read the keys of `owners` into memory (creating those missing when `create`: for
        sealing), for a thread, so that an event loop about to seal or open their events does
        not wait on the key store's files. A user without keys is left for the caller to meet
        (`Shredded`, `KeyMissing`) when it opens."""
        for tenant_id, user_id in owners:
            if create:
                self._own(tenant_id, user_id)
                continue
            # a key that cannot be read here (destroyed, missing, its KEK absent, its file
            # unreadable) is left for the decoding of that user's events to meet and report
            try:
                self._remember((tenant_id, user_id),
                               self._unwrapped(self._stored(tenant_id, user_id, None)))
            except (LookupError, ValueError, OSError):
                with self._lock:
                    if len(self._absent) >= self._cache_size:
                        self._absent.clear()
                    self._absent[(tenant_id, user_id)] = time.monotonic()

    def current(self, tenant_id: str, user_id: str) -> tuple[str, Cipher]:
        """(key id, key) to seal with: the user's current key, created if they have none."""
        entry = self._own(tenant_id, user_id)
        return entry.current, entry.ciphers[entry.current]

    def sealer(self, tenant_id: str, user_id: str) -> Sealer:
        """`current`, for the publishing hot path (every event of a user is sealed): a
        lock-free memo in front of it, counting as long as the keys it came from (`ttl`),
        cleared by `forget` (a rotation, an erasure)."""
        sealers = self._sealers  # the dict as it is now: `forget` replaces it, never edits it
        owner = (tenant_id, user_id)
        found = sealers.get(owner)
        if found is not None and time.monotonic() - found[0] <= self._ttl:
            return found[1]
        entry = self._own(tenant_id, user_id)
        kid = entry.current
        made = Sealer(kid, kid.encode(), entry.ciphers[kid],
                      data_context(tenant_id, user_id, kid, "", "")[:-1], entry.column,
                      entry.compiled[kid])
        if len(sealers) >= self._cache_size:
            sealers.clear()
        sealers[owner] = (entry.read_at, made)
        return made

    def column(self, tenant_id: str, user_id: str) -> ColumnCipher:
        """The user's deterministic cipher for what projections keep (habitus.crypto.columns),
        created with the user's keys if they have none (per value sealed: `sealer`'s memo)."""
        return self.sealer(tenant_id, user_id).column

    def existing_column(self, tenant_id: str, user_id: str) -> ColumnCipher:
        """The user's column cipher to open with: `Shredded` when their keys were destroyed,
        `KeyMissing` when the store lacks keys nobody destroyed (never created here)."""
        owner = (tenant_id, user_id)
        found = self._sealers.get(owner)
        if found is not None and time.monotonic() - found[0] <= self._ttl:
            return found[1].column
        entry = self._cached(owner)
        if entry is None:
            keys = self._stored(tenant_id, user_id, None)
            entry = self._unwrapped(keys)
            self._remember(owner, entry)
        return entry.column

    def _stored(self, tenant_id: str, user_id: str, kid: str | None) -> UserKeys:
        """The user's stored keys (holding `kid`, when one is named), or why there are none."""
        keys = self.store.load(tenant_id, user_id)
        if keys is None or (kid is not None and keys.get(kid) is None):
            what = kid if kid is not None else "keys"
            if self.store.erased(tenant_id, user_id):
                raise Shredded(f"the key {what} of {tenant_id}/{user_id} was destroyed")
            raise KeyMissing(f"the key store has no key {what} of {tenant_id}/{user_id}, "
                             "and none was destroyed: is HABITUS_KEYSTORE_DIR the store "
                             "the other processes use?")
        return keys

    def key(self, tenant_id: str, user_id: str, kid: str) -> Cipher:
        """The key `kid` of the user; `Shredded` when it no longer exists."""
        owner = (tenant_id, user_id)
        entry = self._cached(owner)
        if entry is None or kid not in entry.ciphers:
            entry = self._unwrapped(self._stored(tenant_id, user_id, kid))
            self._remember(owner, entry)
        return entry.ciphers[kid]

    def opener(self, tenant_id: bytes, user_id: bytes, kid: bytes) -> tuple[Cipher, bytes]:
        """`key`, for a reader holding the ids as a message's bytes, with the associated
        data's fixed part (`data_context` up to the event id, as bytes): a lock-free memo in
        front of it, for the hot path (every sealed event a consumer reads). An entry counts
        as long as the keys it came from (`ttl` from when they were read), and `forget`
        clears it."""
        memo = self._memo
        found = memo.get((tenant_id, user_id, kid))
        if found is not None and time.monotonic() - found[0] <= self._ttl:
            return found[1], found[2]
        if _KID.fullmatch(kid) is None:  # whoever wrote it, no key of ours has this id
            raise SealError(f"sealed: {kid[:80]!r} is not a key id")
        owner = (tenant_id.decode(), user_id.decode())
        key = self.key(*owner, kid.decode())
        prefix = data_context(*owner, kid.decode(), "", "")[:-1]  # up to the event id
        entry = self._cached(owner)
        if entry is not None:
            if len(memo) >= self._cache_size:
                memo.clear()
            memo[(tenant_id, user_id, kid)] = (entry.read_at, key, prefix)
        return key, prefix

    def envelope_key(self, kid: bytes, envelope: bytes) -> Cipher:
        """The key `kid` of the owner `envelope` (an event's JSON up to its payload) names, for
        the reader of a body sealed with its envelope as associated data: a lock-free memo by
        key id in front of `key`, the owner read from the envelope only when the memo misses.
        A memo entry counts only for an envelope naming the owner it was read for, so two
        owners' keys of one id never stand in for each other; the associated data (the
        envelope, every byte of it) decides whether the key opens the payload."""
        found = self._by_kid.get(kid)
        if found is not None and time.monotonic() - found[0] <= self._ttl and (
                found[2] in envelope):
            return found[1]
        if _KID.fullmatch(kid) is None:  # whoever wrote it, no key of ours has this id
            raise SealError(f"sealed: {kid[:80]!r} is not a key id")
        try:
            head = json.loads(envelope + b"}", object_pairs_hook=_once_each)
            owner = (str(head["tenant_id"]), str(head["user_id"]))
        except (ValueError, KeyError, TypeError):  # a SealError is a ValueError
            raise SealError("sealed: the envelope names no single owner") from None
        key = self.key(*owner, kid.decode())
        entry = self._cached(owner)
        if entry is not None:
            memo = self._by_kid
            if len(memo) >= self._cache_size:
                memo.clear()
            written = json.dumps({"tenant_id": owner[0], "user_id": owner[1]},
                                 separators=(",", ":"), ensure_ascii=False).encode()[1:-1]
            memo[kid] = (entry.read_at, key, written, envelope.find(written),
                         entry.compiled[kid.decode()])
        return key

    def kid_memo(self) -> dict[bytes, KidMemo]:
        """`envelope_key`'s memo (one dict for the keyring's life: `forget` and a full memo
        clear it in place), for `EnvelopeOpener`'s hot path. An entry counts only while
        its read time is within `ttl` (`memo_fresh_after`) and only for an envelope that
        names its owner; anything else goes through `envelope_key`."""
        return self._by_kid

    def memo_fresh_after(self) -> float:
        """The read time (time.monotonic) a memo entry must be after to count now."""
        return time.monotonic() - self._ttl

    def rotate(self, tenant_id: str, user_id: str) -> str:
        """A new current key for the user; the earlier ones still open what they sealed."""
        kid = f"k{secrets.token_hex(6)}"
        kek_id, wrapped = self.kek.wrap(new_key(), dek_context(tenant_id, user_id, kid))

        def add(keys: UserKeys) -> UserKeys:
            return UserKeys(tenant_id, user_id, kid,
                            (*keys.keys, WrappedKey(kid, kek_id, wrapped, time.time())))

        if self.store.update(tenant_id, user_id, add) is None:
            return self.current(tenant_id, user_id)[0]
        self.forget(tenant_id, user_id)
        return kid

    def rewrap_all(self, kek: KekRing) -> int:
        """Rewrap every stored key with `kek`'s current KEK (after a KEK rotation), so the
        earlier KEKs can be dropped. Keys are unwrapped with this ring's KEKs."""
        def rewrapped(keys: UserKeys) -> UserKeys:
            found = []
            for k in keys.keys:
                context = dek_context(keys.tenant_id, keys.user_id, k.kid)
                kek_id, wrapped = kek.wrap(self._unwrap(keys, k), context)
                found.append(WrappedKey(k.kid, kek_id, wrapped, k.created_at))
            return UserKeys(keys.tenant_id, keys.user_id, keys.current, tuple(found))

        count = sum(self.store.update(tenant_id, user_id, rewrapped) is not None
                    for tenant_id, user_id in list(self.store.owners()))
        self.kek = kek
        return count

    def kek_ids_in_use(self) -> dict[str, int]:
        """How many stored keys each KEK wraps (a KEK can be dropped once it wraps none)."""
        found: dict[str, int] = {}
        for tenant_id, user_id in list(self.store.owners()):
            keys = self.store.load(tenant_id, user_id)
            for k in keys.keys if keys is not None else ():
                found[k.kek_id] = found.get(k.kek_id, 0) + 1
        return found

    def forget(self, tenant_id: str, user_id: str) -> None:
        with self._lock:
            self._cache.pop((tenant_id, user_id), None)
            # rare (an erasure, a rotation): the memos refill from the cache as they are read
            self._memo = {}
            self._by_kid.clear()  # in place: an `EnvelopeOpener` holds it for its batch
            self._sealers = {}

    def destroy(self, tenant_id: str, user_id: str) -> bool:
        """Destroy the user's keys (erasure): from here on nothing they sealed opens."""
        self.forget(tenant_id, user_id)
        return self.store.destroy(tenant_id, user_id)
