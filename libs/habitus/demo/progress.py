"""Catching up: until every projection applied what the streams hold and every user's learning
and extraction are idle.

Each projection's lag is what `habitus lag` measures (`habitus.ops.lag`), as the demo's table
shows it; the users' state is asked of the gateway like everything else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats
import psycopg

from habitus.bus.connect import server_urls
from habitus.demo.api import Api
from habitus.demo.scenario import Scenario
from habitus.ops.lag import measure


@dataclass
class Lag:
    projection: str
    stream: str
    last_seq: int | None
    checkpoint: int | None
    pending: int | None

    @property
    def caught_up(self) -> bool:
        """Its consumer has nothing pending; or it has no consumer (yet) and nothing to read: a
        service still starting (slow on a busy machine) has no consumer while its events wait."""
        return self.pending == 0 or (self.pending is None and not self.last_seq)


def _lags(measured: list[Any]) -> list[Lag]:
    return [Lag(m.projection, m.stream, m.stream_seq, m.checkpoint,
                None if m.pending is None else m.pending + (m.ack_pending or 0))
            for m in sorted(measured, key=lambda m: m.projection)]


async def _projection_lag(nats_url: str, database_url: str) -> list[Lag]:
    """What `habitus lag` measures (the checkpoints read through the checkpoint store), as
    the demo's table shows it."""
    nc = await nats.connect(server_urls(nats_url), name="habitus-demo")
    try:
        return _lags(await measure(nc, database_url))
    finally:
        await nc.close()


def projection_lag(nats_url: str, database_url: str) -> list[Lag]:
    return asyncio.run(_projection_lag(nats_url, database_url))


class LagProbe:
    """`projection_lag` again and again, over one NATS connection and one database
    connection on a loop of its own: the demo's wait asks twice a second, and connecting
    afresh each time cost about a fifth of a demo's CPU."""

    def __init__(self, nats_url: str, database_url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._nats_url, self._database_url = nats_url, database_url
        self._nc: Any = None
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def _measure(self) -> list[Lag]:
        if self._nc is None:
            self._nc = await nats.connect(server_urls(self._nats_url), name="habitus-demo")
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(self._database_url,
                                                               autocommit=True)
        try:
            return _lags(await measure(self._nc, self._conn))
        except psycopg.OperationalError:
            await self._conn.close()  # the next measurement connects again
            raise

    def measure(self) -> list[Lag]:
        return self._loop.run_until_complete(self._measure())

    def close(self) -> None:
        async def closed() -> None:
            if self._nc is not None:
                await self._nc.close()
            if self._conn is not None:
                await self._conn.close()

        try:
            self._loop.run_until_complete(closed())
        finally:
            self._loop.close()


def _user_settled(api: Api, user: str, extractor: bool) -> str | None:
    """Why the user is not settled yet, or None."""
    facets = api.rpc("learning.list_facets", user_id=user)
    if facets["pending_since"] is not None:
        return "learning"
    if extractor:
        status = api.rpc("extraction.status", user_id=user)
        if status["enabled"]:
            w = status["windows"]
            if w.get("open", 0) or w.get("ready", 0):
                return "extraction"
    return None


def wait_caught_up(api: dict[str, Api], scenario: Scenario, *, timeout: float,
                   nats_url: str | None = None, database_url: str | None = None,
                   on_status: Callable[[list[Lag], dict[str, str]], None] | None = None,
                   extractor: bool = True) -> bool:
    """Until every projection applied what the streams hold and every user's learning and
    extraction are idle, twice in a row; False on timeout."""
    deadline = time.monotonic() + timeout
    calm = 0
    probe = LagProbe(nats_url, database_url) if nats_url and database_url else None
    try:
        while time.monotonic() < deadline:
            lags = probe.measure() if probe is not None else []
            waiting = {}
            for t, u in scenario.users():
                why = _user_settled(api[t.tenant_id], u.user_id, extractor)
                if why:
                    waiting[u.user_id] = why
            if on_status is not None:
                on_status(lags, waiting)
            calm = calm + 1 if all(lag.caught_up for lag in lags) and not waiting else 0
            if calm >= 2:
                return True
            time.sleep(0.5)
        return False
    finally:
        if probe is not None:
            probe.close()
