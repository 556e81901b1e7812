"""Realistic material for the extractor benchmarks: a user's chat turns, mail and documents.

Deterministic from a seed, so every run sends the same text. Each user's stream is sessions of
chat turns (short questions and longer answers, a third of the turns calling tools, some replies
long enough to be complex turns), with mail in between (sent and received, some with a quoted
reply the extractor drops) and now and then a document ingested as a few consecutive chunks.
The sentences are the kind a developer's assistant sees; what they say does not matter to the
cost, their lengths do.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

from habitus.events import CATALOG, Event
from habitus.events.ingest import DocumentIngested, EmailObserved, ToolCall, TurnRecorded

ASKS = [
    "Can you look at why the billing migration test fails on CI but not locally?",
    "Draft a short reply to Priya saying the release moves to Thursday.",
    "What's the difference between a partial index and a filtered index in Postgres?",
    "Summarise the thread with the vendor about the renewal.",
    "Please keep it short, I only need the command.",
    "I use Bun for scripts here, not npm.",
    "We moved the marketing site to Astro last month, so check the Astro docs first.",
    "Book 30 minutes with Tom next week to go over the roadmap.",
    "Why does the worker keep restarting after the deploy?",
    "Rewrite this paragraph so it sounds less formal.",
    "How do I rebase my branch onto main without losing the fixup commits?",
    "Find the invoice from October and forward it to accounting.",
    "Explain the stack trace below in plain words.",
    "I prefer tables over long bullet lists when you compare options.",
    "The goal for this quarter is to ship the billing migration before March.",
    "Don't use the staging cluster for this, it is shared with the data team.",
    "Can you turn these notes into an agenda for Monday's standup?",
    "What did we decide about the retry policy in last week's review?",
    "Write a unit test for the date parser, the one that handles time zones.",
    "Check my calendar and tell me when I'm free on Wednesday afternoon.",
]
DETAILS = [
    "The error only shows up when the job runs after midnight UTC.",
    "It started after we upgraded the driver to the new major version.",
    "I'm on my phone so keep the answer brief.",
    "Use British spelling, the client is in London.",
    "Here is the log: connection reset by peer, then a timeout after 30 seconds.",
    "We tried increasing the pool size already and it did not help.",
    "This is for the board deck, so no jargon.",
    "Last time you suggested a feature flag and that worked well.",
    "The repository is the monorepo, the service lives under services/billing.",
    "I'll be offline from Friday, so anything urgent should go to Sam.",
]
ANSWERS = [
    "The test fails on CI because the container's clock is in UTC while your laptop is in "
    "local time, so the cut-off date lands on the previous day.",
    "Here is a short reply you can send as is, or adjust the second sentence if you want to "
    "give a reason for the delay.",
    "A partial index only covers the rows that match its WHERE clause, which keeps it small "
    "and makes writes to the other rows cheaper.",
    "The vendor offered a 12% discount for a two-year term and asked for an answer by the end "
    "of the month; legal still has to review the liability clause.",
    "Run `bun run build` from the repository root; it reads the same scripts as before.",
    "I checked the Astro documentation: content collections replace the old glob imports, so "
    "the blog pages need a small change.",
    "Tom is free on Tuesday at 10:00 and on Thursday at 15:30; I can send the invitation once "
    "you pick one.",
    "The worker restarts because its health check times out while it warms the cache, so the "
    "orchestrator kills it before it is ready.",
    "Rebase with `git rebase -i --autosquash main`; the fixup commits are folded into the "
    "commits they fix, in order.",
    "I found the October invoice in your inbox (from the hosting provider, 1,240 EUR) and "
    "forwarded it to accounting with a one-line note.",
    "The stack trace says the parser received an empty string where it expected a date, which "
    "happens when the CSV has a trailing blank line.",
    "Here is the comparison as a table, with the cost, the migration effort and the risk of "
    "each option side by side.",
    "To keep the March date, the schema change has to land by mid-February so there are two "
    "weeks of dual writes before the switch.",
    "I'll use the dedicated test cluster instead; it has the same versions as production.",
    "Agenda for Monday: the release status, the on-call handover, the retry policy follow-up "
    "and ten minutes for open questions.",
    "In the review you agreed on three retries with exponential backoff, capped at thirty "
    "seconds, and an alert after the second failure in an hour.",
    "The test below covers the daylight-saving switch, a date without an offset and an offset "
    "with minutes, which is the case that broke last time.",
    "You are free on Wednesday from 14:00 to 16:30; the 17:00 slot is taken by the vendor "
    "call.",
    "If the pool size did not help, the likely cause is a long transaction holding locks; the "
    "query below lists the sessions that have been idle in a transaction.",
    "I kept the wording plain and removed the acronyms, so it reads well on a slide.",
    "A feature flag would work here too: ship the new path dark, compare the outputs for a "
    "week, then switch.",
    "Noted, I'll route anything urgent to Sam while you are away.",
]
TOOLS = ["search_email", "calendar", "shell", "browser", "github", "send_email", "files"]
EMAIL_SUBJECTS = [
    "Renewal terms", "Release moved to Thursday", "Invoice October", "Roadmap review",
    "Re: retry policy", "Offsite dates", "Access to the staging cluster", "Weekly update",
]
EMAIL_LINES = [
    "Thanks for the quick turnaround on this.",
    "Could you confirm the numbers before Friday?",
    "I've attached the updated draft with the changes we discussed.",
    "We are still waiting for legal to sign off on the liability clause.",
    "Let me know if Tuesday at 10 works for you, otherwise Thursday afternoon.",
    "The migration is on track; the only open item is the backfill of old invoices.",
    "Please use the shared folder rather than email attachments from now on.",
    "I'll be out next week, Sam is covering for me.",
    "Our offer stands at a 12% discount for a two-year commitment.",
    "Can we move the sync to 30 minutes instead of an hour?",
]
DOC_LINES = [
    "The billing service owns invoices, payments and refunds; it exposes them through an "
    "internal API and publishes an event for every state change.",
    "During the migration both the old and the new tables are written, and a nightly job "
    "compares them and reports any difference.",
    "Rollback means switching the read path back; the dual writes continue until the "
    "difference report has been empty for a week.",
    "Every tenant is migrated separately, smallest first, so a problem shows up on a small "
    "account before it reaches a large one.",
    "The on-call engineer can pause the migration with a single flag; nothing is lost, the "
    "job resumes where it stopped.",
    "Invoices older than seven years are archived and are not part of the migration.",
    "Performance targets: the p99 of the invoice list stays under 200 ms and the migration "
    "adds no more than 10% load on the primary.",
    "Open questions: who signs off on the switch, and whether the finance team needs a "
    "freeze on refunds during the last week.",
]


def _text(rng: random.Random, pool: list[str], lo: int, hi: int) -> str:
    return " ".join(rng.choice(pool) for _ in range(rng.randint(lo, hi)))


class UserStream:
    """One user's material as ingest events, in the order the user produces it."""

    def __init__(self, tenant: str, user: str, seed: int):
        self.tenant, self.user = tenant, user
        self.rng = random.Random(seed)
        self.n = 0

    def _event(self, payload: Any, at: float) -> Event[Any]:
        return CATALOG.new(payload, tenant_id=self.tenant, user_id=self.user,
                           producer="bench", occurred_at=at)

    def turn(self, session: str) -> Event[Any]:
        rng, at = self.rng, time.time()
        self.n += 1
        ask = rng.choice(ASKS) + (" " + _text(rng, DETAILS, 1, 3) if rng.random() < 0.4 else "")
        # most answers are a few sentences; one in four is long (a complex turn)
        answer = _text(rng, ANSWERS, 5, 12) if rng.random() < 0.25 else _text(rng, ANSWERS, 1, 3)
        calls = ([ToolCall(tool_name=t, ok=rng.random() > 0.1,
                           output_summary="x" * rng.randint(50, 800))
                  for t in rng.sample(TOOLS, rng.randint(1, 3))]
                 if rng.random() < 0.3 else [])
        return self._event(TurnRecorded(
            session_id=session, turn_id=f"t{self.n}", channel="chat", user_message=ask,
            assistant_message=answer, user_at=at, assistant_at=at + 2.0, tool_calls=calls), at)

    def email(self) -> Event[Any]:
        rng, at = self.rng, time.time()
        self.n += 1
        sent = rng.random() < 0.4
        body = "Hi,\n\n" + _text(rng, EMAIL_LINES, 2, 6) + "\n\nBest,\n" + (
            "Dana" if sent else "Priya")
        if rng.random() < 0.4:  # a reply quoting the previous message, which is dropped
            body += "\n\nOn Mon, 3 Nov 2025 at 09:12, Tom wrote:\n> " + "\n> ".join(
                rng.sample(EMAIL_LINES, 3))
        me, other = f"{self.user}@example.com", "priya@example.org"
        return self._event(EmailObserved.model_validate({
            "message_id": f"<m{self.n}.{self.user}@example.com>",
            "direction": "sent" if sent else "received",
            "from": me if sent else other, "to": [other if sent else me],
            "subject": rng.choice(EMAIL_SUBJECTS), "body": body, "sent_at": at}), at)

    def document(self, doc: int) -> list[Event[Any]]:
        rng, at = self.rng, time.time()
        return [self._event(DocumentIngested(
            source_id=f"doc-{self.user}-{doc}", chunk_id=f"chunk-{i}",
            text=_text(rng, DOC_LINES, 6, 14)), at) for i in range(rng.randint(2, 5))]

    def events(self) -> Iterator[Event[Any]]:
        """Endless: sessions of 10 to 60 turns; about 12 % mail and 5 % document chunks."""
        session, docs = 0, 0
        while True:
            session += 1
            for _ in range(self.rng.randint(10, 60)):
                roll = self.rng.random()
                if roll < 0.12:
                    yield self.email()
                elif roll < 0.135:
                    docs += 1
                    yield from self.document(docs)
                else:
                    yield self.turn(f"s{session}")


def material(tenant: str, users: int, per_user: int, seed: int = 13) -> list[list[Event[Any]]]:
    """`per_user` events for each of `users` users (a document may end a stream early)."""
    out = []
    for u in range(users):
        stream = UserStream(tenant, f"u{u}", seed * 1000 + u).events()
        out.append([next(stream) for _ in range(per_user)])
    return out
