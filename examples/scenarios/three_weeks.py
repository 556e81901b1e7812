"""Three weeks of two companies' agents reporting to Habitus, and what it should learn.

`build(now)` returns the `Scenario`: per tenant, per user, the items an agent sends to
`POST /v1/events` (chat turns with corrections and plain statements, sent and received email
with signatures, provider syncs, documents, tool calls with failures and edicts, traces of
several models with feedback), timed over the three weeks before `now`; the commands a person
gives afterwards (habits declared, Analyze run, a suggestion approved); and, next to each story,
what the services learn from it: facets and their state, PROFILE.md lines, tool rules, habits
with their review state, the habit that steers a sample request, and the tenant's routing.

The expectations were checked against the services' own rules (docs/producers.md,
docs/learning.md, docs/tool_memory.md, docs/habits.md, docs/trace_router.md) and by running
it (`tests/e2e/test_scenario.py`). The arithmetic behind a facet's state is the learning
cache's: stability = sum over cue families of weight x 2^(-age/half-life) x ln(1 + n), doubled
when any evidence is explicit; Active from 1.5, Provisional from 0.7.

Facets, habits and extracted facets marked `llm` depend on the model's answers: the bundled
`scripted_model` gives exactly these; a real model (`HABITUS_LLM_*`) may find others.

Long on purpose: one story of two tenants and four users, with what each should learn beside
it, read top to bottom (the demo and tests/e2e/test_scenario.py replay it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DAY = 86_400.0


@dataclass(frozen=True)
class Turn:
    message: str
    reply: str
    #: seconds after the previous reply (under 30: read as a correction of it)
    after: float = 120.0
    tools: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class FacetExpectation:
    class_: str
    key: str
    value: str
    #: active or provisional
    state: str
    #: set by the user (a standing declaration, a confirmation, an update or a pin); a facet the
    #: user stated once is not, nor is one a provider reports
    set_by_user: bool = False
    #: learned from the model's answer (the extractor)
    llm: bool = False
    why: str = ""


@dataclass(frozen=True)
class RuleExpectation:
    tool: str
    priority: str
    #: a phrase of the rule's text
    contains: str
    tag: str


@dataclass(frozen=True)
class HabitExpectation:
    when: str
    do: str
    status: str
    review_status: str
    origin: str
    llm: bool = False


@dataclass(frozen=True)
class Proposal:
    """A habit the scripted model proposes when Analyze shows it observations holding these
    quotes (one per supporting observation)."""

    when: str
    do: str
    quotes: tuple[str, ...]
    confidence_bp: int = 8000


@dataclass(frozen=True)
class Extraction:
    """A facet the scripted model finds in material holding `quote`."""

    quote: str
    class_: str
    key: str
    value: str
    cue: str = "explicit"


@dataclass(frozen=True)
class Routing:
    query: str
    models: tuple[str, ...]
    query_class: str
    #: what the learned policy chooses once the traces are in
    learned: str
    #: what the heuristic would have chosen (the traces changed the answer)
    heuristic: str


@dataclass
class Expected:
    facets: list[FacetExpectation] = field(default_factory=list)
    #: (class, key, value) that must not be learned (someone else's signature, ...)
    absent: list[tuple[str, str, str]] = field(default_factory=list)
    #: lines PROFILE.md shows
    profile: list[str] = field(default_factory=list)
    rules: list[RuleExpectation] = field(default_factory=list)
    habits: list[HabitExpectation] = field(default_factory=list)
    #: `steered_by` of `prompt.context` for the sample request
    steered_by: list[str] = field(default_factory=list)
    #: how many traces `traces.route_stats` counts for the user
    traces: int = 0


@dataclass
class UserStory:
    user_id: str
    name: str
    persona: str
    story: str
    items: list[dict[str, Any]]
    expected: Expected
    declare: list[tuple[str, str]] = field(default_factory=list)
    #: suggestions a person approves after Analyze (by condition)
    approve: list[str] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)
    extractions: list[Extraction] = field(default_factory=list)
    #: a request for `prompt.context`, with the tools the agent offers
    sample_request: str = ""
    tools: tuple[str, ...] = ()
    #: a facet `learning.explain_facet` is shown for
    explain: tuple[str, str] = ("style", "verbosity")
    #: strings only this user's data holds (tenant isolation is checked against them)
    private: tuple[str, ...] = ()


@dataclass
class TenantStory:
    tenant_id: str
    company: str
    users: list[UserStory]
    routing: list[Routing]
    #: judge: a condition holds for a request holding one of its keywords
    judge: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: habits.configure before anything is sent (turns older than 7 days are kept for Analyze)
    retention_days: int = 30


@dataclass
class Scenario:
    now: float
    tenants: list[TenantStory]

    def users(self) -> list[tuple[TenantStory, UserStory]]:
        return [(t, u) for t in self.tenants for u in t.users]

    def items(self, tenant: TenantStory) -> list[dict[str, Any]]:
        """The tenant's items in the order they happened (as the agents would send them)."""
        items = [i for u in tenant.users for i in u.items]
        return sorted(items, key=_when)

    def proposals(self) -> list[Proposal]:
        return [p for _, u in self.users() for p in u.proposals]

    def extractions(self) -> list[Extraction]:
        return [e for _, u in self.users() for e in u.extractions]

    def judge(self) -> dict[str, tuple[str, ...]]:
        return {c: k for t in self.tenants for c, k in t.judge.items()}


def _when(item: dict[str, Any]) -> float:
    p = item["payload"]
    for key in ("user_at", "sent_at", "started_at", "synced_at"):
        if key in p:
            return float(p[key])
    return float(item.get("occurred_at", 0.0))


class _Clock:
    def __init__(self, now: float):
        self.now = now

    def at(self, days_ago: float, minutes: float = 0.0) -> float:
        """A time `days_ago` days before now, three hours before the hour `now` is at, plus
        `minutes` (so every session of a day is on one UTC day, and before now)."""
        return round(self.now - days_ago * DAY - 3 * 3600 + minutes * 60, 3)


def _session(user: str, session_id: str, start: float, turns: Sequence[Turn],
             channel: str = "chat") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    at, previous = start, None
    for n, turn in enumerate(turns, start=1):
        if previous is not None:
            at = previous + turn.after
        payload: dict[str, Any] = {
            "session_id": session_id, "turn_id": f"t{n}", "channel": channel,
            "user_message": turn.message, "assistant_message": turn.reply,
            "user_at": at, "assistant_at": at + 4.0, "tool_calls": list(turn.tools),
        }
        if previous is not None:
            payload["previous_assistant_at"] = previous
        items.append({"type": "TurnRecorded", "user_id": user, "payload": payload})
        previous = at + 4.0
    return items


def _email(user: str, mid: str, direction: str, sender: str, to: str, subject: str,
           body: str, at: float) -> dict[str, Any]:
    return {"type": "EmailObserved", "user_id": user, "payload": {
        "message_id": f"<{mid}@mail.example>", "direction": direction, "from": sender,
        "to": [to], "subject": subject, "body": body, "sent_at": at}}


def _sync(user: str, toolkit: str, connection: str, at: float, **fields: str
          ) -> dict[str, Any]:
    return {"type": "ProviderProfileSynced", "user_id": user, "occurred_at": at, "payload": {
        "toolkit": toolkit, "connection_id": connection, "fields": fields, "synced_at": at}}


def _document(user: str, source: str, chunk: str, text: str, at: float) -> dict[str, Any]:
    return {"type": "DocumentIngested", "user_id": user, "occurred_at": at, "payload": {
        "source_id": source, "chunk_id": chunk, "text": text}}


def _trace(user: str, trace_id: str, agent: str, model: str, query: str, at: float, *,
           outcome: str, latency: float, tokens: int, feedback: float | None = None,
           tools: Sequence[str] = ()) -> dict[str, Any]:
    steps = [{"step_type": "llm", "timestamp": at, "duration_seconds": latency / 2,
              "input": {"model": model}}]
    steps += [{"step_type": "tool", "timestamp": at + 0.1 * (n + 1), "duration_seconds": 0.2,
               "input": {"tool": tool}} for n, tool in enumerate(tools)]
    payload: dict[str, Any] = {
        "trace_id": trace_id, "query": query, "agent": agent, "model": model,
        "engine": "ollama", "result": "done", "outcome": outcome, "started_at": at,
        "ended_at": at + latency, "total_tokens": tokens, "total_latency_seconds": latency,
        "steps": steps}
    if feedback is not None:
        payload["feedback"] = feedback
    return {"type": "TraceCompleted", "user_id": user, "payload": payload}


def _feedback(user: str, trace_id: str, score: float, at: float) -> dict[str, Any]:
    return {"type": "FeedbackGiven", "user_id": user, "occurred_at": at,
            "payload": {"trace_id": trace_id, "score": score}}


def _call(tool: str, ok: bool = True, summary: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"tool_name": tool, "ok": ok}
    if summary:
        call["output_summary"] = summary
    return call


# -- the stories ---------------------------------------------------------------------------


def _sam(c: _Clock, user: str = "sam") -> UserStory:
    """A terse platform engineer: corrects long answers within seconds, states his tools once
    or twice, says once for good that he wants no preamble."""
    long_reply = ("Sure! There are many ways to write a deploy script, and it is worth first "
                  "considering the environments, the rollback story and the secrets...")
    items = _session(user, "sam-1", c.at(20), [
        Turn("Can you help me write the deploy script for the billing service?", long_reply),
        Turn("Too long. Shorter please, just code.", "#!/bin/sh\nset -e\n./build && ./ship",
             after=8),
        Turn("I use pnpm. Add the build step.", "pnpm build && ./ship"),
        Turn("We deploy with Argo CD on Kubernetes.", "Noted: Argo CD."),
    ])
    items += _session(user, "sam-2", c.at(12), [
        Turn("We use Postgres. How do I add a column without locking the table?", long_reply),
        Turn("too long", "ALTER TABLE ... ADD COLUMN ... (no default, then backfill)",
             after=10),
    ])
    items += _session(user, "sam-3", c.at(10), [
        Turn("From now on, no preamble.", "Understood."),
    ])
    items += _session(user, "sam-4", c.at(6), [
        Turn("Here is a stack trace from CI: TypeError in parse_line. Fix first, then the "
             "cause, like last time.", "Fix: guard the empty line. Cause: the trailing "
                                       "newline."),
    ])
    items += _session(user, "sam-5", c.at(5), [
        Turn("Don't run migrations against the production database.",
             "Understood, staging only.", tools=(_call("bash"),)),
        Turn("Run the tests again.", "The test runner timed out twice, then passed.",
             tools=(_call("run_tests", False, "timed out after 60s"),
                    _call("run_tests", False, "timed out after 60s"), _call("run_tests"))),
    ])
    items += _session(user, "sam-6", c.at(4), [
        Turn("Another stack trace from the billing worker: KeyError 'amount'. Fix first "
             "please.", "Fix: default the amount to 0. Cause: old events lack it."),
    ])
    items += _session(user, "sam-7", c.at(2), [
        Turn("I use pnpm. Update the lockfile script for it.", long_reply),
        Turn("Shorter please", "pnpm install --frozen-lockfile", after=12),
    ])
    items += _session(user, "sam-8", c.at(1), [
        Turn("One more stack trace from the nightly job: timeout in fetch_rates. Fix "
             "first, cause after.", "Fix: raise the timeout to 30 s. Cause: the rates API "
                                    "got slower."),
        Turn("Can you do a code review of my retry helper?",
             "Missing tests: the give-up path. Otherwise fine."),
    ])
    items.append(_sync(user, "github", "gh-sam", c.at(20, -30), name="Sam Okafor",
                       email="sam@acme.example", timezone="America/Chicago"))
    items.append(_email(user, "sam-1", "sent", "sam@acme.example", "ops@acme.example",
                        "Billing deploy moves", "Hi all,\n\nThe billing deploy moves to "
                        "Thursday.\n\nThanks,\nSam Okafor\nStaff Engineer\nAcme", c.at(8)))
    items.append(_email(user, "sam-2", "received", "sarah@acme.example", "sam@acme.example",
                        "Re: Billing deploy moves", "Thursday works.\n\nBest,\nSarah Lee\n"
                        "VP Finance\nAcme", c.at(7)))
    code_ok = ["def parse(line): return line.split(',')[1]  # fix the IndexError",
               "Why does this fail: for i in range(len(xs)): xs.pop(i)",
               "def retry(fn, n=3):\n    for _ in range(n): fn()  # add backoff",
               "class Cache:\n    def get(self, k): ...  # make it thread-safe",
               "SELECT * FROM invoices WHERE paid = false; -- make it use the index",
               "const total = items.reduce((a, b) => a + b.price) // wrong initial value"]
    for n, query in enumerate(code_ok):
        items.append(_trace(user, f"sam-ok-{n}", "coder", "qwen2.5-coder:7b", query,
                            c.at(19 - 3 * n), outcome="success", latency=2.1, tokens=640,
                            tools=("bash", "run_tests")))
        items.append(_feedback(user, f"sam-ok-{n}", 0.9, c.at(19 - 3 * n, 5)))
        items.append(_trace(user, f"sam-70b-{n}", "coder", "llama3.1:70b", query + " ",
                            c.at(18.5 - 3 * n), outcome="failure", latency=14.0, tokens=2900,
                            feedback=0.2, tools=("bash",)))
    return UserStory(
        user_id=user, name="Sam Okafor", persona="a terse platform engineer",
        story="Corrects long answers within seconds ('Too long. Shorter please, just code.'), "
              "says he uses pnpm twice and Postgres once, declares 'From now on, no "
              "preamble.', forbids migrations on production, pastes stack traces and wants "
              "the fix first, and runs a coder agent on two models.",
        items=items,
        declare=[("When I ask for a code review", "Point out the missing tests first")],
        proposals=[Proposal("When I paste a stack trace",
                            "Give the fix first, then one line on the cause",
                            ("stack trace from CI", "stack trace from the billing worker",
                             "stack trace from the nightly job"))],
        extractions=[Extraction("We deploy with Argo CD on Kubernetes", "tooling", "deploy",
                                "argo cd")],
        sample_request="Can you do a code review of the parser change?",
        tools=("bash", "run_tests"),
        explain=("style", "verbosity"),
        private=("Sam Okafor", "sam@acme.example", "production database", "argo cd"),
        expected=Expected(
            facets=[
                FacetExpectation("style", "verbosity", "terse", "active",
                                 why="three corrections (days 20, 12, 2), each an explicit "
                                     "statement and a quick edit: 4.3 >= 1.5"),
                FacetExpectation("style", "preamble", "skip", "active", set_by_user=True,
                                 why="'From now on, no preamble.' is a standing declaration"),
                FacetExpectation("style", "code", "code-first", "active",
                                 why="'just code', said once 20 days ago: remembered until "
                                     "he says otherwise"),
                FacetExpectation("tooling", "package_manager", "pnpm", "active",
                                 why="'I use pnpm' on days 20 and 2: 2.1"),
                FacetExpectation("tooling", "database", "postgres", "active",
                                 why="'We use Postgres', said once: remembered"),
                FacetExpectation("identity", "name", "Sam Okafor", "active",
                                 why="the GitHub account (authoritative)"),
                FacetExpectation("identity", "timezone", "America/Chicago", "active",
                                 why="the GitHub account (authoritative)"),
                FacetExpectation("tooling", "deploy", "argo cd", "provisional", llm=True,
                                 why="the model found it once, in his own words"),
            ],
            absent=[("identity", "role", "VP Finance"), ("identity", "name", "Sarah Lee")],
            profile=["**verbosity**: terse", "**preamble**: skip *(set by the user)*",
                     "**package_manager**: pnpm", "**name**: Sam Okafor",
                     "github (sam@acme.example)"],
            rules=[RuleExpectation("bash", "critical", "production database", "user-edict"),
                   RuleExpectation("run_tests", "normal", "timed out", "repeated-failure")],
            habits=[HabitExpectation("I ask for a code review", "Point out the missing tests "
                                     "first", "active", "accepted_active", "declared"),
                    HabitExpectation("I paste a stack trace", "Give the fix first, then one "
                                     "line on the cause", "candidate", "awaiting_review",
                                     "analyze", llm=True)],
            steered_by=["When: I ask for a code review"],
            traces=12,
        ),
    )


def _priya(c: _Clock, user: str = "priya") -> UserStory:
    """A detail-loving data analyst: asks for more every time, wants tables, signs every email,
    and keeps a metrics handbook in the workspace."""
    items = _session(user, "priya-1", c.at(19), [
        Turn("Summarize the churn numbers for October.", "Churn was 3.1%."),
        Turn("More detail please", "Churn was 3.1%, up from 2.7%: EMEA 4.0%, NA 2.6%...",
             after=9),
        Turn("I pull everything from Looker dashboards.", "Good to know."),
    ])
    items += _session(user, "priya-2", c.at(14), [
        Turn("Always use tables.", "| region | churn |\n| EMEA | 4.0% |"),
    ])
    items += _session(user, "priya-3", c.at(9), [
        Turn("What drove the signup dip last week?", "Fewer paid campaigns."),
        Turn("Please elaborate.", "Paid campaigns paused on Tuesday; organic held...",
             after=20),
    ])
    items += _session(user, "priya-4", c.at(6), [
        Turn("Never email Sarah directly. Send the draft to me first.",
             "Understood: drafts go to you.", tools=(_call("send_email"),)),
    ])
    items += _session(user, "priya-5", c.at(3), [
        Turn("Go deeper on the regional breakdown.", "EMEA: three segments..."),
    ])
    items += _session(user, "priya-6", c.at(1), [
        Turn("Here is a new dataset export for the retention study; start with how many "
             "rows and which dates it covers.", "48,210 rows, 2024-01-01 to 2024-09-30."),
        Turn("Another new dataset (signups): row count and date range first please.",
             "12,004 rows, March to September."),
    ])
    signature = "\n\nBest,\nPriya Raman\nSenior Data Analyst\nAcme Corp"
    for n, days in enumerate((20, 17, 13, 9, 5, 2)):
        items.append(_email(user, f"priya-{n}", "sent", "priya@acme.example",
                            "team@acme.example", f"Metrics update {n + 1}",
                            f"Hi team,\n\nThe numbers for week {n + 1} are in the "
                            f"dashboard.{signature}", c.at(days)))
    items.append(_email(user, "priya-sarah", "received", "sarah@acme.example",
                        "priya@acme.example", "Board deck", "Can you send the churn chart?"
                        "\n\nBest,\nSarah Lee\nVP Finance\nAcme Corp", c.at(11)))
    items.append(_sync(user, "gmail", "gm-priya", c.at(20, -60), name="Priya Raman",
                       email="priya@acme.example", timezone="Europe/London"))
    items.append(_document(user, "metrics-handbook", "c1",
                           "Metrics handbook. Churn is computed monthly over paying accounts. "
                           "Looker dashboards are the source of truth for every metric.",
                           c.at(10)))
    long_query = ("Why did churn rise in EMEA while NA stayed flat? Explain the reasoning "
                  "step by step, compare the cohorts that joined in Q1 and Q2, weigh the "
                  "pricing change against the support backlog, and say which of the two "
                  "explains more of the difference. Then analyze whether the same pattern "
                  "shows in the trial conversions, and what we should watch next month; "
                  "include the caveats of the data, the segments that are too small to "
                  "trust, and what an analyst should check before presenting it to the board.")
    for n in range(6):
        items.append(_trace(user, f"priya-14b-{n}", "analyst", "qwen3:14b",
                            f"{long_query} (variant {n})", c.at(18 - 3 * n),
                            outcome="success", latency=6.5, tokens=3100, feedback=0.85,
                            tools=("sql", "chart")))
        items.append(_trace(user, f"priya-70b-{n}", "analyst", "llama3.1:70b",
                            f"{long_query} (take {n})", c.at(17.5 - 3 * n),
                            outcome="partial", latency=21.0, tokens=5200, feedback=0.35,
                            tools=("sql",)))
    return UserStory(
        user_id=user, name="Priya Raman", persona="a detail-loving data analyst",
        story="Asks for more detail four times in three weeks, declares 'Always use tables.', "
              "signs six emails as Senior Data Analyst at Acme Corp (and receives one signed "
              "by Sarah, who is not her), forbids emailing Sarah, shares new datasets and "
              "wants the row count first, and runs an analyst agent on two models.",
        items=items,
        declare=[("When I ask for the weekly metrics summary",
                  "Include a table comparing each metric with last week")],
        proposals=[Proposal("When I share a new dataset",
                            "Start with the row count and the date range",
                            ("new dataset export", "new dataset (signups)"))],
        extractions=[Extraction("I pull everything from Looker dashboards", "tooling",
                                "bi_tool", "looker"),
                     Extraction("Looker dashboards are the source of truth", "tooling",
                                "bi_tool", "looker", cue="structural")],
        sample_request="Can you put together the weekly metrics summary?",
        tools=("send_email", "sql"),
        explain=("identity", "role"),
        private=("Priya Raman", "priya@acme.example", "Senior Data Analyst", "looker"),
        expected=Expected(
            facets=[
                FacetExpectation("style", "verbosity", "detailed", "active",
                                 why="four requests for more (days 19, 9, 3), two of them "
                                     "quick corrections"),
                FacetExpectation("style", "format", "tables", "active", set_by_user=True,
                                 why="'Always use tables.' is a standing declaration"),
                FacetExpectation("identity", "role", "data analyst", "active",
                                 why="six signed emails agree (the title in canonical form: "
                                     "seniority is not kept)"),
                FacetExpectation("identity", "employer", "Acme Corp", "active",
                                 why="six signed emails"),
                FacetExpectation("identity", "name", "Priya Raman", "active",
                                 why="the Gmail account (authoritative)"),
                FacetExpectation("identity", "timezone", "Europe/London", "active",
                                 why="the Gmail account (authoritative)"),
                FacetExpectation("tooling", "bi_tool", "looker", "active", llm=True,
                                 why="the model found it in her words and in the handbook"),
            ],
            absent=[("identity", "role", "VP Finance"), ("identity", "name", "Sarah Lee")],
            profile=["**verbosity**: detailed", "**format**: tables *(set by the user)*",
                     "**role**: data analyst", "gmail (priya@acme.example)"],
            rules=[RuleExpectation("send_email", "critical", "Never email Sarah",
                                   "user-edict")],
            habits=[HabitExpectation("I ask for the weekly metrics summary", "Include a table "
                                     "comparing each metric with last week", "active",
                                     "accepted_active", "declared"),
                    HabitExpectation("I share a new dataset", "Start with the row count and "
                                     "the date range", "candidate", "collecting_evidence",
                                     "analyze", llm=True)],
            steered_by=["When: I ask for the weekly metrics summary"],
            traces=12,
        ),
    )


def _marco(c: _Clock, user: str = "marco") -> UserStory:
    """A sales director who wants German, formally, and no emoji; his meeting summaries
    always start with the decisions."""
    items = _session(user, "marco-1", c.at(18), [
        Turn("Answer in German.", "Natürlich."),
    ])
    items += _session(user, "marco-2", c.at(16), [
        Turn("I'm based in Munich.", "Notiert."),
    ])
    items += _session(user, "marco-3", c.at(11), [
        Turn("From now on, no emoji.", "Verstanden."),
    ])
    items += _session(user, "marco-4", c.at(9), [
        Turn("Don't schedule meetings before 9am.", "Verstanden.",
             tools=(_call("create_event"),)),
    ])
    items += _session(user, "marco-5", c.at(8), [
        Turn("Notes from the Becker call are attached. Meeting summary please, decisions "
             "and owners first.", "Entscheidungen: Rabatt 5 % (Marco)..."),
    ])
    items += _session(user, "marco-6", c.at(5), [
        Turn("Meeting summary for the Wagner call, again decisions and owners on top.",
             "Entscheidungen: Pilot im März (Anna)..."),
    ])
    items += _session(user, "marco-7", c.at(4), [
        Turn("What is the status of the Schmidt deal?", "The deal is in legal review."),
        Turn("Answer in German.", "Der Vertrag ist in der Rechtsprüfung.", after=15),
        Turn("Be more formal.", "Selbstverständlich, Herr Rossi."),
    ])
    items += _session(user, "marco-8", c.at(3), [
        Turn("Look up the Schmidt account in the CRM.", "The CRM was rate limited twice, "
             "then answered: Schmidt GmbH, 240 seats.",
             tools=(_call("crm_lookup", False, "rate limited"),
                    _call("crm_lookup", False, "rate limited"), _call("crm_lookup"))),
    ])
    items += _session(user, "marco-9", c.at(2), [
        Turn("Meeting summary of the Fischer call please, decisions and owners first as "
             "always.", "Entscheidungen: Angebot bis Freitag (Marco)..."),
    ])
    items.append(_sync(user, "outlook", "ol-marco", c.at(18, -30), name="Marco Rossi",
                       email="marco@globex.example", timezone="Europe/Berlin",
                       role="Sales Director"))
    items.append(_email(user, "marco-1", "sent", "marco@globex.example",
                        "anna@globex.example", "Schmidt offer",
                        "Anna,\n\nplease send the revised offer today.\n\nKind regards,\n"
                        "Marco Rossi\nSales Director\nGlobex GmbH", c.at(7)))
    for n in range(5):
        items.append(_trace(user, f"marco-14b-{n}", "sales", "qwen3:14b",
                            f"Draft a follow-up to Schmidt #{n}", c.at(17 - 3 * n),
                            outcome="success", latency=3.0, tokens=900, feedback=0.9,
                            tools=("crm_lookup",)))
        items.append(_trace(user, f"marco-3b-{n}", "sales", "llama3.2:3b",
                            f"Draft a follow-up to Becker #{n}", c.at(16.5 - 3 * n),
                            outcome="failure", latency=1.2, tokens=400, feedback=0.2))
    return UserStory(
        user_id=user, name="Marco Rossi", persona="a formal, German-speaking sales director",
        story="Asks for German twice and, four days ago, for formality once, lives in "
              "Munich, declares 'From now on, no emoji.', forbids meetings before 9am, "
              "hits a rate-limited CRM, wants every meeting summary to open with decisions "
              "and owners (a suggestion he approves), and runs a sales agent on a small "
              "and a mid-size model.",
        items=items,
        approve=["I ask for a meeting summary"],
        proposals=[Proposal("When I ask for a meeting summary",
                            "List the decisions and their owners first",
                            ("Becker call", "Wagner call", "Fischer call"))],
        sample_request="Write the meeting summary for today's call with Schmidt GmbH.",
        tools=("create_event", "crm_lookup"),
        explain=("style", "language"),
        private=("Marco Rossi", "marco@globex.example", "Munich", "meetings before 9am"),
        expected=Expected(
            facets=[
                FacetExpectation("style", "language", "de", "active",
                                 why="'Answer in German.', said on days 18 and 4"),
                FacetExpectation("style", "emoji", "none", "active", set_by_user=True,
                                 why="'From now on, no emoji.' is a standing declaration"),
                FacetExpectation("style", "tone", "formal", "provisional",
                                 why="asked once, 4 days ago: 2^(-4/14) x ln 2 x 2 = 1.14"),
                FacetExpectation("identity", "location", "Munich", "active",
                                 why="'I'm based in Munich.', said once: remembered"),
                FacetExpectation("identity", "name", "Marco Rossi", "active",
                                 why="the Outlook account (authoritative)"),
                FacetExpectation("identity", "timezone", "Europe/Berlin", "active",
                                 why="the Outlook account (authoritative)"),
                FacetExpectation("identity", "role", "sales director", "active",
                                 why="the Outlook account and a signature agree"),
            ],
            absent=[],
            profile=["**language**: de", "**emoji**: none *(set by the user)*",
                     "**name**: Marco Rossi", "outlook (marco@globex.example)"],
            rules=[RuleExpectation("create_event", "critical", "before 9am", "user-edict"),
                   RuleExpectation("crm_lookup", "normal", "rate limited",
                                   "repeated-failure")],
            habits=[HabitExpectation("I ask for a meeting summary", "List the decisions and "
                                     "their owners first", "active", "accepted_active",
                                     "analyze", llm=True)],
            steered_by=["When: I ask for a meeting summary"],
            traces=10,
        ),
    )


def _lena(c: _Clock, user: str = "lena") -> UserStory:
    """A newcomer on her first day: what she said once is remembered, no habits, no rules."""
    items = _session(user, "lena-1", c.at(0, -90), [
        Turn("Hi! I work on the support team.", "Welcome!"),
        Turn("Keep it casual.", "Sure thing."),
        Turn("I realized I should learn SQL properly.", "Happy to help with that."),
        Turn("How do I find tickets older than a week?", "Filter by created < now - 7d."),
    ])
    items.append(_trace(user, "lena-1", "support", "llama3.2:3b", "Find stale tickets",
                        c.at(0, -80), outcome="success", latency=0.8, tokens=210,
                        feedback=0.7))
    return UserStory(
        user_id=user, name="Lena", persona="a newcomer on the support team",
        story="Her first morning: says once that she is on the support team, wants it casual "
              "and wants to learn SQL. Said once is enough: the next answer knows.",
        items=items,
        sample_request="How do I export the ticket list?",
        explain=("identity", "team"),
        private=("support team", "learn SQL"),
        expected=Expected(
            facets=[
                FacetExpectation("identity", "team", "support", "active",
                                 why="'I work on the support team.', said once: remembered"),
                FacetExpectation("style", "tone", "casual", "active",
                                 why="'Keep it casual.', said once: remembered"),
            ],
            profile=["**team**: support", "**tone**: casual"],
            traces=1,
        ),
    )


def build(now: float, tenants: Mapping[str, str] | None = None) -> Scenario:
    """The scenario as of `now`; `tenants` renames the tenants (`acme`, `globex`), so a test
    can run it under tenants of its own."""
    names = {"acme": "acme", "globex": "globex", **(tenants or {})}
    c = _Clock(now)
    acme = TenantStory(
        tenant_id=names["acme"], company="Acme (a software company)",
        users=[_sam(c), _priya(c)],
        routing=[
            Routing("def add(a, b): return a - b  # fix this function",
                    ("qwen2.5-coder:7b", "llama3.1:70b"), "code", learned="qwen2.5-coder:7b",
                    heuristic="qwen2.5-coder:7b"),
            Routing("Why did churn rise in EMEA last quarter? Explain the reasoning step by "
                    "step, compare the cohorts, weigh pricing against the support backlog, "
                    "and say which explains more of the difference between the regions. "
                    "Then analyze whether the same pattern shows in trial conversions, what "
                    "to watch next month, the caveats of the data, which segments are too "
                    "small to trust, and what to check before presenting it to the board "
                    "next week, with the numbers behind each claim.",
                    ("qwen3:14b", "llama3.1:70b"), "long", learned="qwen3:14b",
                    heuristic="llama3.1:70b"),
        ],
        judge={"I ask for a code review": ("code review",),
               "I ask for the weekly metrics summary": ("weekly metrics",)},
    )
    globex = TenantStory(
        tenant_id=names["globex"], company="Globex (a sales organisation)",
        users=[_marco(c), _lena(c)],
        routing=[Routing("Draft a follow-up to Weber", ("qwen3:14b", "llama3.2:3b"), "short",
                         learned="qwen3:14b", heuristic="llama3.2:3b")],
        judge={"I ask for a meeting summary": ("meeting summary",)},
    )
    return Scenario(now=now, tenants=[acme, globex])
