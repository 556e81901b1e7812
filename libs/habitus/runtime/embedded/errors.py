"""The error every embedded server raises, and the tail of a server's log that it carries."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

_LOG_TAIL_LINES: Final = 40


class EmbeddedServerError(RuntimeError):
    """A server could not be started or stopped; the message carries the tail of its log."""


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - 16384))
            data = fh.read()
    except OSError as err:
        return f"(no log at {path}: {err})"
    tail = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"
