"""Statements read in processes of their own.

In a thread, the reading takes turns with the apply for the interpreter: on the producers'
benchmark the projection spends about half its time reading. In a process of its own it runs
beside the apply, on another core, and a batch's statements are ready when the batch is (see
`services.producers.reading.ahead`).

Each process loads the reader once (the model, the bank and the gazetteer: about two seconds
and 200 MB) and serves one chunk of texts at a time; a batch is cut into one chunk per process.
Processes are started with `spawn`: the service's own process runs an event loop and threads,
which a forked child must not inherit. A process that dies (killed, out of memory) breaks the
pool: the reading that needed it fails as `DependencyUnavailable`, so the runner retries the
batch as it would after a database outage, and a new pool is started for the retry. A process
ends with the service's: it is asked to at `stop`, and the kernel ends it if the service dies
without a word.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from habitus.projection.faults import DependencyUnavailable
from services.producers.reading.ahead import ReadAhead
from services.producers.reading.reader import Statement
from services.producers.reading.worker import read_in_worker, start_worker

log = logging.getLogger(__name__)


class ReaderProcesses:
    """A pool of reader processes (a service's background part: `stop` ends them)."""

    def __init__(self, processes: int):
        if processes < 1:
            raise ValueError("at least one reader process")
        self.processes = processes
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context(
            "spawn"), initializer=start_worker, initargs=(os.getpid(),))

    async def warm(self) -> None:
        """Start the processes and load the reader in each: the service starts once it can
        read (as with the reader in a thread of its own process), so the first turns after a
        start do not wait for it."""
        await self.read(["warm up the reader"] * self.processes)

    def start(self) -> None:
        """Nothing more to start: `warm` started the processes."""

    async def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def read(self, texts: list[str]) -> list[list[Statement]]:
        """The statements of each text, the texts cut into one chunk per process."""
        size = -(-len(texts) // self.processes)
        chunks = [texts[i:i + size] for i in range(0, len(texts), size)] if texts else []
        loop = asyncio.get_running_loop()
        pool = self._pool
        try:
            parts = await asyncio.gather(*(loop.run_in_executor(pool, read_in_worker, chunk)
                                           for chunk in chunks))
        except BrokenProcessPool as exc:
            if self._pool is pool:  # the first reading to find it broken starts a new one
                log.warning("a statement reader process stopped; starting the pool again",
                            extra={"error": repr(exc)})
                pool.shutdown(wait=False, cancel_futures=True)
                self._pool = self._new_pool()
            raise DependencyUnavailable(
                "a statement reader process stopped; the reading is retried") from exc
        return [statements for part in parts for statements in part]


def in_processes(processes: ReaderProcesses) -> ReadAhead:
    return ReadAhead(processes.read)
