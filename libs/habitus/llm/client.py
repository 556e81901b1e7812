"""One JSON-answering LLM call, bounded and accounted for.

Every service that asks a model for structured output goes through `LlmClient.complete_json`, so
retries, budgets, metrics and the quirks of OpenAI-compatible servers are handled once:

* The official `openai` SDK speaks the protocol, with its own retries off: our loop retries
  429 / 5xx / timeouts / lost connections a bounded number of times with jittered exponential
  backoff, honours `Retry-After`, and counts every attempt by outcome.
* JSON-schema structured output where the server supports it. Many local servers do not; in
  `auto` mode the first refusal switches the client to fenced output (a ```json block asked for
  in the system prompt) for its lifetime, and the same call is re-sent at once.
* A tenant's daily budget is checked before the call and charged after it, so a refused call
  costs nothing and a call whose output is unusable is still paid for.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    # The SDK is imported when a model is configured (`LlmClient.__init__`): it is a third of
    # a second of every service process's start, and most deployments' services never call it.
    from openai import APIStatusError, AsyncOpenAI
    from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import ResponseFormat

from habitus.llm import metrics
from habitus.llm.budget import Budget
from habitus.llm.errors import BudgetExhausted, LlmError, Reason
from habitus.llm.settings import LlmSettings

__all__ = ["BudgetExhausted", "Completion", "LlmClient", "LlmError", "Sampling",
           "TextCompletion"]

log = logging.getLogger(__name__)

Mode = Literal["json_schema", "fenced"]
#: a call's mode: one of the JSON modes, or free text (`complete_text`)
CallMode = Literal["json_schema", "fenced", "text"]

_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)

FENCED_INSTRUCTION = (
    "Answer with exactly one JSON value in a single ```json fenced block and nothing else. "
    "It must match this JSON schema:\n{schema}"
)


@dataclass(frozen=True)
class Completion:
    data: Any
    """the parsed JSON value"""
    content: str
    """the raw text the model returned"""
    tokens_in: int
    tokens_out: int
    model: str
    mode: Mode
    attempts: int
    """HTTP requests the call took (retries and a structured-output fallback included)"""
    latency_seconds: float


@dataclass(frozen=True)
class TextCompletion:
    """A free-text answer (`LlmClient.complete_text`) and what it took."""

    content: str
    tokens_in: int
    tokens_out: int
    model: str
    attempts: int
    latency_seconds: float


@dataclass(frozen=True)
class Sampling:
    """Per-call overrides of the model and its sampling (None: the settings' own)."""

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None


_DEFAULT_SAMPLING = Sampling()


def parse_json_content(content: str) -> Any:
    """The JSON value in a model's answer: the whole text if it is JSON, else the first fenced
    block. Models asked for JSON often wrap it in a fence or a sentence; both are accepted.
    Raises ValueError when neither parses."""
    text = content.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    match = _FENCE_RE.search(text)
    if match is None:
        raise ValueError("the answer is neither JSON nor contains a fenced block")
    return json.loads(match.group(1).strip())


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date), None when
    absent or unreadable. A date in the past means "now" (0)."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def backoff_wait(retry: int, *, base: float, cap: float, retry_after: float | None = None,
                 rand: Callable[[], float] = random.random) -> float | None:
    """The wait before retry number `retry` (0 for the first), or None to give up.

    Full jitter (uniform in [0, min(cap, base * 2**retry)]) spreads the retries of many workers
    hit by the same outage. A server's `Retry-After` is a floor; one asking for more than `cap`
    is not waited for (a worker blocked for minutes holds a slot others could use), so the
    caller gives up and reschedules."""
    if retry_after is not None and retry_after > cap:
        return None
    jittered = rand() * min(cap, base * 2.0 ** retry)
    return max(jittered, retry_after or 0.0)


def estimate_tokens(text: str) -> int:
    """About four characters a token; used when a server reports no `usage`."""
    return math.ceil(len(text) / 4)


def _content_of(response: ChatCompletion) -> str:
    """The first choice's text. The SDK does not validate responses, so a server that leaves
    fields out yields a model without them: read defensively, and let an empty answer fail as
    bad_json."""
    choices = getattr(response, "choices", None)
    if not choices:
        return ""
    content = getattr(getattr(choices[0], "message", None), "content", None)
    return content if isinstance(content, str) else ""


class _Retryable(Exception):
    def __init__(self, reason: Reason, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.retry_after = retry_after


class LlmClient:
    """A client of one OpenAI-compatible endpoint and model, for one service.

    Safe for concurrent calls from one event loop. A disabled client (no base URL or model)
    can be built and closed; every call raises `LlmError("disabled")`."""

    def __init__(self, settings: LlmSettings, *, service: str, budget: Budget | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._settings = settings
        self._service = service
        self._budget = budget
        self._sleep = sleep
        self._auto = settings.structured_output == "auto"
        self._mode: Mode = "fenced" if settings.structured_output == "fenced" else "json_schema"
        # Whether a structured call has succeeded: once one has, a bare 400 is about the
        # request, not about the server lacking json_schema support.
        self._structured_ok = False
        self._openai: AsyncOpenAI | None = None
        if settings.enabled:
            from openai import AsyncOpenAI

            self._openai = AsyncOpenAI(base_url=settings.base_url, api_key=settings.api_key or
                                       "unused", timeout=settings.timeout_seconds, max_retries=0)

    @property
    def mode(self) -> Mode:
        """The structured-output mode the next call uses."""
        return self._mode

    async def complete_json(self, *, tenant_id: str, system: str, user: str,
                            schema: dict[str, Any], schema_name: str) -> Completion:
        """Ask the model for a JSON value matching `schema`; raise `LlmError` on any failure
        (`BudgetExhausted` before any request when the tenant's budget is spent)."""
        calls = metrics.CALLS
        if self._openai is None:
            calls.labels(self._service, "disabled").inc()
            raise LlmError("disabled", self._settings.disabled_reason() or "")
        if self._budget is not None:
            try:
                await self._budget.check(tenant_id)
            except BudgetExhausted:
                calls.labels(self._service, "budget").inc()
                raise
        started = time.monotonic()
        try:
            completion = await self._call(self._openai, tenant_id, system, user, schema,
                                          schema_name, started)
        except LlmError as exc:
            calls.labels(self._service, exc.reason).inc()
            raise
        finally:
            metrics.CALL_SECONDS.labels(self._service).observe(time.monotonic() - started)
        calls.labels(self._service, "ok").inc()
        assert isinstance(completion, Completion)
        return completion

    async def complete_text(self, *, tenant_id: str, system: str, user: str,
                            sampling: Sampling = _DEFAULT_SAMPLING) -> TextCompletion:
        """Ask for a free-text answer, with the model and sampling `sampling` overrides (an
        optimisation trial's); retried, budgeted and counted as `complete_json` is. The
        caller reads the text itself (the optimizer parses proposals its own way, a replay
        scores answers)."""
        calls = metrics.CALLS
        if self._openai is None:
            calls.labels(self._service, "disabled").inc()
            raise LlmError("disabled", self._settings.disabled_reason() or "")
        if self._budget is not None:
            try:
                await self._budget.check(tenant_id)
            except BudgetExhausted:
                calls.labels(self._service, "budget").inc()
                raise
        started = time.monotonic()
        try:
            completion = await self._call(self._openai, tenant_id, system, user, {}, "",
                                          started, sampling)
        except LlmError as exc:
            calls.labels(self._service, exc.reason).inc()
            raise
        finally:
            metrics.CALL_SECONDS.labels(self._service).observe(time.monotonic() - started)
        calls.labels(self._service, "ok").inc()
        assert isinstance(completion, TextCompletion)
        return completion

    async def aclose(self) -> None:
        if self._openai is not None:
            await self._openai.close()

    async def _call(self, client: AsyncOpenAI, tenant_id: str, system: str, user: str,
                    schema: dict[str, Any], schema_name: str, started: float,
                    sampling: Sampling | None = None) -> Completion | TextCompletion:
        """`sampling` given: a free-text call with those overrides; else a JSON call."""
        import openai

        attempts = retries = 0
        while True:
            mode: CallMode = self._mode if sampling is None else "text"
            attempts += 1
            try:
                response = await self._request(client, mode, system, user, schema, schema_name,
                                               sampling or _DEFAULT_SAMPLING)
            except _Retryable as exc:
                metrics.ATTEMPTS.labels(self._service, exc.reason).inc()
                if retries >= self._settings.max_retries:
                    raise LlmError(exc.reason, str(exc), retry_after=exc.retry_after) from exc
                wait = backoff_wait(retries, base=self._settings.backoff_seconds,
                                    cap=self._settings.backoff_max_seconds,
                                    retry_after=exc.retry_after)
                if wait is None:
                    # The server wants a longer pause than a worker should block for.
                    raise LlmError("rate_limited", str(exc),
                                   retry_after=exc.retry_after) from exc
                retries += 1
                await self._sleep(wait)
                continue
            except openai.APIStatusError as exc:
                metrics.ATTEMPTS.labels(self._service, "bad_request").inc()
                if mode == "json_schema" and self._auto and self._refuses_schema(exc):
                    self._fall_back(exc)
                    continue
                raise LlmError("bad_request", f"{exc.status_code} {exc.message}") from exc
            metrics.ATTEMPTS.labels(self._service, "ok").inc()
            if mode == "text":
                return await self._text(response, tenant_id, system, user, attempts, started)
            return await self._completed(response, tenant_id, system, user, mode, attempts,
                                         started)

    async def _request(self, client: AsyncOpenAI, mode: CallMode, system: str, user: str,
                       schema: dict[str, Any], schema_name: str,
                       sampling: Sampling = _DEFAULT_SAMPLING) -> ChatCompletion:
        """One HTTP attempt; transient failures come out as `_Retryable`, other 4xx as the
        SDK's `APIStatusError`."""
        import openai
        from openai.types.chat import ChatCompletion

        settings = self._settings
        assert settings.model is not None
        if mode == "fenced":
            system = f"{system}\n\n" + FENCED_INSTRUCTION.format(
                schema=json.dumps(schema, separators=(",", ":")))
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        response_format: ResponseFormat | None = None
        if mode == "json_schema":
            response_format = {"type": "json_schema", "json_schema": {
                "name": schema_name, "schema": schema, "strict": False}}
        model = sampling.model or settings.model
        max_tokens = sampling.max_tokens or settings.max_output_tokens
        temperature = (sampling.temperature if sampling.temperature is not None
                       else settings.temperature)
        try:
            if response_format is None and sampling.top_p is not None:
                response = await client.chat.completions.create(
                    model=model, messages=messages, max_tokens=max_tokens,
                    temperature=temperature, top_p=sampling.top_p)
            elif response_format is None:
                response = await client.chat.completions.create(
                    model=model, messages=messages, max_tokens=max_tokens,
                    temperature=temperature)
            else:
                response = await client.chat.completions.create(
                    model=model, messages=messages, max_tokens=max_tokens,
                    temperature=temperature, response_format=response_format)
        except openai.APITimeoutError as exc:
            raise _Retryable("timeout", str(exc), None) from exc
        except openai.APIConnectionError as exc:
            raise _Retryable("connection", str(exc), None) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status == 429 or status >= 500 or status == 408:
                reason: Reason = ("rate_limited" if status == 429 else
                                  "timeout" if status == 408 else "server_error")
                after = parse_retry_after(exc.response.headers.get("retry-after"),
                                          now=time.time())
                raise _Retryable(reason, f"{status} {exc.message}", after) from exc
            raise
        except (openai.APIError, ValueError) as exc:
            # A 200 whose body is not JSON (a proxy's error page): the server side is broken,
            # which is as likely to pass as a 5xx.
            raise _Retryable("server_error", f"unreadable response: {exc}", None) from exc
        if not isinstance(response, ChatCompletion):  # the SDK hands back a non-JSON body as-is
            raise _Retryable("server_error", "the response is not a chat completion", None)
        return response

    def _refuses_schema(self, exc: APIStatusError) -> bool:
        """Whether a 4xx says the server cannot do json_schema output."""
        if exc.status_code not in (400, 422):
            return False
        said = f"{exc.message} {json.dumps(exc.body, default=str)}".lower()
        if exc.status_code == 400 and ("response_format" in said or "json_schema" in said):
            return True
        return not self._structured_ok

    def _fall_back(self, exc: APIStatusError) -> None:
        if self._mode == "fenced":  # a concurrent call switched first
            return
        self._mode = "fenced"
        metrics.STRUCTURED_FALLBACKS.labels(self._service).inc()
        log.warning("llm server refused json_schema output; using fenced JSON from now on",
                    extra={"service": self._service, "model": self._settings.model,
                           "status": exc.status_code, "error": exc.message[:500]})

    async def _charge(self, response: ChatCompletion, tenant_id: str, system: str, user: str
                      ) -> tuple[str, int, int]:
        """The answer's text and its tokens (in, out), charged to the tenant's budget."""
        content = _content_of(response)
        usage = getattr(response, "usage", None)
        tokens_in = usage.prompt_tokens if usage else estimate_tokens(system + user)
        tokens_out = usage.completion_tokens if usage else estimate_tokens(content)
        metrics.TOKENS.labels(self._service, "in").inc(tokens_in)
        metrics.TOKENS.labels(self._service, "out").inc(tokens_out)
        if self._budget is not None:
            try:
                await self._budget.record(tenant_id, tokens_in, tokens_out)
            except Exception:
                # The answer is here and paid for; losing it to a usage-store outage would
                # only make the caller ask (and pay) again. The budget under-counts instead.
                log.exception("llm usage not recorded", extra={
                    "service": self._service, "tenant_id": tenant_id})
        return content, tokens_in, tokens_out

    async def _text(self, response: ChatCompletion, tenant_id: str, system: str, user: str,
                    attempts: int, started: float) -> TextCompletion:
        content, tokens_in, tokens_out = await self._charge(response, tenant_id, system, user)
        return TextCompletion(content=content, tokens_in=tokens_in, tokens_out=tokens_out,
                              model=response.model or self._settings.model or "",
                              attempts=attempts, latency_seconds=time.monotonic() - started)

    async def _completed(self, response: ChatCompletion, tenant_id: str, system: str, user: str,
                         mode: Mode, attempts: int, started: float) -> Completion:
        """Charge the tokens, then parse: an unusable answer was paid for all the same."""
        content, tokens_in, tokens_out = await self._charge(response, tenant_id, system, user)
        if mode == "json_schema":
            self._structured_ok = True
        try:
            data = parse_json_content(content)
        except ValueError as exc:
            raise LlmError("bad_json", str(exc), content=content, tokens_in=tokens_in,
                           tokens_out=tokens_out) from exc
        return Completion(data=data, content=content, tokens_in=tokens_in,
                          tokens_out=tokens_out, model=response.model or self._settings.model or "",
                          mode=mode, attempts=attempts,
                          latency_seconds=time.monotonic() - started)
