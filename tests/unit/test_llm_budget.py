"""Per-tenant daily LLM budgets over the in-memory usage store: refusal by calls and by tokens,
per tenant, reset at UTC midnight, the refusal counted every time and logged once a day."""

from __future__ import annotations

import datetime
import logging

import pytest

from habitus.llm import Budget, BudgetExhausted, LlmError, MemoryUsage
from habitus.llm.budget import seconds_to_utc_midnight, utc_day
from habitus.telemetry.metrics import registry
from tests.support.factories import unique

NOON = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def exhausted(service: str, budget: str) -> float:
    return registry.get_sample_value("habitus_llm_budget_exhausted_total",
                                     {"service": service, "budget": budget}) or 0.0


def budget(*, calls: int = 0, tokens: int = 0, clock: Clock | None = None,
           service: str = "tests") -> tuple[Budget, MemoryUsage]:
    store = MemoryUsage()
    return Budget(store, daily_calls=calls, daily_tokens=tokens, service=service,
                  clock=clock or Clock(NOON)), store


async def test_calls_are_refused_once_the_daily_count_is_spent() -> None:
    b, _ = budget(calls=2)
    await b.check("t1")
    await b.record("t1", 10, 5)
    await b.check("t1")
    await b.record("t1", 10, 5)
    with pytest.raises(BudgetExhausted) as caught:
        await b.check("t1")
    assert caught.value.reason == "budget"
    assert caught.value.budget == "calls"
    assert isinstance(caught.value, LlmError)
    await b.check("t2")  # another tenant's budget is its own


async def test_tokens_in_and_out_both_count() -> None:
    b, store = budget(calls=100, tokens=100)
    await b.record("t1", 60, 39)
    await b.check("t1")
    await b.record("t1", 0, 1)
    assert await store.used("t1", utc_day(NOON)) == (2, 100)
    with pytest.raises(BudgetExhausted) as caught:
        await b.check("t1")
    assert caught.value.budget == "tokens"


async def test_zero_means_no_limit() -> None:
    b, _ = budget(calls=0, tokens=0)
    for _ in range(50):
        await b.record("t1", 10_000, 10_000)
    await b.check("t1")


async def test_the_budget_resets_at_utc_midnight_and_says_when() -> None:
    clock = Clock(NOON)
    b, _ = budget(calls=1, clock=clock)
    await b.record("t1", 1, 1)
    with pytest.raises(BudgetExhausted) as caught:
        await b.check("t1")
    assert caught.value.retry_after == pytest.approx(12 * 3600)
    clock.now = NOON + 12 * 3600  # midnight
    await b.check("t1")


def test_seconds_to_midnight_and_the_day_are_utc() -> None:
    just_before = datetime.datetime(2024, 5, 1, 23, 59, 59, tzinfo=datetime.UTC).timestamp()
    assert utc_day(just_before) == datetime.date(2024, 5, 1)
    assert seconds_to_utc_midnight(just_before) == pytest.approx(1.0)
    assert utc_day(just_before + 1) == datetime.date(2024, 5, 2)
    assert seconds_to_utc_midnight(just_before + 1) == pytest.approx(86_400)


async def test_refusals_are_counted_each_time_and_logged_once_a_day(
        caplog: pytest.LogCaptureFixture) -> None:
    service = unique("budget")
    clock = Clock(NOON)
    b, _ = budget(calls=1, service=service, clock=clock)
    await b.record("t1", 1, 1)
    with caplog.at_level(logging.WARNING, logger="habitus.llm.budget"):
        for _ in range(3):
            with pytest.raises(BudgetExhausted):
                await b.check("t1")
        clock.now += 86_400  # next day: spent again after one call
        await b.record("t1", 1, 1)
        with pytest.raises(BudgetExhausted):
            await b.check("t1")
    assert exhausted(service, "calls") == 4
    warnings = [r for r in caplog.records if r.name == "habitus.llm.budget"]
    assert len(warnings) == 2
    assert warnings[0].__dict__["tenant_id"] == "t1"
    assert warnings[0].__dict__["budget"] == "calls"
