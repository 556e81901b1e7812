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
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from habitus.projection.faults import DependencyUnavailable
from services.producers.reading.ahead import ReadAhead
from services.producers.reading.reader import Statement, StatementReader

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
_reader: StatementReader | None = None


def _start_worker(parent: int) -> None:
    """In the worker: end with the parent (Linux), leave Ctrl-C to the parent, load the
    reader before the first chunk arrives."""
    global _reader
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took hold
            os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _reader = StatementReader()
    _reader.warm()


def _read(texts: list[str]) -> list[list[Statement]]:
    assert _reader is not None, "the worker's initializer loads the reader"
    return _reader.read(texts)


def _warmed(warming: asyncio.Future[list[list[Statement]]]) -> None:
    """A warm-up that failed is logged; the first reading retries it (the pool is new)."""
    if not warming.cancelled() and (exc := warming.exception()) is not None:
        log.warning("the statement reader could not be loaded ahead", extra={
            "error": repr(exc)})


class ReaderProcesses:
    """A pool of reader processes (a service's background part: `stop` ends them)."""

    def __init__(self, processes: int):
        if processes < 1:
            raise ValueError("at least one reader process")
        self.processes = processes
        self._pool = self._new_pool()
        self._warming: asyncio.Future[list[list[Statement]]] | None = None

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context(
            "spawn"), initializer=_start_worker, initargs=(os.getpid(),))

    def start(self) -> None:
        """Start the processes and load the reader in them, without waiting: the service is
        up meanwhile, and a batch that comes first waits for it (a few seconds after start)."""
        self._warming = asyncio.ensure_future(self.read(["warm up the reader"] * self.processes))
        self._warming.add_done_callback(_warmed)

    async def stop(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def read(self, texts: list[str]) -> list[list[Statement]]:
        """The statements of each text, the texts cut into one chunk per process."""
        size = -(-len(texts) // self.processes)
        chunks = [texts[i:i + size] for i in range(0, len(texts), size)] if texts else []
        loop = asyncio.get_running_loop()
        pool = self._pool
        try:
            parts = await asyncio.gather(*(loop.run_in_executor(pool, _read, chunk)
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
