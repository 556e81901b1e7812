"""Following revocations: each gateway replica subscribes to the announcements (no queue group,
so every replica hears every one) and forgets the key in its cache at once."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from habitus.auth.revocation import KEYS_REVOKED, read_announcement
from services.gateway.auth import KeyCache

log = logging.getLogger(__name__)


class RevocationListener:
    """A background part of the gateway (started and stopped by the host)."""

    def __init__(self, nc: Any, cache: KeyCache) -> None:
        self._nc = nc
        self._cache = cache
        self._subscription: Any = None

    async def _heard(self, msg: Any) -> None:
        digest = read_announcement(msg.data)
        if digest is None:
            log.warning("ignored a revocation announcement that is not one",
                        extra={"subject": msg.subject})
            return
        self._cache.forget(digest)

    async def subscribe(self) -> None:
        """Subscribe before the gateway serves, so no announcement is missed after start."""
        if self._subscription is None:
            self._subscription = await self._nc.subscribe(KEYS_REVOKED, cb=self._heard)

    def start(self) -> None:
        """Already subscribed at wiring (`subscribe`); nothing runs beside it."""

    async def stop(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
