"""Ranking a tool's normal-priority guidance against what the agent is about to do.

Normal rules stay out of the prompt budget; an agent's memory-recall tool asks for them when a
tool may matter, with a sentence saying why. They are ranked by meaning when the local
multilingual sentence encoder is on (a rule written in German still matches an English query),
by shared words otherwise. Both are pure given the texts; the encoder is loaded once, off the
event loop, and rule embeddings are cached by a key the caller gives with each text: the rule as
its column holds it, sealed for a user. Keyed so, an erased user's embeddings can be dropped
after their keys are destroyed (erasure shreds first, so their texts no longer open), and no
text of a person is a key in memory.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Sequence
from typing import Any

from cachetools import LRUCache

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def lexical_scores(query: str, texts: Sequence[str]) -> list[float]:
    """Shared words over the query's words (how much of what was asked the rule covers)."""
    asked = words(query)
    if not asked:
        return [0.0 for _ in texts]
    return [len(asked & words(text)) / len(asked) for text in texts]


class Recaller:
    def __init__(self, semantic: bool = True, cache_size: int = 10_000):
        self._semantic = semantic
        self._model: Any = None
        self._lock = threading.RLock()  # the model and the cache are used from worker threads
        self._vectors: LRUCache[str, Any] = LRUCache(cache_size)

    def _encoder(self) -> Any:
        with self._lock:
            if self._model is None:
                from habitus.encoder import SharedModel

                self._model = SharedModel()  # the process's one model, shared with its other users
            return self._model

    def _semantic_scores(self, query: str, texts: Sequence[str], keys: Sequence[str]
                         ) -> list[float]:
        with self._lock:
            model = self._encoder()
            missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors}
            if missing:
                encoded = model.encode(list(missing.values()))
                for key, vector in zip(missing, encoded, strict=True):
                    self._vectors[key] = vector
            vectors = [self._vectors[key] for key in keys]
            asked = model.encode([query])[0]
        return [round(float(asked @ vector), 6) for vector in vectors]

    async def scores(self, query: str, texts: Sequence[str],
                     keys: Sequence[str] | None = None) -> list[float]:
        """Each text's score for `query`; `keys` (one per text, the text itself by default)
        name each text's cached embedding, as `forget` is later given them."""
        if not texts:
            return []
        if not self._semantic:
            return lexical_scores(query, texts)
        return await asyncio.to_thread(self._semantic_scores, query, texts,
                                       texts if keys is None else keys)

    def forget(self, keys: Sequence[str]) -> None:
        """Drop what is kept under these keys (an erased user's rules): a key asked for again
        is embedded again when it is next recalled."""
        with self._lock:
            for key in keys:
                self._vectors.pop(key, None)

    async def warm(self) -> None:
        """Load the model before the first recall needs it (a second or so, once)."""
        if self._semantic:
            await asyncio.to_thread(lambda: self._encoder().encode(["warm"]))
