"""The asyncio client: `AsyncClient`, with the same methods as `habitus.client.Client`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar

import httpx
from tenacity import AsyncRetrying

from habitus.client import _calls, _http
from habitus.client._calls import Call
from habitus.client._http import RetryEvent, RetryPolicy
from habitus.client.items import IngestResult, Item, RunOutcome, trace, wire_item
from habitus.client.items import feedback as feedback_item
from habitus.contract.habits import AnalyzeResult, Changed, HabitDetail, HabitList, Review
from habitus.contract.learning import DroppedFacet, Explanation, Facet, FacetList
from habitus.contract.memory import Rule, RuleList
from habitus.contract.profile import PromptContext
from habitus.contract.traces import ModelChoice

T = TypeVar("T")
Priority = Literal["critical", "high", "normal"]


class AsyncClient:
    """A Habitus gateway, over HTTP, for asyncio: ingest events, read what was learned, run
    commands.

    `timeout` is per request in seconds (stretched for the methods the gateway lets run
    longer); `retries` bounds the retries of an outage (429, 503, a failed connection), each
    waiting about `backoff * 2**n` seconds and at least the gateway's Retry-After, at most
    `max_backoff`. `on_retry` is called before each wait (for logging or metrics).
    `transport` replaces httpx's (a proxy, a test double). Use it as an async context manager,
    or await `close()`, to release its connections.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float | httpx.Timeout = 30.0,
                 retries: int = 3, backoff: float = 0.5, max_backoff: float = 30.0,
                 on_retry: Callable[[RetryEvent], None] | None = None,
                 headers: Mapping[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self._policy = RetryPolicy(retries, backoff, max_backoff)
        self._timeout = _http.timeout_of(timeout)
        self._on_retry = on_retry
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=self._timeout,
                                  headers=_http.headers(api_key, headers), transport=transport)

    @classmethod
    def from_env(cls, **options: Any) -> AsyncClient:
        """The gateway at `HABITUS_URL` (default http://127.0.0.1:8080, where `habitus up`
        listens) with the key in `HABITUS_API_KEY`; `options` as for the constructor."""
        key = os.environ.get("HABITUS_API_KEY")
        if not key:
            raise ValueError("HABITUS_API_KEY is not set (`habitus keys create --tenant T` "
                             "makes a key)")
        return cls(os.environ.get("HABITUS_URL") or _http.DEFAULT_URL, key, **options)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # ------------------------------------------------------------------------ transport

    async def _post(self, path: str, body: Any, *, idempotent: bool, factor: float = 1.0
                    ) -> Any:
        timeout = _http.scaled(self._timeout, factor)

        async def once() -> Any:
            try:
                response = await self._http.post(path, json=body, timeout=timeout)
            except httpx.TransportError as exc:
                raise _http.connection_failed(exc) from exc
            return _http.body_of(response)

        retrying = AsyncRetrying(**self._policy.tenacity_options(idempotent, self._on_retry))
        return await retrying(once)

    async def _run(self, call: Call[T]) -> T:
        body = await self._post(f"/v1/rpc/{call.method}", call.params, idempotent=call.idempotent,
                          factor=call.timeout_factor)
        return call.parse(_http.rpc_result(body, call.method))

    # --------------------------------------------------------------------------- ingest

    async def ingest(self, *items: Item | Mapping[str, Any], partial: bool = False) -> IngestResult:
        """Send items (built with `turn`, `email`, ... or plain dicts) in one batch.

        By default the batch is all or nothing: one rejected item raises `InvalidEvent`
        (its `result` says what was wrong with which item) and nothing is stored. With
        `partial=True` the valid items are stored and the rejected ones reported in the
        result. A retried batch is stored once (event ids deduplicate)."""
        if not items:
            raise ValueError("ingest needs at least one item")
        body = [wire_item(i) for i in items]
        path = "/v1/events?partial=true" if partial else "/v1/events"
        return IngestResult.from_body(await self._post(path, body, idempotent=True))

    async def report_trace(self, user: str, query: str, result: str, *, agent: str, model: str,
                     engine: str = "custom", trace_id: str | None = None,
                     steps: Sequence[Mapping[str, Any]] = (),
                     outcome: RunOutcome | None = None, feedback: float | None = None,
                     started_at: float | None = None, ended_at: float | None = None,
                     total_tokens: int = 0, latency_seconds: float | None = None,
                     cost_usd: float | None = None) -> IngestResult:
        """Report one finished run (see `habitus.client.trace` for the defaults)."""
        return await self.ingest(trace(
            user, query, result, agent=agent, model=model, engine=engine, trace_id=trace_id,
            steps=steps, outcome=outcome, feedback=feedback, started_at=started_at,
            ended_at=ended_at, total_tokens=total_tokens, latency_seconds=latency_seconds,
            cost_usd=cost_usd))

    async def feedback(self, user: str, score: float, *, trace_id: str | None = None,
                 turn_id: str | None = None, outcome: RunOutcome | None = None
                 ) -> IngestResult:
        """Score a trace or a turn from 0 (bad) to 1 (good)."""
        return await self.ingest(feedback_item(user, score, trace_id=trace_id, turn_id=turn_id,
                                         outcome=outcome))

    # ------------------------------------------------------------------- prompt, facets

    async def context(self, user: str, *, tools: Sequence[str] | None = None,
                request: str | None = None, budget_chars: int | None = None,
                history: Sequence[str] = ()) -> PromptContext:
        """What the next prompt should carry for `user`: `text` for the system prompt, its
        `sections`, and `steered_by` (the habits applied to `request`, if given). `tools`
        limits the tool rules to those the turn may call; `history` is earlier turns that
        may resolve a reference in `request`."""
        return await self._run(_calls.context(user, tools, request, budget_chars, history))

    async def facets(self, user: str, *, class_: str | None = None, as_of: float | None = None
               ) -> FacetList:
        """The user's active and provisional facets, strongest first (`.facets`)."""
        return await self._run(_calls.facets(user, class_, as_of))

    async def facet(self, user: str, class_: str, key: str) -> Facet:
        """One facet, whatever its state (`NotFound` when none was ever learned)."""
        return await self._run(_calls.facet(user, class_, key))

    async def explain(self, user: str, class_: str, key: str, *, as_of: float | None = None
                ) -> Explanation:
        """Why a facet is in the state it is, score by score from its evidence."""
        return await self._run(_calls.explain(user, class_, key, as_of))

    async def set_facet(self, user: str, class_: str, key: str, value: str) -> Facet:
        """Set a facet's value and pin it there."""
        return await self._run(_calls.set_facet(user, class_, key, value))

    async def pin(self, user: str, class_: str, key: str) -> Facet:
        """Pin a facet to its current value (`Conflict` when it has none)."""
        return await self._run(_calls.pin(user, class_, key))

    async def unpin(self, user: str, class_: str, key: str) -> Facet | DroppedFacet:
        """Return a pinned or forgotten facet to automatic; a `DroppedFacet` when no
        evidence is left for it (`Conflict` when it is already automatic)."""
        return await self._run(_calls.unpin(user, class_, key))

    async def forget(self, user: str, class_: str, key: str) -> Facet:
        """Keep a facet out of prompts, whatever the evidence says later."""
        return await self._run(_calls.forget(user, class_, key))

    # ------------------------------------------------------------------------ tool rules

    async def rules(self, user: str | None, tool: str | None = None, *,
              priority: Priority | None = None) -> RuleList:
        """The user's tool rules and the tenant's (`user=None`: the tenant's only), critical
        first, newest first (`.rules`)."""
        return await self._run(_calls.rules(user, tool, priority))

    async def put_rule(self, user: str | None, tool: str, rule: str, *,
                 priority: Priority = "normal", tags: Sequence[str] = (),
                 rule_id: str | None = None, source: str | None = None) -> Rule:
        """Create or replace a rule for `tool` (`*`: every tool); `user=None` makes it the
        tenant's. The same text put twice updates one rule (its id derives from it)."""
        return await self._run(_calls.put_rule(user, tool, rule, priority, tags, rule_id, source))

    async def delete_rule(self, user: str | None, tool: str, rule_id: str) -> bool:
        """Delete a rule; False when there was no such rule."""
        return await self._run(_calls.delete_rule(user, tool, rule_id))

    # ---------------------------------------------------------------------------- router

    async def route(self, query: str, models: Sequence[str | Mapping[str, Any]], *,
              user: str | None = None, urgency: float | None = None,
              policy: str | None = None, default_model: str | None = None,
              fallback_model: str | None = None, record: bool = False,
              decision_id: str | None = None) -> ModelChoice:
        """Choose the model for `query` among `models` (names, or `{"name",
        "parameter_count_b"}`), by `policy` or the tenant's default. `record=True` (with a
        `user`) publishes the decision, so its trace and reward are joined to it."""
        return await self._run(_calls.route(query, models, user, urgency, policy, default_model,
                                      fallback_model, record, decision_id))

    # ---------------------------------------------------------------------------- habits

    async def habits(self, user: str, status: str | None = None) -> HabitList:
        """The user's habits, oldest first (`.habits`), optionally of one status."""
        return await self._run(_calls.habits(user, status))

    async def habit(self, user: str, habit_id: str) -> HabitDetail:
        """One habit with its audit trail."""
        return await self._run(_calls.habit(user, habit_id))

    async def review(self, user: str) -> Review:
        """What waits for a person: numbered When / Do items, possible duplicates grouped."""
        return await self._run(_calls.review(user))

    async def approve(self, user: str, habit_id: str, checksum: str, *, reason: str | None = None
                ) -> Changed:
        """Approve a habit as last read (`checksum`); `Conflict` when it changed since.
        `outcome` says whether it is active or waits (law, duplicate, evidence)."""
        return await self._run(_calls.apply_review(user, habit_id, checksum, "approve", None,
                                             reason))

    async def reject(self, user: str, habit_id: str, checksum: str, *, reason: str | None = None
               ) -> Changed:
        """Reject a habit as last read (`checksum`); `Conflict` when it changed since."""
        return await self._run(_calls.apply_review(user, habit_id, checksum, "reject", None,
                                                   reason))

    async def apply_review(self, user: str, habit_id: str, checksum: str,
                     action: Literal["approve", "reject", "merge", "supersede", "archive",
                                     "keep_separate"], *,
                     other_id: str | None = None, reason: str | None = None) -> Changed:
        """Any review action; merge, supersede and keep_separate name the `other_id`."""
        return await self._run(_calls.apply_review(user, habit_id, checksum, action, other_id,
                                             reason))

    async def declare(self, user: str, when: str, do: str, *, polarity: Literal[-1, 1] = 1
                ) -> Changed:
        """Declare a habit: "When <when>, <do>" (`polarity=-1`: avoid doing it). It is
        approved as declared; the law and duplicate checks still apply."""
        return await self._run(_calls.declare(user, when, do, polarity))

    async def analyze(self, user: str) -> AnalyzeResult:
        """Turn the user's unread observations into habit suggestions (an LLM call)."""
        return await self._run(_calls.analyze(user))

    # --------------------------------------------------------------------------- generic

    async def call(self, method: str, params: Mapping[str, Any] | None = None, /,
             **more: Any) -> Any:
        """Any RPC method by name, for those without a helper: its raw JSON result.

        `params` and keywords are merged (a dict spells names Python cannot: `class`)."""
        return await self._run(_calls.raw(method, {**(params or {}), **more}))
