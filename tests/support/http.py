"""One TLS context for every HTTP client the tests make.

An httpx client builds a TLS context when it is made (the CA bundle loaded: about 20 ms of
CPU), even to talk plain HTTP to a local gateway; the tests make thousands of clients, one per
request in many helpers, and that once added up to more than a minute of the suite's CPU. Passing
this context (``verify=TLS``) costs nothing, and verifies exactly as the default would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import httpx

TLS = httpx.create_ssl_context()


async def post_all(client: httpx.AsyncClient, url: str, bodies: Sequence[bytes],
                   headers: Mapping[str, str], concurrency: int = 4) -> int:
    """POST each of `bodies` (ingest batches) to `url`, at most `concurrency` at a time, as
    several agents would; each must be answered 200. The items accepted, in all."""
    sem = asyncio.Semaphore(concurrency)

    async def send(body: bytes) -> int:
        async with sem:
            r = await client.post(url, content=body, headers=headers)
            assert r.status_code == 200, r.text[:500]
            return int(r.json()["accepted"])

    return sum(await asyncio.gather(*(send(b) for b in bodies)))
