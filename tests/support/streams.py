"""Reading what a test's services published, straight from the streams."""

from __future__ import annotations

from typing import Any

from habitus.events import CATALOG, Event


async def fetch_all(nc: Any, stream: str, subject: str, wait: float = 0.3) -> list[Any]:
    """Every message on `subject` in `stream` now (an ephemeral consumer, acked as read)."""
    js = nc.jetstream()
    info = await js.stream_info(stream, subjects_filter=subject)
    if not info.state.subjects:
        return []
    sub = await js.pull_subscribe(subject, stream=stream)
    out: list[Any] = []
    try:
        while True:
            batch = await sub.fetch(100, timeout=wait)
            for msg in batch:
                await msg.ack()
            out.extend(batch)
    except Exception:  # nats' fetch timeout: nothing more
        pass
    finally:
        await sub.unsubscribe()
    return out


async def events_on(nc: Any, stream: str, subject: str) -> list[Event[Any]]:
    return [CATALOG.decode(m.data) for m in await fetch_all(nc, stream, subject)]
