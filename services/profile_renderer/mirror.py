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
from collections.abc import Iterable, Sequence
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


Edited = tuple[store.MirrorDue, str, str]  # the user, the file as found, its sha


def _write_due(root: Path, due: Sequence[store.MirrorDue]
               ) -> tuple[list[tuple[str, str, int, str]], list[Edited]]:
    """Write each due user's file unless it was edited by hand since the mirror wrote it:
    (what was written, as (tenant, user, version, sha); the edited files, to import). One
    user's failure (a full disk, a permission) is logged and the others still written."""
    written: list[tuple[str, str, int, str]] = []
    edited: list[Edited] = []
    for item in due:
        path = mirror_path(root, item.tenant_id, item.user_id)
        try:
            on_disk = _read(path) if item.written is not None else None
            if on_disk is not None and item.written is not None:
                digest = store.sha256(on_disk)
                if digest not in (item.written[1], item.written[2]):
                    edited.append((item, on_disk, digest))
                    continue
            write_atomically(path, item.document.markdown)
        except Exception:
            log.exception("mirror write failed", extra={"tenant": item.tenant_id})
            continue
        written.append((item.tenant_id, item.user_id, item.document.version,
                        item.document.sha256))
    return written, edited


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
        """Write the batch's users' new versions: one statement finds who is due, one thread
        hop reads and writes their files, one statement records what was written. A file
        edited by hand since it was written is imported instead (and written once the
        import is part of a newer version)."""
        try:
            async with self._pool.connection() as conn, conn.cursor() as cur:
                due = await store.mirrors_due(cur, sorted(set(users)))
            if not due:
                return
            written, edited = await asyncio.to_thread(_write_due, self._root, due)
            if written:
                async with self._pool.connection() as conn, conn.cursor() as cur:
                    await store.mirrors_written(cur, written)
        except Exception:  # the mirror is a copy: the next render of these users writes it
            log.exception("mirror sync failed")
            return
        for item, on_disk, digest in edited:
            assert item.written is not None
            try:
                await self._import(item.tenant_id, item.user_id, on_disk,
                                   item.written[0], digest)
            except Exception:  # one user's import must not stop the others'
                log.exception("mirror import failed", extra={"tenant": item.tenant_id})

    async def _import(self, tenant_id: str, user_id: str, text: str, base_version: int,
                      digest: str) -> None:
        log.info("importing a hand edit of the mirror", extra={"tenant": tenant_id})
        event = CATALOG.new(ProfileNotesSaved(markdown=text, base_version=base_version),
                            tenant_id=tenant_id, user_id=user_id, producer="profile.mirror")
        await self._publisher.publish(event)
        async with self._pool.connection() as conn, conn.cursor() as cur:
            await store.mirror_pending(cur, tenant_id, user_id, digest)
