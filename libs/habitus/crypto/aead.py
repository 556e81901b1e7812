"""Authenticated encryption with AES-256-GCM (the `cryptography` package's AESGCM).

A sealed blob is a fresh 96-bit nonce followed by the ciphertext and its tag. The associated
data binds a blob to whose it is and where it belongs (for a payload: tenant, user, key id,
event id and type; habitus.crypto.keyring): a blob copied into another event, of another user
or of the same one, does not open. Random nonces are safe for the volumes
one data key sees (NIST's bound for random 96-bit nonces is 2^32 messages per key; a user
rotating at that volume is far away).
"""

from __future__ import annotations

import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12


class SealError(ValueError):
    """A blob that does not open: the wrong key, the wrong owner, or altered bytes."""


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


Cipher = AESGCM


def cipher(key: bytes) -> Cipher:
    """A key made ready to use (its schedule computed once: a keyring keeps these)."""
    return AESGCM(key)


def seal(key: bytes | Cipher, plaintext: bytes, associated: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    aead = key if isinstance(key, AESGCM) else AESGCM(key)
    return nonce + aead.encrypt(nonce, plaintext, associated)


def open_sealed(key: bytes | Cipher, blob: bytes, associated: bytes) -> bytes:
    if len(blob) < NONCE_BYTES + 16:
        raise SealError("too short to be sealed")
    aead = key if isinstance(key, AESGCM) else AESGCM(key)
    try:
        return aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], associated)
    except InvalidTag:
        raise SealError("does not open with this key for this owner") from None
