"""What runs in a statement reader process (`services.producers.reading.apart`).

Apart from the rest so that a process imports only the reader: the service's bus, database
and projection modules are not loaded again in each of them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from services.producers.reading.reader import Statement, StatementReader

_PR_SET_PDEATHSIG = 1
_reader: StatementReader | None = None


def start_worker(parent: int) -> None:
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


def read_in_worker(texts: list[str]) -> list[list[Statement]]:
    assert _reader is not None, "the worker's initializer loads the reader"
    return _reader.read(texts)
