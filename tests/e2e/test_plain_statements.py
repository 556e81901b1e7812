"""Two users of one tenant say what they prefer in plain words, once, in four languages'
worth of ordinary chat, and correct themselves along the way. Through the gateway, with every
learning service running (the scheduler on, no LLM): each plainly stated preference is in
`prompt.context` with its latest value, the corrected values are gone, nothing that was a
question, someone else's preference or a one-off request is there, and the second user's
signature identity waits in PROFILE.md's "Not yet sure" block.

How soon is measured where nothing else shares the cores (tests/bench/test_bench_freshness.py,
docs/benchmarks.md: under two seconds). Here the suite's other workers run beside it, so the
test waits up to WAIT seconds for what must arrive; it ends as soon as all of it has.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from habitus.auth.keys import create_key
from habitus.demo.scenario import session_turns
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.http import TLS
from tests.support.services import learning_stack

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

#: how long the test waits for what must arrive (a bound for a loaded machine, not a latency)
WAIT = 30.0

MARTA = [
    ("Hey! I'm Marta, I lead the payments team at Fabrikam.", "Hi Marta!"),
    ("Quick one: how do I rebase a branch onto main?", "git rebase main"),
    ("Please don't pad answers with an introduction, just get to it.", "Understood."),
    ("We build everything with yarn, not npm.", "Noted."),
    ("Antworte bitte auf Deutsch.", "Alles klar."),
    ("My colleague Tom prefers tables, but I like bullet points.", "- ok"),
    ("If we ever moved to Rust, would the build get faster?", "Probably."),
    ("Make that last one shorter.", "Yes."),
    ("Actually, let's go back to English, my team reads these too.", "Sure."),
    ("Correction on the package manager: we switched to pnpm last month, use pnpm from now "
     "on.", "Got it."),
    ("I'm based in Lisbon.", "Nice."),
]
KENJI = [
    ("hi there, call me Ken", "Hi Ken."),
    ("i prefer detailed explanations with examples", "Sure, here is a long one..."),
    ("we're on Postgres and deploy to AWS", "Good to know."),
    ("no emojis pls", "OK."),
    ("what's the difference between a mutex and a semaphore?", "A mutex..."),
    ("my manager likes everything in German", "Noted."),
    ("give me times in JST", "Will do."),
    ("shorter answers are fine now", "OK."),
]
KENJI_EMAIL = ("Hi team,\n\nThe migration finished overnight.\n\nBest,\nKenji Watanabe\n"
               "Staff Engineer\nGlobex Corporation")

IN_PROMPT = {
    "marta": ("**identity/name**: Marta", "**identity/team**: payments",
              "**identity/employer**: Fabrikam", "**style/preamble**: skip",
              "**tooling/package_manager**: pnpm", "**style/language**: en",
              "**style/format**: bullets", "**identity/location**: Lisbon"),
    "kenji": ("**identity/preferred_name**: Ken", "**style/verbosity**: terse",
              "**style/examples**: include", "**tooling/database**: postgres",
              "**tooling/cloud**: aws", "**style/emoji**: none",
              "**identity/timezone**: Asia/Tokyo"),
}
NOT_IN_PROMPT = {
    "marta": ("yarn", "**style/language**: de", "tables", "rust", "verbosity"),
    "kenji": ("**style/verbosity**: detailed", "**style/language**", "Kenji Watanabe"),
}


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    # the learning services as deployed: the scheduler turns settled evidence into rebuilds
    async with learning_stack(servers.database, servers.settings()) as url:
        yield url


def _items(now: float) -> list[dict[str, Any]]:
    items = session_turns("marta", MARTA, start=now - 300, session_id="m1", channel="web",
                          reply_after=3.0, next_after=10.0)
    items += session_turns("kenji", KENJI, start=now - 250, session_id="k1", channel="slack",
                           reply_after=3.0, next_after=10.0)
    items.append({"type": "EmailObserved", "user_id": "kenji", "payload": {
        "message_id": "<k1@globex.example>", "direction": "sent",
        "from": "kenji@globex.example", "to": ["team@globex.example"],
        "subject": "Migration", "body": KENJI_EMAIL, "sent_at": now - 10}})
    return sorted(items, key=lambda i: i["payload"].get("user_at", i["payload"].get("sent_at")))


async def test_what_two_users_plainly_said_is_in_their_prompts(
        stack: str, pool: Any) -> None:
    key = await create_key(pool, unique("tn"))
    async with httpx.AsyncClient(base_url=stack, headers={"Authorization": f"Bearer {key}"},
                                 timeout=15, verify=TLS) as client:
        for item in _items(time.time()):
            response = await client.post("/v1/events", json=[item])
            assert response.status_code == 200, response.text
        last_ingest = time.monotonic()

        async def context(user: str) -> str:
            answer = await client.post("/v1/rpc/prompt.context", json={"user_id": user})
            assert answer.status_code == 200, answer.text
            return str(answer.json()["result"]["text"])

        texts = {"marta": "", "kenji": ""}
        while time.monotonic() - last_ingest < WAIT:
            texts = {user: await context(user) for user in texts}
            if all(all(line in texts[u] for line in IN_PROMPT[u]) for u in texts):
                break
            await asyncio.sleep(0.2)
        for user, text in texts.items():
            missing = [line for line in IN_PROMPT[user] if line not in text]
            assert not missing, (f"{user}: not in prompt.context {WAIT:g} s after ingest: "
                                 f"{missing}\n{text}")
            learned = text.split("## Tool-scoped rules")[0]
            present = [word for word in NOT_IN_PROMPT[user] if word in learned]
            assert not present, f"{user}: should not be in the prompt: {present}\n{text}"

        profile = (await client.get("/v1/users/kenji/profile.md")).text
        not_sure = profile.split("## Not yet sure", 1)[1].split("<!--", 1)[0]
        assert "Kenji Watanabe" in not_sure and "email signature" in not_sure, profile

        # the declared value is the user's setting; the once-stated ones are learned, not pinned
        answer = await client.post("/v1/rpc/learning.list_facets", json={"user_id": "marta"})
        facets = {(f["class"], f["key"]): f for f in answer.json()["result"]["facets"]}
        assert facets[("tooling", "package_manager")]["origin"] == "set_by_user"
        assert facets[("style", "language")]["origin"] == "stated"
        assert all(f["user_state"] == "auto" for f in facets.values())
        assert "*(set by the user)*" in texts["marta"].split("package_manager**: pnpm")[1][:25]
