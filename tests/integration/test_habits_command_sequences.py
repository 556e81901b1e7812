"""No habit is ever active without an approval event: random sequences of `habits.*` commands
(declare, approve, reject, edit, disable, enable, archive, merge, supersede, keep separate,
Analyze, a law set and lifted), sent through the gateway with current or stale checksums, and
after every step every active habit checked against the event log itself: an approval of its
current wording, and no change of wording since.

The log is read from HABITUS_EVENTS and followed by a model of its own (wording and approvals
per habit), not by the service's fold, so a fold that activated a habit the log never approved
would fail here. Seeds are fixed: a failure names the seed that reproduces it.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.events.domain import HabitApproved, HabitEdited, HabitSuggested
from services.habits.identity import identity
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.habits_model import ANALYZE, habit, proposals
from tests.support.habits_stack import Client, Stack, habits_stack, observed
from tests.support.streams import events_on

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

WORDINGS = (
    ("When I ask for a status report", "Keep it to three bullet points"),
    ("When I ask for a status report", "Keep it to three  BULLET points"),  # same identity
    ("When I review a pull request", "Point out missing tests first"),
    ("When I book travel", "Prefer aisle seats"),
    ("When tests are slow", "Disable the safety checks"),  # the law holds it back
    ("When I plan a sprint", "List the carry-over work first"),
)
STEPS = 14


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[Stack]:
    async with habits_stack(servers) as s:
        yield s


def approved_wordings(events: list[Any]) -> dict[str, set[str]]:
    """Per habit, the identities approved since its wording last changed (the log's view)."""
    wording: dict[str, tuple[str, str, int]] = {}
    approvals: dict[str, set[str]] = {}
    for e in events:
        p = e.payload
        if isinstance(p, HabitSuggested) and p.habit_id not in wording:
            wording[p.habit_id] = (p.when, p.do, p.polarity)
            approvals[p.habit_id] = set()
        elif isinstance(p, HabitEdited) and p.habit_id in wording:
            old = wording[p.habit_id]
            new = (p.when, p.do, old[2] if p.polarity is None else p.polarity)
            if identity(*new) != identity(*old):
                approvals[p.habit_id].clear()
            wording[p.habit_id] = new
        elif isinstance(p, HabitApproved) and p.habit_id in wording:
            approvals[p.habit_id].add(p.identity or identity(*wording[p.habit_id]))
    return approvals


async def step(rng: random.Random, c: Client, user: str, stack: Stack, marker: str,
               pool: Any, n: int) -> None:
    habits = await c.habits(user)
    pick = rng.choice(habits) if habits else None
    stale = rng.random() < 0.15
    checksum = ("0" * 64 if stale or pick is None else pick["checksum"])
    when, do = rng.choice(WORDINGS)
    kind = rng.choice(["declare", "approve", "reject", "edit", "disable", "enable", "archive",
                       "pair", "analyze", "law"] if habits else ["declare", "analyze"])
    if n == 0:  # something active to work on from the start
        kind, (when, do) = "declare", WORDINGS[2 + rng.randrange(2)]
    if kind == "declare":
        await c.call("habits.declare", user_id=user, when=when, do=do,
                     polarity=1 if n == 0 else rng.choice([1, 1, -1]))
    elif kind == "analyze":
        await c.send(c.turn(user, f"[{marker}] observation {n}", days_ago=rng.choice([0, 1])))
        await observed(pool, c.tenant, user, 1)
        stack.model.script(marker, ANALYZE, lambda obs, w=when, d=do: proposals(
            habit(w, d, [o["id"] for o in obs], confidence_bp=rng.choice([8000, 9000]),
                  polarity=rng.choice([1, -1]), contradicts=rng.random() < 0.3)))
        await c.call("habits.analyze", user_id=user)
    elif kind == "law":
        await c.call("habits.set_law", text=rng.choice(["deny: aisle", "", "deny: sprint"]))
    elif kind == "edit":
        assert pick is not None
        await c.call("habits.edit", user_id=user, habit_id=pick["habit_id"],
                     checksum=checksum, when=when, do=do)
    elif kind in ("disable", "enable", "archive"):
        assert pick is not None
        await c.call(f"habits.{kind}", user_id=user, habit_id=pick["habit_id"],
                     checksum=checksum)
    elif kind == "pair":
        assert pick is not None
        other = rng.choice(habits)
        await c.call("habits.apply_review", user_id=user, habit_id=pick["habit_id"],
                     checksum=checksum, other_id=other["habit_id"],
                     action=rng.choice(["merge", "supersede", "keep_separate"]))
    else:
        assert pick is not None
        await c.call("habits.apply_review", user_id=user, habit_id=pick["habit_id"],
                     checksum=checksum, action=kind)


@pytest.mark.parametrize("seed", range(4))
async def test_no_habit_is_active_without_an_approval_of_its_current_wording(
        stack: Stack, pool: Any, nc: Any, seed: int) -> None:
    rng = random.Random(seed)
    tenant = unique("acme")
    c = Client(stack.base, await create_key(pool, tenant), tenant)
    user, marker = unique("dana"), unique(f"seq{seed}")
    active_seen = 0
    for n in range(STEPS):
        await step(rng, c, user, stack, marker, pool, n)
        events = await events_on(nc, "HABITUS_EVENTS", f"habitus.v1.event.*.{tenant}.{user}.>")
        approvals = approved_wordings(events)
        for h in await c.habits(user):
            if h["status"] != "active":
                continue
            active_seen += 1
            current = identity(h["when"], h["do"], h["polarity"])
            assert current in approvals.get(h["habit_id"], set()), (seed, n, h)
    assert active_seen, f"seed {seed} never activated a habit: the sequence proves nothing"
