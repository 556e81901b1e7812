"""Each tenant's routing state, kept for a second by the process that routes.

A decision is on every agent turn, so the tenant's state (default policy, learned tables,
aggregates, configuration: five small reads) is kept for `ttl` seconds. A change this process
folds (a policy, a default, a configuration) drops the tenant's entry twice: inside the
projection's transaction, and once it committed. A read that started before the change and
finishes after it is not stored (each tenant's entry has a generation the read must still
match), so a command that waited for the fold is followed by decisions that reflect it. Other
processes that route for the tenant see the change within `ttl`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from cachetools import TTLCache

T = TypeVar("T")


class StateCache(Generic[T]):
    def __init__(self, ttl: float, size: int = 10_000):
        self._entries: TTLCache[str, T] = TTLCache(size, ttl)
        self._generation: dict[str, int] = {}

    async def get(self, tenant_id: str, read: Callable[[str], Awaitable[T]]) -> T:
        cached = self._entries.get(tenant_id)
        if cached is not None:
            return cached
        generation = self._generation.get(tenant_id, 0)
        state = await read(tenant_id)
        if self._generation.get(tenant_id, 0) == generation:
            self._entries[tenant_id] = state
        return state

    def drop(self, tenants: Iterable[str]) -> None:
        for tenant_id in tenants:
            self._entries.pop(tenant_id, None)
            self._generation[tenant_id] = self._generation.get(tenant_id, 0) + 1
