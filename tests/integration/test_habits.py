"""The habits service on real servers: turns through the gateway become observations, Analyze
(a scripted model over real HTTP) proposes habits, a person reviews them, and approved habits
steer `prompt.context`. The reference implementation's vectors are replayed through the real
service (fixed vectors for those texts; the real encoder for every other text)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.crypto.columns import COLUMNS, is_sealed
from habitus.ids import TENANT_WIDE
from services.habits import store
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.habits_model import (
    ANALYZE,
    JUDGE,
    habit,
    judgments,
    proposals,
    refs,
)
from tests.support.habits_stack import Client, Stack, habits_stack, observed, until
from tests.support.llm_server import Answer
from tests.support.statements import CountingCursor

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[Stack]:
    async with habits_stack(servers) as s:
        yield s


@pytest_asyncio.fixture
async def acme(stack: Stack, pool: Any) -> Client:
    tenant = unique("acme")
    return Client(stack.base, await create_key(pool, tenant), tenant)


def unit2(c: float) -> list[float]:
    """At cosine c to [1, 0, 0], in the x-y plane."""
    return [c, math.sqrt(1 - c * c), 0.0]


def unit3(c: float) -> list[float]:
    """At cosine c to [1, 0, 0], in the x-z plane (far from the x-y plane's vectors)."""
    return [c, 0.0, math.sqrt(1 - c * c)]


# ------------------------------------------------------------- duplicates (reference vectors)


async def test_the_reference_vectors_make_a_strong_duplicate_and_5499_none(
        stack: Stack, acme: Client, pool: Any) -> None:
    user = unique("dana")
    x = [1.0, 0.0, 0.0]
    stack.embedder.fix({
        "ref cond a": x, "ref beh a": x,
        # condition cosine 0.9, behavior 0.8048647766597806: effective 8048 bp, strong
        "ref cond b": unit2(0.9), "ref beh b": unit2(0.8048647766597806),
        # 5499 bp: below the review threshold
        "ref cond c": unit3(0.54995), "ref beh c": unit3(0.9),
        # identical vectors, opposite polarity: never compared
        "ref cond d": x, "ref beh d": x,
    })
    first = await acme.declare(user, "ref cond a", "ref beh a")
    assert first["outcome"] == "accepted_active"
    second = await acme.declare(user, "ref cond b", "ref beh b")
    assert second["outcome"] == "duplicate_resolution"
    assert second["habit"]["status"] == "candidate"
    assert second["habit"]["blocked_by"] == [first["habit"]["habit_id"]]
    third = await acme.declare(user, "ref cond c", "ref beh c")
    assert third["outcome"] == "accepted_active"
    opposite = await acme.declare(user, "ref cond d", "ref beh d", polarity=-1)
    assert opposite["outcome"] == "accepted_active"

    review = await acme.rpc("habits.list_review", user_id=user)
    assert review["pending_duplicates"] == 1
    items = {i["habit"]["habit_id"]: i for i in review["items"]}
    b = items[second["habit"]["habit_id"]]
    a = items[first["habit"]["habit_id"]]
    assert b["duplicates"] == [a["number"]] and a["duplicates"] == [b["number"]]
    assert b["text"] == "When: ref cond b\nDo: ref beh b"
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT similarity_bp, strong, decision FROM habits.duplicates "
            "WHERE tenant_id = %s AND user_id = %s", (acme.tenant, user))
        assert await cur.fetchall() == [(8048, True, "pending")]

    # a person resolves it: kept separate, the approved habit activates
    kept = await acme.review(user, second["habit"], "keep_separate",
                             other_id=first["habit"]["habit_id"])
    assert second["habit"]["habit_id"] in kept["changed"]
    assert (await acme.habit(user, second["habit"]["habit_id"]))["status"] == "active"


# ------------------------------------------------------------------------------- Analyze


async def test_analyze_drains_in_bounded_batches_and_a_failure_keeps_the_first_committed(
        stack: Stack, acme: Client, pool: Any) -> None:
    user, marker = unique("dana"), unique("batch")
    said = [f"[{marker}] Status report please, three bullets ({n})." for n in (1, 2, 3)]
    await acme.send(*(acme.turn(user, s) for s in said))
    await observed(pool, acme.tenant, user, 3)
    stack.model.script(marker, ANALYZE, lambda obs: proposals(habit(
        "When I ask for a status report", "Keep it to three bullet points",
        refs(obs, "(1)", "(2)"))), Answer(status=500))

    first = await acme.rpc("habits.analyze", user_id=user, max_records=2)
    assert (first["batches"], first["records"], first["remaining"]) == (1, 2, 1)
    assert first["suggested"] == 1 and "500" in first["error"]
    calls = stack.model.calls(marker, ANALYZE)
    assert [len(observations_of(c)) for c in calls] == [2, 1]  # [[1, 2], [3]]
    assert [h["when"] for h in await acme.habits(user)] == ["When I ask for a status report"]

    # the next run starts at the third record: the first batch is not asked again
    stack.model.script(marker, ANALYZE, lambda obs: proposals())
    second = await acme.rpc("habits.analyze", user_id=user, max_records=2)
    assert (second["batches"], second["records"], second["remaining"]) == (1, 1, 0)
    assert second["error"] is None
    later = stack.model.calls(marker, ANALYZE)[len(calls):]
    assert [["(3)" in o["text"] for o in observations_of(c)] for c in later] == [[True]]


def observations_of(body: dict[str, Any]) -> list[dict[str, str]]:
    from tests.support.habits_model import observations

    return observations(body)


async def test_a_suggestion_needs_approval_and_evidence_on_two_days_then_steers_the_prompt(
        stack: Stack, acme: Client, pool: Any) -> None:
    user, marker = unique("dana"), unique("report")
    await acme.send(
        acme.turn(user, f"[{marker}] Status report for the launch? Three bullets, no more.",
                  days_ago=1),
        acme.turn(user, f"[{marker}] Too long again: the status report is three bullets.",
                  days_ago=1))
    await observed(pool, acme.tenant, user, 2)
    when, do = "When I ask for a status report", "Keep it to three bullet points"
    stack.model.script(marker, ANALYZE, lambda obs: proposals(habit(
        when, do, refs(obs, "for the launch", "Too long again"), confidence_bp=8000)))
    done = await acme.rpc("habits.analyze", user_id=user)
    assert done["suggested"] == 1 and done["activated"] == 0
    [suggested] = await acme.habits(user)
    assert (suggested["status"], suggested["review_status"]) == ("candidate",
                                                                 "collecting_evidence")
    assert (suggested["support"], suggested["days"]) == (2, 1)

    # approved, but two observations on one day are not enough: it waits
    approved = await acme.review(user, suggested, "approve")
    assert approved["outcome"] == "approved_pending_eligibility"
    assert approved["habit"]["status"] == "candidate" and approved["habit"]["approved"]
    nothing = await acme.rpc("habits.select", user_id=user,
                             request=f"Status report please [{marker}]")
    assert nothing["habits"] == []

    # a third observation, on another day: Analyze adds it and the approval activates
    await acme.send(acme.turn(user, f"[{marker}] Status report: again, three bullets."))
    await observed(pool, acme.tenant, user, 3)
    stack.model.script(marker, ANALYZE, lambda obs: proposals(habit(
        when, do, refs(obs, "again, three bullets"), confidence_bp=8200)))
    more = await acme.rpc("habits.analyze", user_id=user)
    assert (more["evidence_added"], more["activated"]) == (1, 1)
    active = await acme.habit(user, suggested["habit_id"])
    assert (active["status"], active["review_status"]) == ("active", "promoted_active")
    assert (active["support"], active["days"], active["confidence_bp"]) == (3, 2, 8200)

    request = f"Can I get this week's status report? [{marker}]"
    stack.model.script(marker, JUDGE, lambda p: judgments(p, lambda c: c == when))
    chosen = await acme.rpc("habits.select", user_id=user, request=request)
    assert [h["habit_id"] for h in chosen["habits"]] == [suggested["habit_id"]]
    assert chosen["steered_by"] == ["When: I ask for a status report"]
    stack.model.script(marker, JUDGE, lambda p: judgments(p, lambda c: c == when))
    context = await acme.rpc("prompt.context", user_id=user, request=request)
    assert [s["name"] for s in context["sections"]][-1] == "habits"
    assert f"- When: I ask for a status report\n  Do: {do}" in context["text"]
    assert context["steered_by"] == ["When: I ask for a status report"]
    # the judge saw the conditions only: never the behavior, never an id
    judged = stack.model.calls(marker, JUDGE)[-1]
    text = str(judged["messages"])
    assert do not in text and suggested["habit_id"] not in text
    plain = await acme.rpc("prompt.context", user_id=user)
    assert "habits" not in [s["name"] for s in plain["sections"]]
    assert plain["steered_by"] == []


async def test_invalid_proposals_are_quarantined_with_their_reason(
        stack: Stack, acme: Client, pool: Any) -> None:
    user, marker = unique("dana"), unique("quarantine")
    await acme.rpc("habits.configure", project_names=["Northwind"])
    await acme.send(acme.turn(user, f"[{marker}] Deploy notes: keep them short."))
    await observed(pool, acme.tenant, user, 1)
    stack.model.script(marker, ANALYZE, lambda obs: proposals(
        habit("When I write deploy notes", "Keep them short", ["r1"]),
        habit("When I write deploy notes", "Mention the rollback plan", ["r9"]),
        habit("When I edit /srv/app/settings.py", "Run the linter", ["r1"]),
        habit("When I release v2.4.1", "Tag the commit", ["r1"]),
        habit("When I open ticket 9f3a2c1b7d4e5f60", "Link it", ["r1"]),
        habit("When I work on Northwind", "Use the staging cluster", ["r1"]),
        habit("When I deploy", "Email the notes to ops@example.com", ["r1"])))
    done = await acme.rpc("habits.analyze", user_id=user)
    assert (done["suggested"], done["quarantined"]) == (1, 6)
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT reason, item FROM habits.quarantine WHERE tenant_id = %s AND user_id = %s "
            "ORDER BY position", (acme.tenant, user))
        rows = await cur.fetchall()
    assert [r[0] for r in rows] == ["unknown_ref", "names_a_path", "names_a_version",
                                    "names_an_id", "names_a_project", "sensitive"]
    assert all(is_sealed(r[1]) for r in rows)  # the model's items are the user's, sealed
    items = [COLUMNS.open_json(acme.tenant, user, r[1]) for r in rows]
    assert items[0]["behavior"] == "Mention the rollback plan"
    assert "ops@example.com" not in str(items)  # what is quarantined for a secret is redacted
    listed = (await acme.rpc("habits.quarantine", user_id=user))["items"]
    assert sorted(i["reason"] for i in listed) == sorted(r[0] for r in rows)
    assert all(i["model"] == "scripted-model" for i in listed)
    assert [h["do"] for h in await acme.habits(user)] == ["Keep them short"]


async def test_a_strong_contradiction_puts_the_one_matching_habit_to_sleep(
        stack: Stack, acme: Client, pool: Any) -> None:
    when, do = "When I ask for a summary", "Use bullet points"
    for confidence, expected in ((9000, "dormant"), (8400, "active")):
        user, marker = unique("dana"), unique("contra")
        old = (await acme.declare(user, when, do))["habit"]
        await acme.send(acme.turn(user, f"[{marker}] No bullet points in summaries anymore."))
        await observed(pool, acme.tenant, user, 1)
        stack.model.script(marker, ANALYZE, lambda obs, c=confidence: proposals(habit(
            when, do, ["r1"], polarity=-1, confidence_bp=c, contradicts=True)))
        done = await acme.rpc("habits.analyze", user_id=user)
        assert done["suggested"] == 1
        after = await acme.habit(user, old["habit_id"])
        assert after["status"] == expected, confidence
        replacement = [h for h in await acme.habits(user) if h["habit_id"] != old["habit_id"]]
        assert [(h["polarity"], h["status"]) for h in replacement] == [(-1, "candidate")]
        if expected == "dormant":
            assert after["related_id"] == replacement[0]["habit_id"]


# ------------------------------------------------------------------------------- capture


async def test_only_completed_turns_are_captured_and_what_is_kept_is_redacted(
        stack: Stack, acme: Client, pool: Any) -> None:
    user = unique("dana")
    await acme.rpc("habits.configure", retention_days=14)
    secret = "sk-proj-" + "a1b2c3d4" * 3
    await acme.send(
        acme.turn(user, "This one failed.", outcome="error"),
        acme.turn(user, "This one was cut off.", outcome="truncated"),
        acme.turn(user, "This one was stopped.", outcome="aborted"),
        acme.turn(user, f"Use my key {secret} and mail dana@example.com from /home/dana/x",
                  "Noted, I will keep it short."))
    [(_, text)] = await observed(pool, acme.tenant, user, 1)
    assert secret not in text and "dana@example.com" not in text and "/home/dana" not in text
    assert "[REDACTED]" in text and "Noted, I will keep it short." in text
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT expires_at - observed_at FROM habits.observations WHERE tenant_id = %s "
            "AND user_id = %s", (acme.tenant, user))
        [(kept,)] = await cur.fetchall()
    assert kept == 14 * 86_400


async def test_a_batchs_capture_reads_each_tenants_retention_in_one_statement(
        stack: Stack, pool: Any) -> None:
    """Retention is the tenant's own (its tenant-wide settings row), the default where it set
    none; a row kept under one of its users is not the tenant's setting."""
    configured, unset, per_user = unique("ret"), unique("ret"), unique("ret")
    async with pool.connection() as conn:
        cur = CountingCursor(conn)
        await store.set_tenant_settings(cur, configured, TENANT_WIDE,
                                        store.TenantSettings(retention_days=30), 1.0)
        await store.set_tenant_settings(cur, per_user, "dana",
                                        store.TenantSettings(retention_days=90), 1.0)
        before = cur.statements
        found = await store.retention_days_of(cur, [configured, unset, per_user])
        assert cur.statements - before == 1
        assert await store.retention_days_of(cur, []) == {}
        await conn.rollback()
    assert found == {configured: 30, unset: 7, per_user: 7}


# ------------------------------------------------------------------------------- sealing


async def raw_rows(pool: Any, table: str, columns: str, tenant: str, user: str
                   ) -> list[tuple[Any, ...]]:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT {columns} FROM habits.{table} "
                                 "WHERE tenant_id = %s AND user_id = %s", (tenant, user))
        return list(await cur.fetchall())


async def test_a_persons_words_are_sealed_in_every_column_and_read_back_through_the_api(
        stack: Stack, acme: Client, pool: Any) -> None:
    """The turn captured, what the model made of it (its answer, a suggestion, a quarantined
    item), a declared habit and its audit: the columns hold none of the words, only values
    sealed with the user's key; the API answers with the words. The tenant's law stays
    plain."""
    user, marker = unique("dana"), unique("sealed")
    said = f"[{marker}] Write to Ottoline Brackenridge-Quill about the Larkspur rollout"
    await acme.rpc("habits.set_law", text="deny: \\bcustomer names?\\b")
    await acme.send(acme.turn(user, said))
    [(_, text)] = await observed(pool, acme.tenant, user, 1)
    assert said in text  # the test's own view opens it
    when, do = "When I write to Ottoline Brackenridge-Quill", "Mention the Larkspur rollout"
    stack.model.script(marker, ANALYZE, lambda obs: proposals(
        habit(when, do, refs(obs, "Larkspur")),
        habit("When Larkspur ships", "Tell Ottoline Brackenridge-Quill", ["r9"])))
    done = await acme.rpc("habits.analyze", user_id=user)
    assert (done["suggested"], done["quarantined"]) == (1, 1)
    declared = (await acme.declare(user, "When Brackenridge-Quill asks about Larkspur",
                                   "Answer in two sentences"))["habit"]
    words = ("Brackenridge-Quill", "Larkspur", "Ottoline")

    # on disk: sealed values, none of the words (nor the hash that would confirm a guess)
    sealed = {
        "observations.text": await raw_rows(pool, "observations", "text, checksum",
                                            acme.tenant, user),
        "habits.state": await raw_rows(pool, "habits", "state", acme.tenant, user),
        "audit.before/after": await raw_rows(pool, "audit", "before, after", acme.tenant,
                                             user),
        "answers.answer": await raw_rows(pool, "answers", "answer", acme.tenant, user),
        "quarantine.item": await raw_rows(pool, "quarantine", "item", acme.tenant, user),
    }
    for column, rows in sealed.items():
        assert rows, column
        assert not [w for w in words if w in str(rows)], (column, rows)
    assert all(is_sealed(v) for row in sealed["observations.text"] for v in row)
    assert all(is_sealed(r[0]) for r in sealed["answers.answer"] + sealed["quarantine.item"])
    states = [r[0] for r in sealed["habits.state"]] + [
        s for r in sealed["audit.before/after"] for s in r if s is not None]
    for state in states:
        assert all(is_sealed(state[k]) for k in ("condition", "behavior")), state
        # what is no one's words stays plain JSON, for an operator's query
        assert state["status"] in ("candidate", "active") and state["habit_id"]
    approved = [s for s in states if s.get("approved_identity")]
    assert approved and all(is_sealed(s["approved_identity"]) for s in approved)
    assert COLUMNS.open_json(acme.tenant, user, sealed["answers.answer"][0][0])["habits"][0][
        "condition"] == when

    # through the API: the words, as they were
    listed = {h["habit_id"]: h for h in await acme.habits(user)}
    assert sorted((h["when"], h["do"]) for h in listed.values()) == sorted(
        [(when, do), ("When Brackenridge-Quill asks about Larkspur", "Answer in two sentences")])
    got = await acme.rpc("habits.get", user_id=user, habit_id=declared["habit_id"])
    assert got["habit"]["when"] == "When Brackenridge-Quill asks about Larkspur"
    assert [a["after"]["condition"] for a in got["audit"]] == [
        "When Brackenridge-Quill asks about Larkspur"] * len(got["audit"])
    assert got["audit"][-1]["before"]["behavior"] == "Answer in two sentences"
    [item] = (await acme.rpc("habits.quarantine", user_id=user))["items"]
    assert item["reason"] == "unknown_ref" and item["item"]["condition"] == "When Larkspur ships"
    # the tenant's law: its own row, plain
    [(law,)] = await raw_rows(pool, "laws", "text", acme.tenant, TENANT_WIDE)
    assert law == "deny: \\bcustomer names?\\b"


# ------------------------------------------------------------------------------------ law


async def test_a_lifted_law_restores_what_it_suppressed_and_activates_what_waited_for_it(
        stack: Stack, acme: Client) -> None:
    user = unique("dana")
    kept = (await acme.declare(user, "When I plan a sprint", "List the carry-over first"))
    deployed = (await acme.declare(user, "When I deploy a service", "Use the staging cluster"))
    law = await acme.rpc("habits.set_law", text="Team rules.\ndeny: staging")
    assert law["suppressed"] == [deployed["habit"]["habit_id"]]
    waiting = await acme.declare(user, "When I ship a hotfix", "Tell staging first")
    assert (waiting["outcome"], waiting["habit"]["blocked_by"]) == ("approved_pending_law",
                                                                   ["law:2"])
    stamped = await acme.habit(user, kept["habit"]["habit_id"])
    assert stamped["status"] == "active"
    trail = (await acme.rpc("habits.get", user_id=user,
                            habit_id=kept["habit"]["habit_id"]))["audit"]
    assert [a["event_type"] for a in trail][-1] == "HabitLawSet"  # the re-stamp is audited

    lifted = await acme.rpc("habits.set_law", text="Team rules.")
    assert lifted["suppressed"] == []
    statuses = {h["habit_id"]: h["status"] for h in await acme.habits(user)}
    assert statuses == {kept["habit"]["habit_id"]: "active",
                        deployed["habit"]["habit_id"]: "active",
                        waiting["habit"]["habit_id"]: "active"}


# ------------------------------------------------------------------------------ concurrency


async def test_a_slow_judge_does_not_hold_up_other_calls(stack: Stack, acme: Client) -> None:
    user, marker = unique("dana"), unique("slow")
    await acme.declare(user, "When I ask for a status report", "Keep it to three bullets")
    stack.model.script(marker, JUDGE, Answer(delay=1.5, json={"schema_version": 3,
                                                              "judgments": []}))
    select = asyncio.create_task(acme.rpc(
        "habits.select", user_id=user, request=f"The status report, please [{marker}]"))
    async def judging() -> bool:
        return bool(stack.model.calls(marker, JUDGE))
    await until(judging)  # the judge has the request
    listed = await acme.habits(user)
    assert len(listed) == 1 and not select.done()  # answered while the judge still thinks
    assert (await select)["reason"] == "invalid_judgment"
