"""`habitus.client` against a real stack: the gateway and every service a client method
reaches (producers, the stability detector, the profile renderer, tool memory, the trace
router, habits with a scripted model), in-process on the embedded servers.

Everything goes through the client's public API, as an agent would: ingest of each type and
its typed results, a rejected item's field, facets and the prompt after plain statements,
rules, routing, habits declared, suggested, reviewed and approved, the typed errors of real
refusals, a real 503 retried until the service behind it comes up, and the async client.

The sync client blocks, and the stack runs on the test's event loop, so sync calls run in a
thread (`off`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.client import (
    AsyncClient,
    Client,
    Conflict,
    IngestResult,
    InvalidArgument,
    InvalidEvent,
    NotFound,
    RetryEvent,
    Unauthenticated,
    Unavailable,
    document,
    email,
    feedback,
    provider_profile,
    tool_call,
    trace,
    trace_step,
    turn,
)
from habitus.contract.habits import Changed, Habit
from habitus.contract.learning import Facet
from habitus.llm import LlmSettings
from habitus.service.migrations import migrate
from services.extractor.main import build as extractor
from services.extractor.settings import ExtractorSettings
from services.gateway.main import service as gateway
from services.habits.main import build as habits
from services.habits.settings import HabitsSettings
from services.producers.main import build as producers
from services.profile_renderer.main import build as profile_renderer
from services.stability_detector.main import build as learning
from services.stability_detector.settings import LearningSettings
from services.tool_memory.main import build as tool_memory
from services.trace_router.main import build as trace_router
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.habits_model import ANALYZE, HabitsModel, habit, proposals, refs
from tests.support.habits_stack import DAY, ENCODER, Mixed, observed
from tests.support.llm_server import ScriptedLlm
from tests.support.services import running

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
T = TypeVar("T")
KEEP_IT_SHORT = "Please keep it short, no preamble."


class Stack:
    def __init__(self, base: str, model: HabitsModel, settings: Any):
        self.base, self.model, self.settings = base, model, settings


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[Stack]:
    migrate(servers.database)
    model = HabitsModel()
    # Retry-After 1 s (default 5): the retry test waits it out for real
    s = servers.settings(retry_after_seconds=1)
    async with ScriptedLlm(responder=model) as llm:
        config = HabitsSettings(
            schedule_seconds=3600.0,
            llm=LlmSettings(base_url=llm.url, model="scripted-model", timeout_seconds=2.0,
                            max_retries=0, backoff_seconds=0.01, backoff_max_seconds=0.1,
                            daily_calls_per_tenant=0, daily_tokens_per_tenant=0))
        async with running(producers(), s), running(learning(LearningSettings()), s), \
                running(tool_memory(), s), running(trace_router(), s), \
                running(habits(config, embedder=Mixed(ENCODER)), s), \
                running(profile_renderer(), s), running(gateway, s) as host:
            yield Stack(f"http://127.0.0.1:{host.bound_port}", model, s)


@pytest.fixture
def tenant() -> str:
    return unique("acme")


@pytest_asyncio.fixture
async def key(pool: Any, tenant: str) -> str:
    return await create_key(pool, tenant)


@pytest_asyncio.fixture
async def client(stack: Stack, key: str) -> AsyncIterator[Client]:
    c = Client(stack.base, key, timeout=30, backoff=0.05)
    yield c
    c.close()


async def off(fn: Callable[[], T]) -> T:
    """Run a blocking client call off the loop the stack serves on."""
    return await asyncio.to_thread(fn)


async def until(check: Callable[[], Awaitable[T | None]], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


# ------------------------------------------------------------------------------- ingest

async def test_each_ingest_type_is_accepted_and_a_resent_batch_is_all_duplicates(
        client: Client) -> None:
    user = unique("dana")
    run = trace(user, "Sum these numbers: 1, 2, 3", "6", agent="calc", model="small-1b",
                engine="pytest", outcome="success", total_tokens=42, latency_seconds=0.8,
                steps=[trace_step("llm", duration_seconds=0.7, input="1,2,3", output="6")])
    items = [
        turn(user, "Hello there", "Hi!", session_id="s1",
             tool_calls=[tool_call("web_search", True, output_summary="3 results")]),
        email(user, sender=f"{user}@acme.example", to="sam@acme.example", subject="Invoices",
              body="Hi Sam,\n\nDone.\n\nThanks,\nDana Keller\nAcme Ltd"),
        document(user, "Our deploys go out on Tuesdays.", source_id="handbook.md"),
        provider_profile(user, "gmail", "conn-1", name="Dana Keller",
                         timezone="Europe/Berlin"),
        run,
        feedback(user, 0.9, trace_id=str(run.payload["trace_id"]), outcome="success"),
    ]
    first = await off(lambda: client.ingest(*items))
    assert isinstance(first, IngestResult)
    assert (first.accepted, first.duplicates, first.rejected) == (6, 0, 0) and first.ok
    assert [r.type for r in first.results] == [
        "TurnRecorded", "EmailObserved", "DocumentIngested", "ProviderProfileSynced",
        "TraceCompleted", "FeedbackGiven"]
    assert all(r.status == "accepted" and r.event_id and r.seq for r in first.results)

    again = await off(lambda: client.ingest(*items))
    assert (again.accepted, again.duplicates) == (0, 6)
    assert [r.event_id for r in again.results] == [r.event_id for r in first.results]

    reported = await off(lambda: client.report_trace(
        user, "What is 2+2?", "4", agent="calc", model="small-1b", latency_seconds=0.2))
    hello = items[0].payload["turn_id"]
    scored = await off(lambda: client.feedback(user, 1.0, turn_id=str(hello)))
    assert reported.accepted == 1 and scored.accepted == 1


async def test_a_rejected_item_names_its_field_and_partial_stores_the_rest(
        client: Client) -> None:
    user = unique("dana")
    good = turn(user, "Hi", "Hello")
    bad = {"type": "TurnRecorded", "user_id": user,
           "payload": {**turn(user, "Hi", "Hello").payload, "user_msg": "typo"}}
    with pytest.raises(InvalidEvent) as raised:
        await off(lambda: client.ingest(good, bad))
    exc = raised.value
    assert (exc.status, exc.code, exc.field) == (422, "invalid_event", "payload.user_msg")
    assert "nothing was published" in exc.message
    assert exc.result is not None
    assert [r.status for r in exc.result.results] == ["not_published", "rejected"]
    (rejected,) = exc.result.rejected_items
    assert [(e.field, e.reason) for e in rejected.errors] == [
        ("payload.user_msg", "Extra inputs are not permitted")]

    partial = await off(lambda: client.ingest(good, bad, partial=True))
    assert (partial.accepted, partial.rejected) == (1, 1) and not partial.ok
    assert partial.rejected_items[0].index == 1


# ----------------------------------------------------------------------- facets, prompt

async def test_plain_statements_become_facets_in_the_prompt_and_can_be_pinned_and_forgotten(
        client: Client) -> None:
    user = unique("dana")
    start = time.time() - 120
    items = [turn(user, KEEP_IT_SHORT, "Sure.", at=start + 10 * i, answered_at=start + 10 * i + 2)
             for i in range(3)]
    assert (await off(lambda: client.ingest(*items))).accepted == 3

    async def learned() -> dict[tuple[str, str], Facet] | None:
        listed = await off(lambda: client.facets(user))
        found = {(str(f.class_), f.key): f for f in listed.facets}
        wanted = {("style", "verbosity"), ("style", "preamble")}
        return found if wanted <= set(found) else None

    facets = await until(learned)
    assert facets[("style", "verbosity")].value == "terse"
    assert facets[("style", "preamble")].value == "skip"
    assert facets[("style", "verbosity")].cue_counts.get("explicit", 0) >= 1

    prompt = await until(lambda: _context_with(client, user, "**style/verbosity**: terse"))
    assert "**style/preamble**: skip" in prompt.text
    assert [s.name for s in prompt.sections] and prompt.steered_by == []

    why = await off(lambda: client.explain(user, "style", "verbosity"))
    assert why.value == "terse" and why.values and why.values[0].families
    pinned = await off(lambda: client.pin(user, "style", "verbosity"))
    assert pinned.pinned and pinned.user_state == "pinned"
    back = await off(lambda: client.unpin(user, "style", "verbosity"))
    assert isinstance(back, Facet) and back.user_state == "auto"
    with pytest.raises(Conflict) as raised:  # already automatic
        await off(lambda: client.unpin(user, "style", "verbosity"))
    assert raised.value.status == 409
    gone = await off(lambda: client.forget(user, "style", "preamble"))
    assert gone.user_state == "forgotten"
    prompt = await until(lambda: _context_without(client, user, "style/preamble"))
    assert "**style/verbosity**: terse" in prompt.text


async def _context_with(client: Client, user: str, line: str) -> Any:
    prompt = await off(lambda: client.context(user))
    return prompt if line in prompt.text else None


async def _context_without(client: Client, user: str, line: str) -> Any:
    prompt = await off(lambda: client.context(user))
    return prompt if line not in prompt.text else None


# -------------------------------------------------------------------------- tool rules

async def test_rules_round_trip_and_a_critical_one_is_pinned_into_the_prompt(
        client: Client) -> None:
    user = unique("sam")
    rule = await off(lambda: client.put_rule(user, "Send_Email", "Never email Sarah.",
                                             priority="critical", tags=["policy"]))
    assert (rule.tool_name, rule.priority, rule.scope, rule.tags) == (
        "send_email", "critical", "user", ["policy"])
    tenant_rule = await off(lambda: client.put_rule(None, "*", "Be polite.", priority="high"))
    assert tenant_rule.scope == "tenant"
    listed = await off(lambda: client.rules(user))
    assert {r.id for r in listed.rules} == {rule.id, tenant_rule.id}
    only = await off(lambda: client.rules(user, "send_email"))
    assert rule.id in {r.id for r in only.rules}

    prompt = await until(lambda: _context_with(client, user, "Never email Sarah."))
    assert "Never email Sarah." not in (
        await off(lambda: client.context(user, tools=["web_search"]))).text
    assert "Never email Sarah." in prompt.text

    assert await off(lambda: client.delete_rule(user, "send_email", rule.id)) is True
    assert await off(lambda: client.delete_rule(user, "send_email", rule.id)) is False
    assert await off(lambda: client.delete_rule(None, "*", tenant_rule.id)) is True


# ------------------------------------------------------------------------------ router

async def test_route_chooses_one_of_the_models_and_says_why(client: Client) -> None:
    user = unique("dana")
    choice = await off(lambda: client.route(
        "Fix this Python bug: def f(x): return x +", ["qwen-1b", "llama-70b"], user=user,
        record=True))
    assert choice.model in ("qwen-1b", "llama-70b")
    assert choice.query_class == "code" and choice.context.has_code
    assert choice.policy and choice.reason and choice.decision_id
    fast = await off(lambda: client.route("hi", ["qwen-1b", "llama-70b"], urgency=1.0))
    assert fast.model == "qwen-1b"  # above 0.8 the smallest answers


# ------------------------------------------------------------------------------ habits

async def test_habits_declared_suggested_reviewed_and_approved(
        stack: Stack, client: Client, tenant: str, pool: Any) -> None:
    user, marker = unique("ana"), unique("mk")
    declared = await off(lambda: client.declare(user, "When I ask for a status report",
                                                "Start with a one-line summary"))
    assert isinstance(declared, Changed) and declared.outcome == "accepted_active"
    assert declared.habit.status == "active" and declared.habit.origin == "declared"

    said = [f"Review my change and tell me which tests are missing {marker}",
            f"You forgot to say which tests are missing again {marker}",
            f"Please point out missing tests when you review {marker}"]
    now = time.time()
    sent = await off(lambda: client.ingest(
        turn(user, said[0], "Done.", at=now - 1.2 * DAY),
        turn(user, said[1], "Done.", at=now - 300), turn(user, said[2], "Done.", at=now - 200)))
    assert sent.accepted == 3
    await observed(pool, tenant, user, 3)
    stack.model.script(marker, ANALYZE, lambda obs: proposals(habit(
        "When reviewing my pull request", "List the missing tests", refs(obs, *said))))
    analysis = await off(lambda: client.analyze(user))
    assert analysis.suggested == 1, analysis

    review = await off(lambda: client.review(user))
    (item,) = review.items
    assert item.habit.review_status == "awaiting_review" and "When:" in item.text
    suggested: Habit = item.habit
    assert {h.habit_id for h in (await off(lambda: client.habits(user))).habits} == {
        declared.habit.habit_id, suggested.habit_id}
    assert [h.habit_id for h in (await off(lambda: client.habits(user, "candidate"))).habits] \
        == [suggested.habit_id]

    approved = await off(lambda: client.approve(user, suggested.habit_id, suggested.checksum,
                                                reason="looks right"))
    assert approved.outcome == "accepted_active" and approved.habit.status == "active"
    with pytest.raises(Conflict) as stale:  # the checksum it was approved with is now stale
        await off(lambda: client.reject(user, suggested.habit_id, suggested.checksum))
    assert stale.value.status == 409 and stale.value.code == "conflict"
    detail = await off(lambda: client.habit(user, suggested.habit_id))
    assert detail.habit.approved and detail.audit
    assert (await off(lambda: client.review(user))).items == []


# ------------------------------------------------------------------------------ errors

async def test_refusals_are_typed_and_name_the_field(stack: Stack, client: Client) -> None:
    user = unique("dana")
    with pytest.raises(NotFound) as missing:
        await off(lambda: client.habit(user, "no-such-habit"))
    assert missing.value.status == 404 and "no-such-habit" in missing.value.message
    with pytest.raises(InvalidArgument) as bad:
        await off(lambda: client.facets(user, class_="mood"))
    assert (bad.value.status, bad.value.code, bad.value.field) == (400, "invalid_argument",
                                                                   "class")
    with pytest.raises(InvalidArgument) as blank:
        await off(lambda: client.put_rule(user, "shell", "   "))
    assert blank.value.field == "rule"
    with pytest.raises(NotFound):  # nothing learned: no facet to pin
        await off(lambda: client.pin(user, "style", "verbosity"))
    with pytest.raises(NotFound):
        await off(lambda: client.call("habits.no_such_method"))
    with Client(stack.base, "hab_not-a-key", retries=0) as stranger, \
            pytest.raises(Unauthenticated) as who:
        await off(lambda: stranger.habits(user))
    assert who.value.status == 401


async def test_a_503_is_retried_until_the_service_behind_it_is_up(
        stack: Stack, key: str) -> None:
    """`extraction.status` belongs to the extractor, which this stack does not run: the
    gateway answers 503 with Retry-After until one starts (disabled: no LLM, still answering
    its reads)."""
    user = unique("dana")
    events: list[RetryEvent] = []
    with Client(stack.base, key, retries=1, backoff=0.05, on_retry=events.append) as c, \
            pytest.raises(Unavailable) as down:
        await off(lambda: c.call("extraction.status", user_id=user))
    assert down.value.status == 503 and down.value.retry_after == 1.0
    assert len(events) == 1 and events[0].delay >= 1.0  # Retry-After honoured

    events.clear()
    off_llm = ExtractorSettings(llm=LlmSettings(base_url=None, model=None))
    async with AsyncClient(stack.base, key, retries=5, backoff=0.05,
                           on_retry=events.append) as c:
        asking = asyncio.create_task(c.call("extraction.status", user_id=user))
        await until(lambda: _after(events))  # the first 503 came back
        async with running(extractor(off_llm), stack.settings):
            status = await asking
    assert status["enabled"] is False
    assert events and all(isinstance(e.error, Unavailable) for e in events)


async def _after(events: list[RetryEvent]) -> bool:
    return bool(events)


# ------------------------------------------------------------------------------- async

async def test_the_async_client_reads_and_writes_the_same(stack: Stack, key: str) -> None:
    user = unique("lena")
    async with AsyncClient(stack.base, key) as c:
        sent = await c.ingest(turn(user, "From now on, answer in German.", "Gut."))
        assert sent.accepted == 1
        prompt = await until(lambda: _async_context_with(c, user, "**style/language**: de"))
        assert "*(set by the user)*" in prompt.text  # a standing declaration is the user's setting
        facet = await c.facet(user, "style", "language")
        assert facet.value == "de" and facet.origin == "set_by_user"
        declared = await c.declare(user, "When I ask for release notes",
                                   "Group the changes by component")
        assert declared.outcome == "accepted_active"
        assert [h.habit_id for h in (await c.habits(user)).habits] == [
            declared.habit.habit_id]
        with pytest.raises(Conflict):
            await c.reject(user, declared.habit.habit_id, "0" * 64)
        choice = await c.route("hello", ["qwen-1b"])
        assert choice.model == "qwen-1b"
        raw = await c.call("learning.get_facet", {"class": "style"}, user_id=user,
                           key="language")
        assert raw["value"] == "de"


async def _async_context_with(c: AsyncClient, user: str, line: str) -> Any:
    prompt = await c.context(user)
    return prompt if line in prompt.text else None
