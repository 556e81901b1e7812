"""What a load run checks besides throughput: another tenant's first words during the burst,
and whether the processes' memory, descriptors and connections stay flat (the soak).

The second-tenant probe is the fairness promise made concrete: while one set of tenants sends
flat out, a tenant that was quiet says one plain sentence and the probe times how long until
that user's `prompt.context` shows anything learned from it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.load.report import SENTENCE

#: what the quiet tenant says (a preference the statement reader takes as it is)


async def _context(client: httpx.AsyncClient, key: str, user: str) -> str:
    response = await client.post("/v1/rpc/prompt.context", json={"user_id": user},
                                 headers={"Authorization": f"Bearer {key}"})
    response.raise_for_status()
    return str(response.json())


async def second_tenant(client: httpx.AsyncClient, key: str, user: str, *, timeout: float,
                        every: float = 0.25) -> dict[str, Any]:
    """Send one turn for `user` of a quiet tenant and poll its prompt context until it
    differs from before: seconds until then (None: not within `timeout`), and any error."""
    from habitus.client.items import turn, wire_item

    try:
        before = await _context(client, key, user)
        now = time.time()
        item = wire_item(turn(user, SENTENCE, "Understood: brief answers from now on.",
                              session_id="probe", turn_id=f"p{int(now * 1000)}",
                              at=now - 1, answered_at=now))
        sent = time.monotonic()
        response = await client.post("/v1/events", json=[item],
                                     headers={"Authorization": f"Bearer {key}"})
        if response.status_code >= 300:
            return {"seconds": None, "status": response.status_code,
                    "error": response.text[:300]}
        while time.monotonic() - sent < timeout:
            if await _context(client, key, user) != before:
                return {"seconds": round(time.monotonic() - sent, 3),
                        "status": response.status_code, "error": None}
            await asyncio.sleep(every)
        return {"seconds": None, "status": response.status_code, "error": None}
    except httpx.HTTPError as exc:
        return {"seconds": None, "status": None, "error": repr(exc)}


def resources(children: dict[str, Any]) -> dict[str, dict[str, int]]:
    """RSS and PSS bytes and open file descriptors of every process runtime.json names (a
    process with its children, such as Postgres and its backends, as one). PSS shares each
    shared page among the processes that map it: summed RSS counts Postgres's shared buffers
    once per backend that touched them, so it grows as backends touch more of them, which is
    no leak."""
    try:
        import psutil
    except ImportError:
        return {}
    out: dict[str, dict[str, int]] = {}
    for name, child in children.items():
        try:
            proc = psutil.Process(int(child["pid"]))
            if abs(proc.create_time() - float(child["create_time"])) > 1.0:
                continue
            procs = [proc, *proc.children(recursive=True)]
            rss = pss = fds = 0
            for p in procs:
                try:
                    full = p.memory_full_info()
                    rss += full.rss
                    pss += getattr(full, "pss", full.rss)
                    fds += p.num_fds()
                except psutil.Error:
                    continue
            out[str(name)] = {"rss": rss, "pss": pss, "fds": fds, "processes": len(procs)}
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
    return out


async def database_connections(pool: Any) -> int | None:
    """Client connections the server holds (every service's pools, and ours)."""
    try:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM pg_stat_activity "
                                     "WHERE backend_type = 'client backend'")
            row = await cur.fetchone()
        return None if row is None else int(row[0])
    except Exception:
        return None
