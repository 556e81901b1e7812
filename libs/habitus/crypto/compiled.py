"""The compiled envelope (`habitus.crypto._envelope`, libs/habitus/crypto/_envelope.c), where
it was built: sealing and opening an event body, and sealing a column value, in one call into
C each, with keys made ready once (their OpenSSL contexts keyed when the keyring reads them).

On a consumer that does little else, the dozen calls the Python path makes per body are most of
what sealing adds; these do the same work over the same bytes. The editable install builds
the extension where a C compiler and OpenSSL's headers are found; elsewhere every name here is
None and the Python path runs alone, opening, refusing and falling back on the same bodies
(tests/unit/test_crypto_native.py). `HABITUS_NATIVE_ENVELOPE=0` turns it off.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any


def _load() -> ModuleType | None:
    if os.environ.get("HABITUS_NATIVE_ENVELOPE", "1") == "0":
        return None
    try:
        # by its full name: `from habitus.crypto import _envelope` would read, to the layering
        # check, as this module importing its own package back
        return importlib.import_module("habitus.crypto._envelope")
    except ImportError:
        return None


_native = _load()

#: a compiled key: an opaque capsule holding the key's keyed OpenSSL contexts
CompiledKey = Any

#: (memo by key id, fresh-after time, body) -> the body's plain JSON, or None where the
#: Python path decides (habitus.crypto.sealing.EnvelopeOpener)
open_enveloped: Callable[[dict[bytes, Any], float, bytes], bytes | None] | None = (
    None if _native is None else _native.open_enveloped)
#: (body, data key, key id) -> the sealed body (habitus.crypto.sealing.seal_event_json)
seal_enveloped: Callable[[bytes, CompiledKey, bytes], bytes] | None = (
    None if _native is None else _native.seal_enveloped)
#: (column key, owner, text) -> the sealed column value, None for "" (habitus.crypto.columns)
seal_column: Callable[[CompiledKey, bytes, str], str | None] | None = (
    None if _native is None else _native.seal_column)


def data_key(key: bytes) -> CompiledKey | None:
    """A user's 32-byte data key made ready for the compiled opener and sealer."""
    return None if _native is None else _native.data_key(key)


def column_key(key: bytes) -> CompiledKey | None:
    """A user's 64-byte column key made ready for the compiled column sealer."""
    return None if _native is None else _native.column_key(key)
