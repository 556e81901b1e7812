"""Per-key rate limits in Redis (fixed one-minute windows), counted in ingested items or calls.

One limiter per budget: `scope` keeps the budgets' counters apart (the writes' keys stay
`habitus:rl:<key>:<window>`, as before; reads count under `habitus:rl:read:...`), so spending one
never spends the other.

Redis is a cache here, never the source of truth: when it is unreachable the limiter lets the
request through rather than failing ingest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

#: a window's counter outlives its minute by one, then goes
_EXPIRY_SECONDS = 120
#: the charge: add to the window's counter and (re)set its expiry, as one step
_CHARGE = ("local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
           "redis.call('EXPIRE', KEYS[1], ARGV[2]) return n")


# A lease: take up to ARGV[1] units, all of them if the window has room, else what is left
# (the rest given back at once, so the counter never stays past the limit). ARGV: the units,
# the expiry, the limit. Returns the units granted.
_LEASE = ("local want = tonumber(ARGV[1]) "
          "local n = redis.call('INCRBY', KEYS[1], want) "
          "redis.call('EXPIRE', KEYS[1], ARGV[2]) "
          "local over = n - tonumber(ARGV[3]) "
          "if over <= 0 then return want end "
          "local back = math.min(over, want) "
          "redis.call('DECRBY', KEYS[1], back) "
          "return want - back")


def _window(now: float) -> int:
    return int(now // 60)


def _retry_after(now: float) -> int:
    return int(60 - now % 60) + 1


@dataclass(frozen=True)
class Charge:
    """A charge queued on a pipeline: the window's counter, what was added, when it resets."""

    name: str
    cost: int
    retry_after: int


class RateLimiter:
    def __init__(self, redis: Redis, per_minute: int, scope: str = ""):
        self._redis = redis
        self._per_minute = per_minute
        self._prefix = f"habitus:rl:{scope}:" if scope else "habitus:rl:"

    def queue(self, pipe: Pipeline, key_id: str, cost: int = 1) -> Charge | None:
        """Queue the charge on `pipe` as its next command; None: this budget is unlimited and
        nothing was queued. The caller executes the pipeline and hands that command's result
        to `settle`: a read can ride in the same round trip as its charge.

        One script rather than INCRBY and EXPIRE inside MULTI/EXEC: Redis runs a script
        whole, so the counter still never lives without its expiry, and the pipeline needs no
        transaction around it (four commands and replies become one on every request)."""
        if self._per_minute <= 0:
            return None
        now = time.time()
        name = self._counter(key_id, now)
        pipe.eval(_CHARGE, 1, name, cost, _EXPIRY_SECONDS)
        return Charge(name, cost, _retry_after(now))

    def _counter(self, key_id: str, now: float) -> str:
        return f"{self._prefix}{key_id}:{_window(now)}"

    @property
    def per_minute(self) -> int:
        return self._per_minute

    async def lease(self, key_id: str, units: int) -> int:
        """Take up to `units` from the key's current window at once: how many were granted
        (0: the window is used up). Redis failing grants them all, as `allow` lets a request
        through."""
        try:
            granted = await self._redis.eval(_LEASE, 1, self._counter(key_id, time.time()),
                                             units, _EXPIRY_SECONDS, self._per_minute)
        except RedisError as exc:
            log.warning("rate limiter unavailable; allowing", extra={"error": repr(exc)})
            return units
        return int(granted)

    async def settle(self, charge: Charge | None, count: Any) -> tuple[bool, int]:
        """(allowed, seconds until the window resets) from the counter's value after the
        charge; a refused charge is taken back."""
        if charge is None:
            return True, 0
        if int(count) <= self._per_minute:
            return True, charge.retry_after
        # A refused request stores nothing, so it must not use up the window either.
        try:
            await self._redis.decrby(charge.name, charge.cost)
        except RedisError:
            pass
        return False, charge.retry_after

    async def allow(self, key_id: str, cost: int = 1) -> tuple[bool, int]:
        """Returns (allowed, seconds until the window resets)."""
        if self._per_minute <= 0:
            return True, 0
        try:
            pipe = self._redis.pipeline(transaction=False)
            charge = self.queue(pipe, key_id, cost)
            [count] = await pipe.execute()
        except RedisError as exc:
            log.warning("rate limiter unavailable; allowing", extra={"error": repr(exc)})
            return True, 0
        return await self.settle(charge, count)


class LeasedBudget:
    """A limiter's units taken from Redis several at a time and spent in this process, for the
    reads answered from memory (services.gateway.local_contexts): a read that needs no Redis
    should not wait a round trip for its charge.

    The window's counter in Redis counts a lease as spent when it is taken, so every process
    together never lets through more than the limit; what a process holds unspent when the
    minute turns is lost (it was counted in its minute). A lease is at most a hundredth of the
    limit, so that is at most a hundredth of a minute's reads a process, and one process cannot
    hold back much of a budget others need. One lease is fetched at a time per key.

    The next lease is fetched in the background once a quarter of the last is left (`AHEAD`):
    a read that found the lease used up waited a Redis round trip, one read in `units`, and
    under load that wait was in the reads' p99. At most a quarter of a lease more is held
    unspent, so the bound above stays about a hundredth."""

    #: the share of a lease left when the next is fetched ahead
    AHEAD = 0.25

    def __init__(self, limiter: RateLimiter, units: int) -> None:
        self._limiter = limiter
        self.units = max(1, min(units, limiter.per_minute // 100))
        self._window = -1
        #: units left in the current window, per key
        self._left: dict[str, int] = {}
        self._fetching: dict[str, asyncio.Lock] = {}
        #: the leases being fetched ahead, per key (held: the loop keeps tasks weakly)
        self._ahead: dict[str, asyncio.Task[None]] = {}

    async def take(self, key_id: str) -> tuple[bool, int]:
        """(allowed, seconds until the window resets) for one read."""
        if self._limiter.per_minute <= 0:
            return True, 0
        now = time.time()
        if self._spend(key_id, now):
            return True, _retry_after(now)
        lock = self._fetching.setdefault(key_id, asyncio.Lock())
        async with lock:
            if self._spend(key_id, now):  # a lease fetched while this one waited
                return True, _retry_after(now)
            granted = await self._limiter.lease(key_id, self.units)
            if granted <= 0:
                return False, _retry_after(now)
            self._roll(now)
            self._left[key_id] = self._left.get(key_id, 0) + granted - 1
        return True, _retry_after(now)

    def _spend(self, key_id: str, now: float) -> bool:
        self._roll(now)
        left = self._left.get(key_id, 0)
        if left <= 0:
            return False
        self._left[key_id] = left - 1
        if left - 1 <= self.units * self.AHEAD:
            self._fetch_ahead(key_id)
        return True

    def _fetch_ahead(self, key_id: str) -> None:
        lock = self._fetching.setdefault(key_id, asyncio.Lock())
        if lock.locked() or key_id in self._ahead:
            return  # a lease is on its way
        task = asyncio.get_running_loop().create_task(self._refill(key_id, lock))
        self._ahead[key_id] = task
        task.add_done_callback(lambda _: self._ahead.pop(key_id, None))

    async def _refill(self, key_id: str, lock: asyncio.Lock) -> None:
        async with lock:
            window = _window(time.time())
            try:
                granted = await self._limiter.lease(key_id, self.units)
            except Exception:  # the read that finds the lease used up fetches one itself
                log.warning("read lease not fetched ahead", exc_info=True)
                return
            now = time.time()
            # a lease counted in a window that has ended is spent there, not in this one
            if granted > 0 and _window(now) == window:
                self._roll(now)
                self._left[key_id] = self._left.get(key_id, 0) + granted

    def _roll(self, now: float) -> None:
        window = _window(now)
        if window != self._window:
            self._window = window
            self._left.clear()
            self._fetching = {k: v for k, v in self._fetching.items() if v.locked()}
