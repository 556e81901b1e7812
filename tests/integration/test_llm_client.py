"""The LLM client against the scripted OpenAI-compatible server, over real HTTP.

Structured output and its fenced fallback, unusable answers (kept, with what they cost), the
bounded retries (5xx, timeouts, 429 with Retry-After, lost connections), budgets that refuse
before any request, and the Postgres usage store the services share.
"""

from __future__ import annotations

import datetime
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

from habitus.llm import (
    Budget,
    BudgetExhausted,
    LlmClient,
    LlmError,
    LlmSettings,
    MemoryUsage,
    PostgresUsage,
    usage_table_sql,
)
from habitus.llm.budget import utc_day
from habitus.telemetry.metrics import registry
from tests.support.factories import unique
from tests.support.llm_server import Answer, ScriptedLlm

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "facets": {"type": "array"}},
    "required": ["summary", "facets"],
}
GOOD = {"summary": "likes tea", "facets": []}


class Sleeps:
    """A stand-in for asyncio.sleep that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def sample(name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[ScriptedLlm]:
    async with ScriptedLlm() as server:
        yield server


MakeClient = Callable[..., LlmClient]


@pytest_asyncio.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """Clients with a unique service label each (metrics are process-wide) and fake sleeps."""
    made: list[LlmClient] = []

    def make(url: str, *, budget: Budget | None = None, sleep: Sleeps | None = None,
             service: str | None = None, **overrides: Any) -> LlmClient:
        values: dict[str, Any] = {"base_url": url, "model": "scripted-model", "api_key": "k",
                                  "timeout_seconds": 5.0, "backoff_seconds": 0.5,
                                  "backoff_max_seconds": 30.0}
        values.update(overrides)
        client = LlmClient(LlmSettings(**values), service=service or unique("llm"),
                           budget=budget, sleep=sleep or Sleeps())
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


async def ask(client: LlmClient, tenant_id: str = "t1") -> Any:
    return await client.complete_json(tenant_id=tenant_id, system="You extract facets.",
                                      user="I like tea.", schema=SCHEMA,
                                      schema_name="extraction")


async def test_well_formed_json_with_the_schema_sent(llm: ScriptedLlm,
                                                     make_client: MakeClient) -> None:
    service = unique("llm")
    client = make_client(llm.url, service=service, max_output_tokens=300, temperature=0.2)
    llm.script(Answer(json=GOOD, usage=(12, 3)))
    done = await ask(client)
    assert done.data == GOOD
    assert (done.tokens_in, done.tokens_out) == (12, 3)
    assert (done.mode, done.attempts, done.model) == ("json_schema", 1, "scripted-model")
    assert done.latency_seconds >= 0
    [sent] = llm.requests
    assert sent["model"] == "scripted-model"
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "extraction", "schema": SCHEMA, "strict": False}}
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert sent["messages"][0]["content"] == "You extract facets."
    assert sent["messages"][1]["content"] == "I like tea."
    assert (sent["max_tokens"], sent["temperature"]) == (300, 0.2)
    assert sample("habitus_llm_calls_total", service=service, outcome="ok") == 1
    assert sample("habitus_llm_attempts_total", service=service, outcome="ok") == 1
    assert sample("habitus_llm_tokens_total", service=service, direction="in") == 12
    assert sample("habitus_llm_tokens_total", service=service, direction="out") == 3
    assert sample("habitus_llm_call_duration_seconds_count", service=service) == 1


async def test_a_server_without_json_schema_switches_the_client_to_fenced_once(
        make_client: MakeClient, caplog: pytest.LogCaptureFixture) -> None:
    service = unique("llm")
    async with ScriptedLlm(supports_json_schema=False) as llm:
        client = make_client(llm.url, service=service, max_retries=0)
        fenced = '```json\n{"summary": "fenced", "facets": []}\n```'
        llm.script(Answer(content=fenced), Answer(content=fenced))
        with caplog.at_level(logging.WARNING, logger="habitus.llm.client"):
            first = await ask(client)
            second = await ask(client)
    assert first.data == second.data == {"summary": "fenced", "facets": []}
    # the refused request, its fenced re-send (not a retry: max_retries is 0), then fenced only
    assert (first.mode, first.attempts) == ("fenced", 2)
    assert (second.mode, second.attempts) == ("fenced", 1)
    assert ["response_format" in r for r in llm.requests] == [True, False, False]
    system = llm.requests[1]["messages"][0]["content"]
    assert system.startswith("You extract facets.")
    assert "```json" in system and '"required":["summary","facets"]' in system
    assert sample("habitus_llm_structured_fallbacks_total", service=service) == 1
    assert sample("habitus_llm_calls_total", service=service, outcome="ok") == 2
    assert len([r for r in caplog.records if r.name == "habitus.llm.client"]) == 1


async def test_configured_fenced_mode_never_sends_a_schema_format(
        llm: ScriptedLlm, make_client: MakeClient) -> None:
    client = make_client(llm.url, structured_output="fenced")
    llm.script(Answer(content='Sure, here it is:\n```json\n{"summary": "s", "facets": []}\n```'
                              "\nAnything else?"))
    done = await ask(client)
    assert done.data == {"summary": "s", "facets": []}
    assert done.mode == "fenced"
    assert "response_format" not in llm.requests[0]


async def test_a_fenced_answer_to_a_structured_request_is_accepted(
        llm: ScriptedLlm, make_client: MakeClient) -> None:
    client = make_client(llm.url)
    llm.script(Answer(content='```json\n{"summary": "s", "facets": []}\n```'))
    done = await ask(client)
    assert (done.data, done.mode) == ({"summary": "s", "facets": []}, "json_schema")


async def test_bad_json_keeps_the_content_and_what_it_cost(llm: ScriptedLlm,
                                                           make_client: MakeClient) -> None:
    service = unique("llm")
    store = MemoryUsage()
    budget = Budget(store, daily_calls=10, daily_tokens=1000, service=service)
    client = make_client(llm.url, service=service, budget=budget)
    llm.script(Answer(content='{"summary": "cut off', usage=(40, 7)))
    with pytest.raises(LlmError) as caught:
        await ask(client, "t-bad")
    err = caught.value
    assert (err.reason, err.content) == ("bad_json", '{"summary": "cut off')
    assert (err.tokens_in, err.tokens_out) == (40, 7)
    assert len(llm.requests) == 1  # a bad answer is not retried
    assert await store.used("t-bad", utc_day(time.time())) == (1, 47)
    assert sample("habitus_llm_calls_total", service=service, outcome="bad_json") == 1


async def test_tokens_are_estimated_when_the_server_reports_no_usage(
        llm: ScriptedLlm, make_client: MakeClient) -> None:
    client = make_client(llm.url)
    content = '{"summary": "twelve chars", "facets": []}'
    llm.script(Answer(content=content, omit_usage=True))
    done = await ask(client)
    assert done.tokens_out == -(-len(content) // 4)
    assert done.tokens_in > 0


async def test_a_server_error_is_retried(llm: ScriptedLlm, make_client: MakeClient) -> None:
    service = unique("llm")
    sleeps = Sleeps()
    client = make_client(llm.url, service=service, sleep=sleeps, backoff_seconds=0.5)
    llm.script(Answer(status=500), Answer(json=GOOD))
    done = await ask(client)
    assert (done.data, done.attempts) == (GOOD, 2)
    assert len(sleeps.waits) == 1 and 0 <= sleeps.waits[0] <= 0.5
    assert sample("habitus_llm_attempts_total", service=service, outcome="server_error") == 1
    assert sample("habitus_llm_attempts_total", service=service, outcome="ok") == 1
    assert sample("habitus_llm_calls_total", service=service, outcome="ok") == 1


@pytest.mark.parametrize("broken", [
    Answer(body="<html>bad gateway</html>", headers={"Content-Type": "text/html"}),
    Answer(body="<html>bad gateway</html>"),  # claims to be JSON
])
async def test_a_200_that_is_not_a_completion_is_a_server_error(
        llm: ScriptedLlm, make_client: MakeClient, broken: Answer) -> None:
    sleeps = Sleeps()
    client = make_client(llm.url, sleep=sleeps, max_retries=1)
    llm.script(broken, broken)
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert caught.value.reason == "server_error"
    assert len(llm.requests) == 2 and len(sleeps.waits) == 1


async def test_a_completion_without_choices_is_an_unusable_answer(
        llm: ScriptedLlm, make_client: MakeClient) -> None:
    client = make_client(llm.url)
    llm.script(Answer(body={"object": "chat.completion"}))
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert (caught.value.reason, caught.value.content) == ("bad_json", "")
    assert len(llm.requests) == 1


async def test_timeouts_are_retried_then_given_up(llm: ScriptedLlm,
                                                  make_client: MakeClient) -> None:
    service = unique("llm")
    sleeps = Sleeps()
    client = make_client(llm.url, service=service, sleep=sleeps, timeout_seconds=0.2,
                         max_retries=1)
    llm.script(Answer(json=GOOD, delay=3.0), Answer(json=GOOD, delay=3.0))
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert caught.value.reason == "timeout"
    assert len(llm.requests) == 2 and len(sleeps.waits) == 1
    assert sample("habitus_llm_attempts_total", service=service, outcome="timeout") == 2
    assert sample("habitus_llm_calls_total", service=service, outcome="timeout") == 1


async def test_a_429_storm_honours_retry_after_then_gives_up(
        llm: ScriptedLlm, make_client: MakeClient) -> None:
    service = unique("llm")
    sleeps = Sleeps()
    client = make_client(llm.url, service=service, sleep=sleeps, max_retries=3,
                         backoff_seconds=0.1, backoff_max_seconds=30.0)
    llm.script(*[Answer(status=429, headers={"Retry-After": "2"}) for _ in range(4)])
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert (caught.value.reason, caught.value.retry_after) == ("rate_limited", 2.0)
    assert len(llm.requests) == 4
    assert len(sleeps.waits) == 3
    assert all(2.0 <= w <= 30.0 for w in sleeps.waits)
    assert sample("habitus_llm_attempts_total", service=service, outcome="rate_limited") == 4
    assert sample("habitus_llm_calls_total", service=service, outcome="rate_limited") == 1


async def test_a_retry_after_longer_than_the_cap_is_not_waited_for(
        llm: ScriptedLlm, make_client: MakeClient) -> None:
    sleeps = Sleeps()
    client = make_client(llm.url, sleep=sleeps, max_retries=3, backoff_max_seconds=30.0)
    llm.script(Answer(status=429, headers={"Retry-After": "120"}), Answer(json=GOOD))
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert (caught.value.reason, caught.value.retry_after) == ("rate_limited", 120.0)
    assert sleeps.waits == [] and llm.pending == 1


async def test_a_bad_request_after_structured_success_is_not_a_fallback(
        llm: ScriptedLlm, make_client: MakeClient) -> None:
    client = make_client(llm.url)
    llm.script(Answer(json=GOOD),
               Answer(status=400, body={"error": {"message": "context length exceeded"}}))
    await ask(client)
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert caught.value.reason == "bad_request"
    assert client.mode == "json_schema"
    assert len(llm.requests) == 2  # never retried


async def test_an_unreachable_server_fails_with_connection(make_client: MakeClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    client = make_client(f"http://127.0.0.1:{port}/v1", sleep=sleeps, max_retries=2)
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert caught.value.reason == "connection"
    assert len(sleeps.waits) == 2


async def test_a_disabled_client_refuses_every_call() -> None:
    client = LlmClient(LlmSettings(base_url=None, model=None), service="tests")
    with pytest.raises(LlmError) as caught:
        await ask(client)
    assert caught.value.reason == "disabled"
    assert "HABITUS_LLM_BASE_URL" in str(caught.value)
    await client.aclose()


@pytest.mark.parametrize(("spent", "limits", "used"), [
    ("calls", {"daily_calls": 5, "daily_tokens": 0}, {"calls": 5, "tokens_in": 0,
                                                      "tokens_out": 0}),
    ("tokens", {"daily_calls": 0, "daily_tokens": 100}, {"calls": 1, "tokens_in": 60,
                                                         "tokens_out": 40}),
])
async def test_a_spent_budget_refuses_before_any_request(
        llm: ScriptedLlm, make_client: MakeClient, caplog: pytest.LogCaptureFixture,
        spent: str, limits: dict[str, int], used: dict[str, int]) -> None:
    service = unique("llm")
    store = MemoryUsage()
    await store.add("t-spent", utc_day(time.time()), **used)
    client = make_client(llm.url, service=service,
                         budget=Budget(store, service=service, daily_calls=limits["daily_calls"],
                                       daily_tokens=limits["daily_tokens"]))
    with caplog.at_level(logging.WARNING, logger="habitus.llm.budget"):
        for _ in range(2):
            with pytest.raises(BudgetExhausted) as caught:
                await ask(client, "t-spent")
    assert caught.value.reason == "budget"
    assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 86_400
    assert llm.requests == []
    assert sample("habitus_llm_budget_exhausted_total", service=service, budget=spent) == 2
    assert sample("habitus_llm_calls_total", service=service, outcome="budget") == 2
    warnings = [r for r in caplog.records if r.name == "habitus.llm.budget"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    await ask(client, "t-other")  # another tenant still gets answers
    assert len(llm.requests) == 1


async def test_a_call_spends_the_budget_it_is_charged(llm: ScriptedLlm,
                                                      make_client: MakeClient) -> None:
    client = make_client(llm.url, budget=Budget(MemoryUsage(), daily_calls=0, daily_tokens=20,
                                                service="tests"))
    llm.script(Answer(json=GOOD, usage=(15, 5)))
    await ask(client)
    with pytest.raises(BudgetExhausted) as caught:
        await ask(client)
    assert caught.value.budget == "tokens"
    assert len(llm.requests) == 1


@pytest_asyncio.fixture
async def usage_schema(pool: Any) -> AsyncIterator[str]:
    schema = unique("llmusage")
    async with pool.connection() as conn:
        for stmt in usage_table_sql(schema):
            await conn.execute(stmt)
        for stmt in usage_table_sql(schema):  # idempotent: a re-run migration is harmless
            await conn.execute(stmt)
        await conn.commit()
    yield schema
    async with pool.connection() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.commit()


async def test_postgres_usage_adds_up_per_tenant_and_day(pool: Any, usage_schema: str) -> None:
    store = PostgresUsage(pool, usage_schema)
    day = datetime.date(2024, 5, 1)
    assert await store.used("t1", day) == (0, 0)
    await store.add("t1", day, calls=1, tokens_in=100, tokens_out=20)
    await store.add("t1", day, calls=1, tokens_in=50, tokens_out=5)
    await store.add("t1", day + datetime.timedelta(days=1), calls=1, tokens_in=1, tokens_out=1)
    await store.add("t2", day, calls=3, tokens_in=0, tokens_out=0)
    assert await store.used("t1", day) == (2, 175)
    assert await store.used("t2", day) == (3, 0)
    async with pool.connection() as conn:
        cur = await conn.execute(
            f"SELECT tokens_in, tokens_out FROM {usage_schema}.llm_usage "
            "WHERE tenant_id = 't1' AND day = %s", (day,))
        assert await cur.fetchone() == (150, 25)
        await conn.rollback()


async def test_postgres_usage_backs_a_budget_shared_by_clients(
        pool: Any, usage_schema: str, llm: ScriptedLlm, make_client: MakeClient) -> None:
    service = unique("llm")
    store = PostgresUsage(pool, usage_schema)
    # two replicas of a service, each with its own client and budget, one table
    first, second = (make_client(llm.url, service=service, budget=Budget(
        store, daily_calls=2, daily_tokens=0, service=service)) for _ in range(2))
    llm.script(Answer(json=GOOD, usage=(10, 2)), Answer(json=GOOD, usage=(10, 2)))
    await ask(first, "t-pg")
    await ask(second, "t-pg")
    with pytest.raises(BudgetExhausted):
        await ask(first, "t-pg")
    assert len(llm.requests) == 2
    assert await store.used("t-pg", utc_day(time.time())) == (2, 24)


def test_the_usage_table_refuses_a_bad_schema_name() -> None:
    with pytest.raises(ValueError):
        usage_table_sql("x; DROP TABLE y")
