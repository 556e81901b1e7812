"""The traffic of a load run: what agents of several tenants report, and what they read back.

Everything here is pure and seeded: the same `Plan` and stream number give the same items in
the same order (only their times follow the clock), so two runs of `make load` send the same
words and a regression in a report is the system's, not the dice's. Items are built with the
client's own builders (`habitus.client.items`), so the load speaks exactly the v1 contract an
integrator's agent does, not a hand-written approximation of it.

Who sends is skewed the way a shared platform's traffic is: a few tenants and, within each, a
few users produce most of it (Zipf weights, `1/rank**s`), so hot users' caches and rows are hit
again and again while a long tail stays cold.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from typing import Any

from habitus.client.items import (
    Item,
    document,
    email,
    feedback,
    provider_profile,
    tool_call,
    trace,
    trace_step,
    turn,
)

#: each ingest item's type, as a share of all items (a chat-heavy agent platform)
ITEM_SHARES: Mapping[str, float] = {
    "turn": 0.58, "trace": 0.14, "email": 0.10, "document": 0.08, "feedback": 0.08,
    "provider_profile": 0.02,
}
#: of the turns: the share that states a preference, corrects the last answer, calls tools
STATEMENT_SHARE, CORRECTION_SHARE, TOOL_SHARE = 0.22, 0.08, 0.25
#: each read, as a share of all reads (what an agent asks before and around its turns)
READ_SHARES: Mapping[str, float] = {
    "prompt.context": 0.6, "learning.list_facets": 0.15, "memory.tool_rule_list": 0.15,
    "habits.list": 0.10,
}

STATEMENTS = (
    "Please keep answers short.",
    "I use uv, not poetry.",
    "No preamble, just the code.",
    "I'd rather you skip the intro and keep answers short.",
    "Always answer in British English.",
    "I work in Python 3.11 mostly, sometimes Rust.",
    "Please use bullet points, not long paragraphs.",
    "Never use emoji with me.",
    "I'm based in Berlin, so use metric units.",
    "I prefer tabs over spaces in Go code.",
    "Don't suggest poetry, we standardised on uv.",
    "Write commit messages in the imperative mood.",
    "I use neovim, not VS Code.",
    "Reply in German when I write in German.",
    "Keep the tone formal in anything going to customers.",
    "I'm a staff engineer on the payments team.",
    "Use pytest, never unittest, for new tests.",
    "Prefer SQL over an ORM when you show me queries.",
)
CORRECTIONS = (
    "Shorter, please.",
    "Too long. Just the command.",
    "No, I said uv, not poetry.",
    "Skip the explanation next time.",
    "Less formal, this is for the team chat.",
    "Can you drop the intro?",
)
TASKS = (
    ("Can you write a function that parses this CSV into dicts?",
     "def parse(path):\n    with open(path) as f:\n        return list(csv.DictReader(f))"),
    ("Why does this query do a sequential scan?",
     "The filter casts the column, so the index cannot be used; compare on the raw type."),
    ("Summarise the incident notes from yesterday.",
     "The deploy at 14:02 raised p99 latency; the rollback at 14:20 restored it."),
    ("Draft a reply to Sarah about the Q3 roadmap.",
     "Hi Sarah, thanks for the draft. The Q3 items look right; I'd move search to Q4."),
    ("What's the difference between a mutex and a semaphore?",
     "A mutex admits one holder and is released by it; a semaphore counts permits."),
    ("Rename the variable to something clearer.",
     "Renamed `tmp` to `pending_invoices` in all three places."),
    ("Run the tests and tell me what fails.",
     "Two failures in test_billing.py: both assert on a rounded total."),
    ("Translate this paragraph into French.",
     "Voici la traduction du paragraphe, en gardant le ton de l'original."),
    ("Explain what this regex matches.",
     "It matches an ISO date, optionally followed by a time with seconds."),
    ("Set up a GitHub Action that runs ruff.",
     "Added .github/workflows/lint.yml running `ruff check .` on every push."),
)
TOOLS = (
    ("shell", "permission denied"), ("shell", "command timed out after 30s"),
    ("python", "ModuleNotFoundError: No module named 'pandas'"), ("web_search", None),
    ("send_email", None), ("git", "merge conflict in README.md"), ("calendar", None),
)
SIGNATURES = (
    "Best,\n{name}\nStaff Engineer, Acme Payments",
    "Thanks,\n{name}\nHead of Data | Northwind",
    "Cheers,\n{name}\nSent from my phone",
    "Kind regards,\n{name}\nProduct Manager, Globex, Berlin",
)
EMAIL_BODIES = (
    "Quick note: the migration is done and the dashboards are green again.",
    "Could we move Thursday's review to Friday morning? I'm out on Thursday.",
    "Attached are the figures for October. Revenue is up 4% on September.",
    "Thanks for the fast turnaround on the fix, the customer confirmed it works.",
)
DOCUMENTS = (
    "Our services are deployed with uv-managed environments; poetry is not used anywhere.",
    "Style guide: answers to customers are formal, short, and never use emoji.",
    "Runbook: when the queue backs up, check the consumer's pending count first.",
    "Architecture notes: every service owns one schema and writes no other.",
    "Meeting notes: we agreed to ship the billing export in two steps, CSV first.",
)
QUERIES = (
    "Summarise this pull request.", "Write a SQL query for monthly active users.",
    "Classify this support ticket.", "Draft release notes for version 2.3.",
    "Find the flaky test in this log.", "Answer the customer's refund question.",
)
MODELS = ("gpt-4o-mini", "qwen3:8b", "claude-haiku", "llama3.1:70b")
AGENTS = ("coder", "mail", "support", "analyst")
NAMES = ("Dana Lee", "Sam Ortiz", "Priya Nair", "Jonas Weber", "Mei Chen", "Ola Nowak")


@dataclass(frozen=True)
class Plan:
    """What a run sends: who (tenants, users, their skew), how much per request, and the seed.

    It travels from `run` to the locust process as one environment variable (`to_env`), so
    the two processes cannot disagree about it."""

    prefix: str = "load"
    tenants: int = 4
    users_per_tenant: int = 40
    zipf: float = 1.1
    batch: int = 20
    seed: int = 7
    item_shares: Mapping[str, float] = field(default_factory=lambda: dict(ITEM_SHARES))
    read_shares: Mapping[str, float] = field(default_factory=lambda: dict(READ_SHARES))

    def tenant_ids(self) -> list[str]:
        return [f"{self.prefix}-t{i}" for i in range(self.tenants)]

    def user_ids(self) -> list[str]:
        return [f"u{j:03d}" for j in range(self.users_per_tenant)]

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> Plan:
        return cls(**json.loads(text))


def zipf_weights(n: int, s: float) -> list[float]:
    """Weights of ranks 1..n, proportional to 1/rank**s and summing to 1 (s=0: uniform)."""
    if n < 1:
        raise ValueError("need at least one rank")
    raw = [1.0 / (rank ** s) for rank in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


class _Picker:
    """A weighted choice over fixed options, with the cumulative weights computed once."""

    def __init__(self, options: Sequence[Any], weights: Sequence[float]) -> None:
        if len(options) != len(weights) or not options:
            raise ValueError("options and weights must be non-empty and of one length")
        self.options = list(options)
        self.cumulative = list(accumulate(weights))

    def __call__(self, rng: random.Random) -> Any:
        return rng.choices(self.options, cum_weights=self.cumulative, k=1)[0]


@dataclass
class _Session:
    """What one user's agent remembers: its session and when it last answered (corrections
    cite it), and its recent traces and turns (feedback is about them)."""

    session: int = 0
    last_answer_at: float | None = None
    traces: list[str] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)


class Mix:
    """The items and reads of one sender (a locust user), reproducible from (plan, stream)."""

    def __init__(self, plan: Plan, stream: int = 0,
                 clock: Callable[[], float] | None = None) -> None:
        self.plan = plan
        self.rng = random.Random(f"{plan.seed}:{stream}")
        self.stream = stream
        self.clock = clock or time.time
        self._tenant = _Picker(plan.tenant_ids(), zipf_weights(plan.tenants, plan.zipf))
        self._user = _Picker(plan.user_ids(), zipf_weights(plan.users_per_tenant, plan.zipf))
        self._kind = _Picker(list(plan.item_shares), list(plan.item_shares.values()))
        self._read = _Picker(list(plan.read_shares), list(plan.read_shares.values()))
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._count = 0

    # -- who ----------------------------------------------------------------------------------

    def tenant(self) -> str:
        return str(self._tenant(self.rng))

    def user(self) -> str:
        return str(self._user(self.rng))

    def _state(self, tenant: str, user: str) -> _Session:
        return self._sessions.setdefault((tenant, user), _Session())

    def _id(self, kind: str) -> str:
        self._count += 1
        return f"{kind}-{self.stream}-{self._count}-{self.rng.getrandbits(32):08x}"

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    # -- what ---------------------------------------------------------------------------------

    def batch(self, tenant: str, size: int | None = None) -> list[dict[str, Any]]:
        """One `POST /v1/events` body of `tenant`: `size` (the plan's batch) items, as JSON."""
        return [self.item(tenant).to_json() for _ in range(size or self.plan.batch)]

    def item(self, tenant: str) -> Item:
        user = self.user()
        kind = str(self._kind(self.rng))
        state = self._state(tenant, user)
        if kind == "feedback" and not (state.traces or state.turns):
            kind = "trace"  # nothing to score yet: the run it would score comes first
        build = getattr(self, f"_{kind}")
        item: Item = build(user, state)
        return item

    def _turn(self, user: str, state: _Session) -> Item:
        rng, now = self.rng, self.clock()
        if rng.random() < 0.1:
            state.session, state.last_answer_at = state.session + 1, None
        asked = now - round(rng.uniform(0.5, 6.0), 3)  # the answer is sent now
        roll = rng.random()
        previous = None
        if roll < CORRECTION_SHARE and state.last_answer_at is not None:
            message, answer = rng.choice(CORRECTIONS), "Understood."
            previous = min(state.last_answer_at, asked - 0.5)
        elif roll < CORRECTION_SHARE + STATEMENT_SHARE:
            task, answer = rng.choice(TASKS)
            message = f"{rng.choice(STATEMENTS)} {task}"
        else:
            message, answer = rng.choice(TASKS)
        calls = []
        if rng.random() < TOOL_SHARE:
            for _ in range(rng.randint(1, 3)):
                name, failure = rng.choice(TOOLS)
                calls.append(tool_call(name, ok=failure is None, output_summary=failure,
                                       duration_seconds=round(rng.uniform(0.05, 4.0), 3)))
        turn_id = self._id("turn")
        state.last_answer_at = now
        state.turns = [*state.turns[-4:], turn_id]
        return turn(user, message, answer, session_id=f"s{self.stream}-{state.session}",
                    turn_id=turn_id, channel=rng.choice(("chat", "cli", "slack")), at=asked,
                    answered_at=now, previous_answer_at=previous, tool_calls=calls)

    def _trace(self, user: str, state: _Session) -> Item:
        rng, now = self.rng, self.clock()
        latency = round(rng.uniform(0.4, 12.0), 3)
        trace_id = self._id("trace")
        state.traces = [*state.traces[-4:], trace_id]
        steps = [trace_step("llm", timestamp=now - latency, duration_seconds=latency * 0.7),
                 trace_step("tool", timestamp=now - latency * 0.3,
                            duration_seconds=latency * 0.2,
                            input={"tool": rng.choice(TOOLS)[0]})]
        return trace(user, rng.choice(QUERIES), "Done.", agent=rng.choice(AGENTS),
                     model=rng.choice(MODELS), engine="custom", trace_id=trace_id, steps=steps,
                     outcome=rng.choice(("success", "success", "success", "failure")),
                     ended_at=now, latency_seconds=latency,
                     total_tokens=rng.randint(200, 6000),
                     cost_usd=round(rng.uniform(0.0001, 0.05), 5))

    def _feedback(self, user: str, state: _Session) -> Item:
        rng = self.rng
        score = round(rng.random(), 2)
        if state.traces and (not state.turns or rng.random() < 0.7):
            return feedback(user, score, trace_id=rng.choice(state.traces),
                            event_id=self._uuid())
        return feedback(user, score, turn_id=rng.choice(state.turns), event_id=self._uuid())

    def _email(self, user: str, state: _Session) -> Item:
        rng = self.rng
        name = rng.choice(NAMES)
        body = f"{rng.choice(EMAIL_BODIES)}\n\n{rng.choice(SIGNATURES).format(name=name)}"
        sent = rng.random() < 0.6
        own, other = f"{user}@example.com", f"{rng.choice(NAMES).split()[0].lower()}@example.org"
        return email(user, sender=own if sent else other, to=other if sent else own,
                     body=body, subject=rng.choice(("Re: roadmap", "Figures", "Thursday")),
                     direction="sent" if sent else "received",
                     message_id=f"<{self._id('mail')}@example.com>",
                     sent_at=self.clock() - rng.uniform(0, 3600))

    def _document(self, user: str, state: _Session) -> Item:
        rng = self.rng
        text = " ".join(rng.sample(DOCUMENTS, k=rng.randint(1, 3)))
        return document(user, text, source_id=f"doc-{rng.randint(1, 20)}",
                        chunk_id=self._id("chunk"))

    def _provider_profile(self, user: str, state: _Session) -> Item:
        rng = self.rng
        return provider_profile(user, "gmail", f"conn-{user}", email=f"{user}@example.com",
                                name=rng.choice(NAMES),
                                timezone=rng.choice(("Europe/Berlin", "America/New_York")),
                                synced_at=self.clock())

    # -- reads --------------------------------------------------------------------------------

    def read(self, tenant: str) -> tuple[str, dict[str, Any]]:
        """One read an agent makes: an RPC method and its parameters (`POST /v1/rpc/<method>`)."""
        method = str(self._read(self.rng))
        params: dict[str, Any] = {"user_id": self.user()}
        if method == "prompt.context" and self.rng.random() < 0.2:
            params["request"] = self.rng.choice(TASKS)[0]  # also asks habits.select
        return method, params


def count_types(items: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many items of each type a body holds (what a batch is made of)."""
    counts: dict[str, int] = {}
    for item in items:
        counts[str(item["type"])] = counts.get(str(item["type"]), 0) + 1
    return counts
