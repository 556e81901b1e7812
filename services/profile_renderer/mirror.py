"""The workspace mirror: each user's PROFILE.md as a file, for people and tools that edit files.

Written atomically after the projection committed a new version. A file edited by hand since
Habitus wrote it is imported first (as the user's `ProfileNotesSaved`, so it goes through the same
compare-and-swap as any save) and overwritten only once that import is part of a newer version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from habitus.bus.publisher import EventPublisher
from habitus.events import CATALOG
from habitus.events.domain import ProfileNotesSaved
from services.profile_renderer import store

log = logging.getLogger(__name__)


def mirror_path(root: Path, tenant_id: str, user_id: str) -> Path:
    return root / "workspaces" / tenant_id / user_id / "PROFILE.md"


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".PROFILE.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _remove(root: Path, tenant_id: str, user_id: str) -> None:
    path = mirror_path(root, tenant_id, user_id)
    folder = path.parent
    if folder.exists():
        for leftover in folder.iterdir():  # PROFILE.md and any half-written temporary file
            if leftover.is_file():
                leftover.unlink(missing_ok=True)
    for parent in (folder, folder.parent):  # the user's folder, then an empty tenant folder
        with contextlib.suppress(OSError):
            parent.rmdir()


class Mirror:
    def __init__(self, pool: AsyncConnectionPool, publisher: EventPublisher, root: Path):
        self._pool = pool
        self._publisher = publisher
        self._root = root

    async def remove(self, users: Iterable[tuple[str, str]]) -> None:
        """An erased user's PROFILE.md and the folders that held only it."""
        for tenant_id, user_id in sorted(set(users)):
            await asyncio.to_thread(_remove, self._root, tenant_id, user_id)

    async def sync(self, users: Iterable[tuple[str, str]]) -> None:
        for tenant_id, user_id in sorted(set(users)):
            try:
                await self._sync_user(tenant_id, user_id)
            except Exception:  # one user's mirror must not stop the others'
                log.exception("mirror write failed", extra={"tenant": tenant_id})

    async def _sync_user(self, tenant_id: str, user_id: str) -> None:
        async with self._pool.connection() as conn, conn.cursor() as cur:
            document = await store.latest(cur, tenant_id, user_id)
            row = await store.mirror_state(cur, tenant_id, user_id)
        if document is None or (row is not None and row[0] >= document.version):
            return
        path = mirror_path(self._root, tenant_id, user_id)
        on_disk = await asyncio.to_thread(_read, path) if row is not None else None
        if on_disk is not None and row is not None:
            digest = store.sha256(on_disk)
            if digest not in (row[1], row[2]):
                await self._import(tenant_id, user_id, on_disk, int(row[0]), digest)
                return  # written once the import is part of a newer version
        await asyncio.to_thread(write_atomically, path, document.markdown)
        async with self._pool.connection() as conn, conn.cursor() as cur:
            await store.mirror_written(cur, tenant_id, user_id, document.version,
                                       document.sha256)

    async def _import(self, tenant_id: str, user_id: str, text: str, base_version: int,
                      digest: str) -> None:
        log.info("importing a hand edit of the mirror", extra={"tenant": tenant_id})
        event = CATALOG.new(ProfileNotesSaved(markdown=text, base_version=base_version),
                            tenant_id=tenant_id, user_id=user_id, producer="profile.mirror")
        await self._publisher.publish(event)
        async with self._pool.connection() as conn, conn.cursor() as cur:
            await store.mirror_pending(cur, tenant_id, user_id, digest)
