"""Statements read ahead of the batch that needs them.

Reading statements is the largest part of the producers' own work (regular expressions, the
gazetteer, the sentence encoder; about half of a batch's time on a realistic mix) and needs no
state: only the texts. So the projection starts reading a batch's texts as soon as the runner
has decoded it (`Projection.ahead`), while the batch before it is still being applied, and takes
the statements when it applies the batch. Where the reading runs is the `submit` given: a
worker thread of the service's process (`in_thread`), or processes of its own
(`services.producers.reading.apart`), where it also runs beside the apply instead of taking
turns with it for the interpreter.

Readings started ahead are keyed by text, so the apply finds them whatever became of the batch
in between (a redelivery decoded again, a batch split by a rewind); what it does not find is
read then. Only the last `keep` readings are kept (8: one ahead and one being applied for each
of up to four partitions the process runs; a reading pushed out is only read again).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from services.producers.reading.reader import Statement, StatementReader

Submit = Callable[[list[str]], Awaitable[list[list[Statement]]]]


def _retrieved(future: asyncio.Future[list[list[Statement]]]) -> None:
    """A reading started ahead may fail unused (its batch rewound): its error is read here so
    asyncio does not report it as never retrieved; the apply that needs it reads again."""
    if not future.cancelled():
        future.exception()


class ReadAhead:
    """`start` a reading of texts; `read` the statements of texts, from readings started
    ahead where there is one, in one new reading for the rest."""

    def __init__(self, submit: Submit, keep: int = 8):
        self._submit = submit
        self._started: deque[tuple[dict[str, int], asyncio.Future[list[list[Statement]]]]] = (
            deque(maxlen=keep))

    def start(self, texts: Sequence[str]) -> None:
        """Begin reading `texts` now; the caller does not wait (see the module docstring)."""
        unique = list(dict.fromkeys(texts))
        if not unique:
            return
        future = asyncio.ensure_future(self._submit(unique))
        future.add_done_callback(_retrieved)
        self._started.append(({text: n for n, text in enumerate(unique)}, future))

    async def read(self, texts: Sequence[str]) -> list[list[Statement]]:
        """The statements of each text, in order."""
        found: list[tuple[int, asyncio.Future[list[list[Statement]]], int]] = []
        rest: list[int] = []
        for n, text in enumerate(texts):
            for index, future in reversed(self._started):
                at = index.get(text)
                if at is not None and not _failed(future):
                    found.append((n, future, at))
                    break
            else:
                rest.append(n)
        results: list[list[Statement]] = [[] for _ in texts]
        if rest:
            fresh = list(dict.fromkeys(texts[n] for n in rest))
            read = dict(zip(fresh, await self._submit(fresh), strict=True))
            for n in rest:
                results[n] = read[texts[n]]
        for n, future, at in found:
            results[n] = (await future)[at]
        return results


def _failed(future: asyncio.Future[list[list[Statement]]]) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)


def in_thread(reader: StatementReader) -> ReadAhead:
    """Reading in a worker thread of this process: it overlaps the apply's waits for Postgres
    and NATS, but takes turns with the apply for the interpreter."""
    async def submit(texts: list[str]) -> list[list[Statement]]:
        return await asyncio.to_thread(reader.read, texts)

    return ReadAhead(submit)
