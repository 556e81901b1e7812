"""A new user's first conversation, as written, through the gateway with every service running
(the scheduler on, no LLM): what they plainly said is in the prompt within seconds.

Eight realistic turns and reports for one user: "please keep answers short, no preamble", "Too
long. Shorter please, just code.", "No nested bullets please." three times, "Remember that I
work on the billing team", a sent email with a signature, and a Gmail profile sync with name,
email and timezone. Within 10 s of the last ingest `prompt.context` shows verbosity terse,
preamble skip, the nested-bullets veto, team billing, the synced name and timezone, and
PROFILE.md shows the same.
"""

from __future__ import annotations

import asyncio
import contextlib
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

EXPECTED_PROMPT = (
    "**style/verbosity**: terse",
    "**style/preamble**: skip",
    "**veto/format=nested-bullets**: banned",
    "**identity/team**: billing",
    "**identity/name**: Priya Raman",
    "**identity/timezone**: Europe/London",
)
EXPECTED_PROFILE = (
    "**verbosity**: terse",
    "**preamble**: skip",
    "**format=nested-bullets**: banned",
    "**team**: billing",
    "**name**: Priya Raman",
    "**timezone**: Europe/London",
)


@pytest_asyncio.fixture(scope="module")
async def stack(servers: ServerUrls) -> AsyncIterator[str]:
    # the learning services as deployed: the scheduler turns settled evidence into rebuilds
    async with learning_stack(servers.database, servers.settings()) as url:
        yield url


def conversation(user: str, now: float) -> list[dict[str, Any]]:
    """The eight reports, timed like a real session: each reply a few seconds after the
    message, each correction typed soon after the reply it corrects."""
    messages = [
        ("please keep answers short, no preamble", "Sure. Here is the plan in three steps..."),
        ("Too long. Shorter please, just code.", "def total(xs): return sum(xs)"),
        ("No nested bullets please.", "- one\n- two"),
        ("No nested bullets please.", "- one\n- two\n- three"),
        ("No nested bullets please.", "one, two, three"),
        ("Remember that I work on the billing team", "Noted."),
    ]
    items = session_turns(user, messages, start=now - 120.0, session_id="s1", channel="web",
                          reply_after=4.0, next_after=12.0)
    at = now - 120.0 + 12.0 * len(messages)
    items.append({"type": "EmailObserved", "user_id": user, "payload": {
        "message_id": "<m1@acme.example>", "direction": "sent",
        "from": "priya@acme.example", "to": ["sam@acme.example"], "subject": "Invoices",
        "body": "Hi Sam,\n\nThe March invoices are reconciled.\n\nThanks,\nPriya Raman\n"
                "Billing Engineer\nAcme Ltd",
        "sent_at": at}})
    items.append({"type": "ProviderProfileSynced", "user_id": user, "payload": {
        "toolkit": "gmail", "connection_id": "conn-gmail-1",
        "fields": {"name": "Priya Raman", "email": "priya@acme.example",
                   "timezone": "Europe/London"}}})
    return items


async def test_what_a_new_user_plainly_said_is_in_the_prompt_within_seconds(
        stack: str, pool: Any) -> None:
    tenant, user = unique("tn"), "priya"
    key = await create_key(pool, tenant)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=stack, headers=headers, timeout=15, verify=TLS) as client:
        for item in conversation(user, time.time()):
            response = await client.post("/v1/events", json=[item])
            assert response.status_code == 200, response.text
        last_ingest = time.monotonic()

        async def rpc(method: str, **params: Any) -> Any:
            answer = await client.post(f"/v1/rpc/{method}", json={"user_id": user, **params})
            assert answer.status_code == 200, answer.text
            return answer.json()["result"]

        prompt = profile = ""
        while time.monotonic() - last_ingest < 30.0:  # a bound for a loaded machine
            prompt = (await rpc("prompt.context"))["text"]
            if all(line in prompt for line in EXPECTED_PROMPT):
                break
            await asyncio.sleep(0.2)
        missing = [line for line in EXPECTED_PROMPT if line not in prompt]
        assert not missing, f"not in prompt.context 30 s after the last ingest: {missing}\n" \
                            f"{prompt}"
        profile = (await client.get(f"/v1/users/{user}/profile.md")).text
        assert [line for line in EXPECTED_PROFILE if line not in profile] == [], profile
        # what was declared is shown as set by the user, what the account says as reported
        facets = {(f["class"], f["key"]): f for f in (await rpc("learning.list_facets"))["facets"]}
        assert facets[("identity", "team")]["origin"] == "set_by_user"
        assert facets[("identity", "name")]["user_state"] == "auto"
        assert not [k for k in facets if k[0] == "goal"]  # "remember that I work on" is identity


class Chat:
    """One user's conversation through the gateway: what they say, one turn at a time, and
    what the gateway answers."""

    def __init__(self, client: httpx.AsyncClient, user: str) -> None:
        self.client, self.user = client, user
        self.now, self.turns = time.time(), 0

    async def say(self, message: str) -> None:
        self.turns += 1
        n = self.turns
        turn = {"type": "TurnRecorded", "user_id": self.user, "payload": {
            "session_id": "s1", "turn_id": f"t{n}", "channel": "web",
            "user_message": message, "assistant_message": "ok",
            "user_at": self.now - 100 + n, "assistant_at": self.now - 99 + n}}
        response = await self.client.post("/v1/events", json=[turn])
        assert response.status_code == 200, response.text

    async def rpc(self, method: str, **params: Any) -> Any:
        answer = await self.client.post(f"/v1/rpc/{method}",
                                        json={"user_id": self.user, **params})
        assert answer.status_code == 200, answer.text
        return answer.json()["result"]

    async def prompt_shows(self, line: str, present: bool = True, wait: float = 30.0) -> str:
        deadline = time.monotonic() + wait
        text = ""
        while time.monotonic() < deadline:
            text = (await self.rpc("prompt.context"))["text"]
            if (line in text) == present:
                return text
            await asyncio.sleep(0.2)
        raise AssertionError(f"{line!r} {'never appeared' if present else 'stayed'}:\n{text}")


@contextlib.asynccontextmanager
async def chat_of(stack: str, pool: Any, user: str) -> AsyncIterator[Chat]:
    """A chat with `user` of a tenant of its own."""
    key = await create_key(pool, unique("tn"))
    async with httpx.AsyncClient(base_url=stack, headers={"Authorization": f"Bearer {key}"},
                                 timeout=15, verify=TLS) as client:
        yield Chat(client, user)


async def test_a_later_declaration_replaces_an_earlier_one_and_forget_keeps_it_out(
        stack: str, pool: Any) -> None:
    async with chat_of(stack, pool, "lena") as chat:
        await chat.say("From now on, answer in German.")
        await chat.prompt_shows("**style/language**: de *(set by the user)*")
        await chat.say("Going forward please answer in French.")
        text = await chat.prompt_shows("**style/language**: fr *(set by the user)*")
        assert "**style/language**: de" not in text

        await chat.rpc("learning.forget_facet", **{"class": "style", "key": "language"})
        assert "style/language" not in (await chat.rpc("prompt.context"))["text"]
        for _ in range(3):  # said in passing, not declared: the user said forget it
            await chat.say("answer in French please")
        await asyncio.sleep(4.0)  # past the debounce: a rebuild ran on the new evidence
        assert "style/language" not in (await chat.rpc("prompt.context"))["text"]
        facet = await chat.rpc("learning.get_facet", **{"class": "style", "key": "language"})
        assert facet["user_state"] == "forgotten"


async def test_a_preference_taken_back_in_words_leaves_the_prompt(stack: str, pool: Any
                                                                   ) -> None:
    """Said once and taken back once ("Forget what I said about tables"), a preference leaves
    the prompt; what the user says in its place ("never mind the formal tone, casual is fine")
    takes it over. Before, a retraction stated nothing and the old value stayed for good."""
    async with chat_of(stack, pool, "noor") as chat:
        await chat.say("I prefer tables when you compare things.")
        await chat.say("Please keep a formal tone with me.")
        await chat.prompt_shows("**style/format**: tables")
        await chat.prompt_shows("**style/tone**: formal")
        await chat.say("Forget what I said about tables.")
        text = await chat.prompt_shows("**style/format**", present=False)
        assert "**style/tone**: formal" in text  # only what was taken back went
        await chat.say("Never mind the formal tone, casual is fine.")
        text = await chat.prompt_shows("**style/tone**: casual")
        assert "**style/tone**: formal" not in text
