"""Deterministic authenticated encryption (AES-SIV, RFC 5297) for what projections keep.

A projection's columns are looked up by value (a facet's key and value are part of its primary
key; a rule is found by its text), so a value sealed twice must seal to the same bytes: AES-SIV
does that, and still authenticates. What it gives away is equality between two of the same
user's values, never their content, and nothing across users (each has a key of their own).

The key is derived (HKDF-SHA256) from the user's first data key, so destroying the user's keys
destroys it too, and rotating the user's data key leaves it as it was.
"""

from __future__ import annotations

from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from habitus.crypto.aead import SealError
from habitus.crypto.compiled import column_key

#: AES-SIV with two 256-bit halves (one authenticates, one encrypts)
SIV_KEY_BYTES: Final = 64


class ColumnCipher:
    """One user's deterministic cipher, bound to the user: a value sealed for one user does
    not open as another's."""

    def __init__(self, key: bytes, owner: bytes) -> None:
        self._siv = AESSIV(key)
        self._owner = [owner]
        self.owner = owner
        #: the key made ready for the compiled column sealer (habitus.crypto.compiled), or None
        self.compiled = column_key(key)

    def seal(self, plaintext: bytes) -> bytes:
        return self._siv.encrypt(plaintext, self._owner)

    def open(self, blob: bytes) -> bytes:
        try:
            return self._siv.decrypt(blob, self._owner)
        except InvalidTag:
            raise SealError("does not open with this user's column key") from None


def column_cipher(data_key: bytes, tenant_id: str, user_id: str) -> ColumnCipher:
    owner = f"habitus/columns/{tenant_id}/{user_id}".encode()
    key = HKDF(algorithm=hashes.SHA256(), length=SIV_KEY_BYTES, salt=None,
               info=owner).derive(data_key)
    return ColumnCipher(key, owner)
