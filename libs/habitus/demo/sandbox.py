"""The demo's sandbox: a data directory, servers and ports that belong to the demo alone.

`habitus demo` replays two invented companies into the system it runs on, and its scripted
model answers every extraction that system asks for. Run on the data `habitus up` uses
(``./var`` or HABITUS_DATA_DIR), or on the servers HABITUS_*_URL name, it would add its
tenants to the user's own system and write invented summaries for the user's own users. So the
demo never runs there: it gets a fresh temporary directory (under ``$TMPDIR``) with embedded
servers on free ports and a gateway on a free port of 127.0.0.1, and the settings that name the
user's system (server URLs, data directory, gateway address, bootstrap and admin keys) are not
used; the directory is removed when the demo ends, unless `--keep` asks to keep it.

Being fresh, a sandbox holds no tenant but the demo's: a second demo needs no other names for
its tenants, and nothing the demo writes can land on a tenant or user it did not create.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from habitus.config import Settings
from habitus.runtime.embedded import free_port

PREFIX = "habitus-demo-"
#: written into every sandbox: the demo (`habitus.demo.system`) refuses a directory without it
MARKER = "demo-sandbox"
#: the settings that name the user's own system, which the sandbox replaces with its own
REPLACED: tuple[str, ...] = ("nats_url", "database_url", "redis_url", "data_dir",
                             "http_host", "http_port", "bootstrap_keys", "admin_keys",
                             "keystore_dir", "kek", "kek_file")
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Sandbox:
    data_dir: Path
    #: what the demo's `habitus up` runs with: the base settings, REPLACED by the sandbox's
    settings: Settings
    #: HABITUS_* variables set in the environment that the demo does not use (said at start)
    ignored: tuple[str, ...]


def variable(field: str) -> str:
    return f"HABITUS_{field.upper()}"


def create(base: Settings, env: Mapping[str, str] | None = None,
           parent: Path | None = None) -> Sandbox:
    """A fresh sandbox under `parent` (default: the temporary directory), with settings for it:
    embedded servers (no URL), its own gateway port, no keys but the dev key it makes."""
    env = os.environ if env is None else env
    data_dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent)).resolve()
    (data_dir / MARKER).write_text(
        "The data of one `habitus demo`: removed when it ends (unless --keep).\n")
    settings = base.model_copy(update={
        "nats_url": None, "database_url": None, "redis_url": None, "data_dir": data_dir,
        "http_host": HOST, "http_port": free_port(HOST), "bootstrap_keys": "",
        "admin_keys": "",
        # the demo's data keys are its own too, removed with the sandbox
        "keystore_dir": data_dir / "keystore", "kek": None, "kek_file": None})
    ignored = tuple(variable(f) for f in REPLACED if env.get(variable(f), "").strip())
    return Sandbox(data_dir, settings, ignored)


def is_sandbox(settings: Settings) -> bool:
    """Whether `settings` are a sandbox's: its marked directory and no configured server."""
    configured = settings.nats_url or settings.database_url or settings.redis_url
    return not configured and (settings.data_dir / MARKER).is_file()


def remove(data_dir: Path) -> str | None:
    """Delete a sandbox once nothing runs on it; why it could not be, or None. Refuses any
    directory that is not a sandbox, so a wrong path can never delete a user's data."""
    if not (data_dir / MARKER).is_file():
        return f"{data_dir} is not a demo sandbox (no {MARKER} file); left as it is"
    errors: list[str] = []

    def failed(_function: object, path: str, info: tuple[type, BaseException, object]) -> None:
        errors.append(f"{path}: {info[1]}")

    shutil.rmtree(data_dir, onerror=failed)
    return f"could not remove all of {data_dir} ({errors[0]})" if errors else None
