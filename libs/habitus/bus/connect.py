"""One way to connect to NATS, with reconnects that never give up on a long outage."""

from __future__ import annotations

import logging
from typing import Any

import nats
from nats.aio.client import Client

from habitus.bus import headers

log = logging.getLogger(__name__)
headers.install()  # every client of the process parses headers the faster way


def server_urls(url: str) -> list[str]:
    """The servers `url` names: one, or a cluster's nodes comma-separated (HABITUS_NATS_URL),
    which a client tries in turn and fails over between."""
    return [part.strip() for part in url.split(",") if part.strip()]


async def connect(url: str, name: str, **kwargs: Any) -> Client:
    holder: list[Client] = []

    async def on_error(exc: Exception) -> None:
        log.warning("nats error", extra={"client": name, "error": repr(exc)})

    async def on_disconnected() -> None:
        if holder and (holder[0].is_draining or holder[0].is_closed):
            return  # our own drain/close, not an outage
        log.warning("nats disconnected", extra={"client": name})

    async def on_reconnected() -> None:
        log.info("nats reconnected", extra={"client": name})

    options: dict[str, Any] = {
        "servers": server_urls(url),
        "name": name,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "connect_timeout": 5,
        # No buffering while reconnecting: a publish then fails at once instead of being sent
        # after its caller gave up on it (see habitus.bus.publisher).
        "pending_size": 0,
        "error_cb": on_error,
        "disconnected_cb": on_disconnected,
        "reconnected_cb": on_reconnected,
    }
    options.update(kwargs)
    client = await nats.connect(**options)
    holder.append(client)
    return client
