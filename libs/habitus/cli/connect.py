"""The servers a `habitus` command that works on the bus or the database talks to.

They need HABITUS_NATS_URL (and HABITUS_DATABASE_URL for some); when those are unset and a
`habitus up` runs on the same data directory, its servers are used, so `habitus keys create` or
`habitus lag` just work next to `make run`. A server that is named but not there is one clear
line and exit 2, never a connect timeout and a traceback.

Heavy imports (the NATS client, `habitus up`'s state) are made inside the functions: every
`habitus` run imports this module for its help text.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from habitus.cli.gateway import fail
from habitus.config import Settings, get_settings

T = TypeVar("T")


def live_settings(keys: tuple[str, ...] = ("nats_url", "database_url", "redis_url")
                  ) -> Settings:
    """Settings, with the URLs among `keys` the environment leaves unset taken from a live
    `habitus up` on the same data directory. Its runtime.json can be stale (a `habitus up`
    that was killed) or name a server that is down: that is one clear line and exit 2 at once,
    not a connect timeout and a pool traceback."""
    settings = get_settings()
    from habitus.runtime.state import Unavailable, live_urls

    missing = [name for name in keys if not getattr(settings, name)]
    if not missing:
        return settings
    try:
        live = live_urls(settings.data_dir.resolve(), missing)
    except Unavailable as exc:
        raise fail(str(exc)) from None
    return settings.model_copy(update={k: live.get(k) for k in missing})


def bus_settings(*needed: str) -> Settings:
    """`live_settings` of the `needed` URLs (`nats_url`, `database_url`), each required: a
    missing or unreachable one is one line and exit 2."""
    settings = live_settings(needed)
    for name in needed:
        if not getattr(settings, name):
            raise fail(f"HABITUS_{name.upper()} is not set and no `habitus up` is running "
                       "here: start one (`habitus up`) or set it")
    return settings


def need(value: str | None, name: str) -> str:
    """`value`, which the command cannot do without (`HABITUS_<name>`), or exit 2 saying so."""
    if not value:
        raise fail(f"HABITUS_{name} is not set and no `habitus up` is running here.")
    return value


def where(url: str) -> str:
    """A server URL without its credentials, to print."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


@contextlib.asynccontextmanager
async def nats(settings: Settings, name: str) -> AsyncIterator[Any]:
    """A NATS connection for one command, made once (no reconnects) and closed after."""
    from habitus.bus import connect

    async def quiet(exc: Exception) -> None:
        return None  # a failed connect is reported below, once

    url = str(settings.nats_url)
    try:
        nc = await connect(url, name, max_reconnect_attempts=1, connect_timeout=3,
                           allow_reconnect=False, error_cb=quiet)
    except Exception as exc:  # nats raises several kinds for "not there"
        raise fail(f"cannot reach NATS at {where(url)} ({type(exc).__name__}: {exc}): is it "
                   "running? (`habitus up` starts one)") from None
    try:
        yield nc
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one command's coroutine to its end."""
    return asyncio.run(main())
