"""The habits service on real servers for integration tests: the gateway, the habits service
and the profile renderer (for `prompt.context`), with a scripted model over real HTTP and an
embedder that answers reference vectors for the texts a test fixes and the real multilingual
encoder for every other text.

A test uses its own tenant (and users) and a marker word in its material, by which the
scripted model picks that test's answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx

from habitus.crypto.columns import COLUMNS
from habitus.llm import LlmSettings
from habitus.service.migrations import migrate
from services.gateway.main import service as gateway
from services.habits.embedding import (
    NOBODY,
    Embedder,
    FixedVectors,
    Owner,
    SentenceEncoder,
    Vector,
)
from services.habits.identity import normalise
from services.habits.main import build as habits
from services.habits.settings import HabitsSettings
from services.profile_renderer.main import build as profile_renderer
from tests.conftest import ServerUrls
from tests.support.habits_model import HabitsModel
from tests.support.http import TLS
from tests.support.llm_server import ScriptedLlm
from tests.support.services import running

DAY = 86_400.0
#: one encoder for the whole run (loading it takes about a second)
ENCODER = SentenceEncoder()


class Mixed:
    """Fixed vectors for the texts in `fixed`, the encoder for the rest."""

    def __init__(self, fallback: Embedder):
        self.model_version = f"mixed+{fallback.model_version}"
        self._fixed: dict[str, Sequence[float]] = {}
        self._fallback = fallback

    def fix(self, vectors: Mapping[str, Sequence[float]]) -> None:
        self._fixed.update({normalise(k): v for k, v in vectors.items()})

    async def embed(self, texts: Sequence[str], *, keep: bool = True,
                    owner: Owner = NOBODY) -> list[Vector]:
        out: list[Vector | None] = [None] * len(texts)
        rest = [(i, t) for i, t in enumerate(texts) if normalise(t) not in self._fixed]
        for i, t in enumerate(texts):
            if normalise(t) in self._fixed:
                out[i] = (await FixedVectors({t: self._fixed[normalise(t)]}).embed([t]))[0]
        if rest:
            vectors = await self._fallback.embed([t for _, t in rest], keep=keep, owner=owner)
            for (i, _), v in zip(rest, vectors, strict=True):
                out[i] = v
        return [v for v in out if v is not None]

    async def warm(self) -> None:
        await self._fallback.warm()

    def forget(self, texts: Sequence[str]) -> None:
        self._fallback.forget(texts)

    def forget_owner(self, owner: Owner) -> None:
        self._fallback.forget_owner(owner)


class Stack:
    def __init__(self, base: str, llm: ScriptedLlm, model: HabitsModel, embedder: Mixed):
        self.base, self.llm, self.model, self.embedder = base, llm, model, embedder


@asynccontextmanager
async def habits_stack(servers: ServerUrls, embedder: Embedder | None = None,
                       **settings: Any) -> AsyncIterator[Stack]:
    migrate(servers.database)
    model = HabitsModel()
    mixed = Mixed(embedder or ENCODER)
    async with ScriptedLlm(responder=model) as llm:
        config = HabitsSettings(
            schedule_seconds=settings.pop("schedule_seconds", 3600.0),
            llm=LlmSettings(base_url=llm.url, model="scripted-model", timeout_seconds=2.0,
                            max_retries=0, backoff_seconds=0.01, backoff_max_seconds=0.1,
                            daily_calls_per_tenant=0, daily_tokens_per_tenant=0),
            **settings)
        s = servers.settings()
        async with running(habits(config, embedder=mixed), s), \
                running(profile_renderer(), s), running(gateway, s) as host:
            yield Stack(f"http://127.0.0.1:{host.bound_port}", llm, model, mixed)


class Client:
    def __init__(self, base: str, key: str, tenant: str):
        self.base, self.key, self.tenant = base, key, tenant
        self.n = 0

    async def post(self, path: str, body: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=60, verify=TLS) as client:
            return await client.post(path, json=body,
                                      headers={"Authorization": f"Bearer {self.key}"})

    async def call(self, method: str, **params: Any) -> httpx.Response:
        return await self.post(f"/v1/rpc/{method}", params)

    async def rpc(self, method: str, **params: Any) -> Any:
        response = await self.call(method, **params)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    async def refused(self, method: str, **params: Any) -> tuple[int, str]:
        response = await self.call(method, **params)
        assert response.status_code >= 400, response.text
        return response.status_code, response.json()["error"]["message"]

    def turn(self, user: str, said: str, answered: str = "Done.", *, days_ago: float = 0.0,
             outcome: str | None = None) -> dict[str, Any]:
        self.n += 1
        at = time.time() - days_ago * DAY - 600 + self.n
        payload: dict[str, Any] = {
            "session_id": "s1", "turn_id": f"t{self.n}", "channel": "chat",
            "user_message": said, "assistant_message": answered, "user_at": at,
            "assistant_at": at + 2}
        if outcome is not None:
            payload["outcome"] = outcome
        return {"type": "TurnRecorded", "user_id": user, "payload": payload}

    async def send(self, *items: dict[str, Any]) -> None:
        response = await self.post("/v1/events", list(items))
        assert response.status_code in (200, 202), response.text
        assert all(r["status"] == "accepted" for r in response.json()["results"]), response.text

    async def declare(self, user: str, when: str, do: str, polarity: int = 1) -> Any:
        return await self.rpc("habits.declare", user_id=user, when=when, do=do,
                              polarity=polarity)

    async def habits(self, user: str) -> list[dict[str, Any]]:
        return list((await self.rpc("habits.list", user_id=user))["habits"])

    async def habit(self, user: str, habit_id: str) -> dict[str, Any]:
        return dict((await self.rpc("habits.get", user_id=user, habit_id=habit_id))["habit"])

    async def review(self, user: str, habit: dict[str, Any], action: str, **extra: Any) -> Any:
        return await self.rpc("habits.apply_review", user_id=user, habit_id=habit["habit_id"],
                              checksum=habit["checksum"], action=action, **extra)


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def observed(pool: Any, tenant: str, user: str, n: int) -> list[tuple[int, str]]:
    """Wait until `n` observations of the user are captured; (seq, text) in order, the text
    opened (the column holds it sealed with the user's key)."""
    async def enough() -> list[tuple[int, str]] | None:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT seq, text FROM habits.observations WHERE tenant_id = %s AND "
                "user_id = %s ORDER BY seq", (tenant, user))
            rows = [(int(r[0]), COLUMNS.open(tenant, user, r[1])) for r in await cur.fetchall()]
        return rows if len(rows) >= n else None
    return list(await until(enough))
