"""Writing key material: a fresh file beside its destination, readable by its owner only,
synced before anyone can see it under the destination's name."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def private_temporary(destination: Path, text: str) -> Path:
    """`text` written and synced to a new file (mode 0600) in `destination`'s directory
    (created 0700 if missing); the caller links or renames it into place."""
    destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = destination.with_name(f".{destination.name}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return temporary
