"""Realistic example payloads for every event type a projection consumes.

`examples_for(event_type, tenant, user, i)` returns the i-th example payload of a type (i = 0,
1, ...), deterministic in its arguments, so two runs of the same sequence (and two tenants fed
"the same" events) are comparable. The facets the examples talk about are the ones the
candidates create (style.verbosity, identity.name, ...), so pins, updates and rebuilds act on
real rows. A type with no example fails the contract with "add an example for X".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from habitus.events import CATALOG, Event
from habitus.events.domain import (
    AdviceIssued,
    AdviceItem,
    CacheRebuilt,
    CacheResetRequested,
    CandidateEmitted,
    ConfigurationApplied,
    ConnectedAccountSynced,
    FacetForgotten,
    FacetPinned,
    FacetUnpinned,
    FacetUpdated,
    HabitActivated,
    HabitApproved,
    HabitDisabled,
    HabitDormant,
    HabitDuplicateFound,
    HabitDuplicateResolved,
    HabitEdited,
    HabitEnabled,
    HabitEvidenceAdded,
    HabitLawSet,
    HabitMerged,
    HabitRejected,
    HabitRetired,
    HabitSettingsChanged,
    HabitSuggested,
    HabitSuperseded,
    HabitSupport,
    HabitSuppressedByLaw,
    OptimizationRunCompleted,
    OptimizationRunFailed,
    OptimizationRunStarted,
    OptimizationRunStopped,
    ProfileNotesSaved,
    RebuildRequested,
    ReextractionRequested,
    RouteDecided,
    RoutingPolicyUpdated,
    ToolRuleDeleted,
    ToolRuleUpserted,
    TrialEvaluated,
    UserErased,
)
from habitus.events.envelope import Payload
from habitus.events.ingest import (
    DocumentIngested,
    EmailObserved,
    ExtractionWindowDue,
    FeedbackGiven,
    ProviderProfileSynced,
    ToolCall,
    TraceCompleted,
    TraceStep,
    TurnRecorded,
)

#: every example happens at T0 + i minutes: in the past, deterministic
T0 = 1_790_000_000.0
STEP = 60.0

TURN_MESSAGES = (
    "Please keep it short, no preamble.",
    "I'm Dana, I work in Berlin.",
    "From now on, always answer in British English.",
    "No bullet points please, just plain paragraphs.",
    "Never email Sarah at sarah@example.com.",
)
#: the tools called with each message above (an edict lands on the tool it names)
TURN_TOOLS: tuple[tuple[tuple[str, bool, str | None], ...], ...] = (
    (), (), (), (("shell", False, "permission denied"), ("shell", False, "permission denied")),
    (("send_email", True, "sent"),),
)
SIGNATURE = ("\n\nBest regards,\nDana Keller\nStaff Engineer\nNorthwind GmbH\nBerlin, Germany\n"
             "CET")
#: the facets the candidates are about, and so what pins, updates and rebuilds act on
FACETS = (("style", "verbosity", "terse"), ("identity", "name", "Dana"),
          ("style", "spelling", "british"), ("style", "format", "no-bullets"))


def at(i: int) -> float:
    return T0 + i * STEP


def facet(i: int) -> tuple[str, str, str]:
    return FACETS[i % len(FACETS)]


def _turn(tenant: str, user: str, i: int) -> Payload:
    t = at(i)
    return TurnRecorded(
        session_id="s1", turn_id=f"t{i}", channel="web",
        user_message=TURN_MESSAGES[i % len(TURN_MESSAGES)],
        tool_calls=[ToolCall(tool_name=name, ok=ok, output_summary=summary)
                    for name, ok, summary in TURN_TOOLS[i % len(TURN_TOOLS)]],
        assistant_message="Sure. Here is a longer answer than you asked for, I am afraid. " * 3,
        user_at=t, assistant_at=t + 4, previous_assistant_at=t - 10 if i else None)


def _email(tenant: str, user: str, i: int) -> Payload:
    return EmailObserved.model_validate({
        "message_id": f"<m{i}.{user}@northwind.example>", "direction": "sent",
        "from": f"{user}@northwind.example", "to": ["bob@contoso.example"],
        "subject": f"Quarterly report {i}",
        "body": f"Hi Bob,\n\nThe figures for week {i} are attached.{SIGNATURE}",
        "sent_at": at(i)})


def _provider(tenant: str, user: str, i: int) -> Payload:
    return ProviderProfileSynced.model_validate({
        "toolkit": "gmail" if i % 2 == 0 else "github", "connection_id": f"conn-{i % 2}",
        "fields": {"email": f"{user}@northwind.example", "name": "Dana Keller",
                   "timezone": "Europe/Berlin", "role": "Staff Engineer",
                   "employer": "Northwind GmbH"},
        "synced_at": at(i)})


def _candidate(tenant: str, user: str, i: int) -> Payload:
    cls, key, value = facet(i)
    return CandidateEmitted.model_validate({
        "class": cls, "key": key, "value": value, "cue_family": "explicit",
        "evidence": [{"type": "turn", "session_id": "s1", "turn_id": f"t{i}"}],
        "initial_confidence": 0.9, "observed_at": at(i), "producer": "statements"})


def _ref(model: type[Payload], i: int, **extra: Any) -> Payload:
    cls, key, _ = facet(i)
    return model.model_validate({"class": cls, "key": key, **extra})


def _pinned(tenant: str, user: str, i: int) -> Payload:
    return _ref(FacetPinned, i, value=facet(i)[2])


def _unpinned(tenant: str, user: str, i: int) -> Payload:
    return _ref(FacetUnpinned, i)


def _forgotten(tenant: str, user: str, i: int) -> Payload:
    return _ref(FacetForgotten, i + 1)  # another facet than the one pinned at i


def _updated(tenant: str, user: str, i: int) -> Payload:
    return _ref(FacetUpdated, i, value="very-terse" if facet(i)[1] == "verbosity" else "Dana K.")


def _reset(tenant: str, user: str, i: int) -> Payload:
    return CacheResetRequested(reason=f"user asked for a fresh start ({i})")


def _rebuild(tenant: str, user: str, i: int) -> Payload:
    # "user", never "periodic": a periodic rebuild scans every tenant's due users
    return RebuildRequested(as_of=at(i) + 30, scope="user", reason="new evidence")


def _rebuilt(tenant: str, user: str, i: int) -> Payload:
    active = [{"class": c, "key": k, "value": v, "stability": 2.5 + j,
               "user_state": "pinned" if j == i % 3 else "auto",
               "origin": "set_by_user" if j == i % 3 else "learned"}
              for j, (c, k, v) in enumerate(FACETS[: 1 + i % 3])]
    # the facets not yet active are not yet sure: each rebuild states the whole list
    provisional = [{"class": c, "key": k, "value": v, "stability": 0.5 + j / 10,
                    "evidence": [f"{j + 1} chat turns"]}
                   for j, (c, k, v) in enumerate(FACETS[1 + i % 3:])]
    return CacheRebuilt.model_validate({
        "as_of": at(i), "added": 1, "evicted": 0, "kept": len(active) - 1,
        "total_size": len(active),
        "changes": [{"class": active[-1]["class"], "key": active[-1]["key"],
                     "old_value": None, "new_value": active[-1]["value"],
                     "old_state": None, "new_state": "active"}],
        "active": active, "provisional": provisional})


def _account(tenant: str, user: str, i: int) -> Payload:
    return ConnectedAccountSynced(toolkit="gmail" if i % 2 == 0 else "github",
                                  connection_id=f"conn-{i % 2}",
                                  label=f"{user}@northwind.example")


def _rule(tenant: str, user: str, i: int) -> Payload:
    return ToolRuleUpserted(rule_id=f"rule-{i % 2}", tool_name="web_search",
                            rule=f"Prefer primary sources; cite at most {i + 2} links.",
                            priority="high" if i % 2 else "normal", tags=["research"],
                            source="programmatic", created_at=at(0), updated_at=at(i),
                            causation=f"request-{i}")


def _rule_deleted(tenant: str, user: str, i: int) -> Payload:
    return ToolRuleDeleted(rule_id="rule-0", tool_name="web_search")


def _notes(tenant: str, user: str, i: int) -> Payload:
    # base_version 0: the first save applies, a later one over a newer version is a conflict
    return ProfileNotesSaved(
        markdown=f"# Notes\n\nI review pull requests in the morning ({i}).\n", base_version=0)


def _erased(tenant: str, user: str, i: int) -> Payload:
    return UserErased(reason="account closed")


TRACE_QUERIES = (
    "def parse(line): return line.split(',')  # why does this drop empty fields?",
    "What is the capital of Australia?",
    "Solve the integral of x^2 from 0 to 3.",
    "Summarise the attached incident report for the on-call channel.",
)
TRACE_MODELS = ("qwen3:8b", "deepseek-coder-v2:16b", "llama3.2:3b")


def _trace(tenant: str, user: str, i: int) -> Payload:
    t = at(i)
    tools = (("search", True), ("calc", True), ("search", i % 3 != 0))[: 1 + i % 3]
    steps = [TraceStep(step_type="llm", timestamp=t, duration_seconds=0.8,
                       input={"prompt_tokens": 120}, output={"completion_tokens": 60})]
    steps += [TraceStep(step_type="tool", timestamp=t + 1 + n, duration_seconds=0.3,
                        input={"tool": name, "arguments": {"q": f"q{i}"}},
                        output={"success": ok}) for n, (name, ok) in enumerate(tools)]
    return TraceCompleted(
        trace_id=f"tr-{i}", query=TRACE_QUERIES[i % len(TRACE_QUERIES)], agent="orchestrator",
        model=TRACE_MODELS[i % len(TRACE_MODELS)], engine="ollama", steps=steps,
        result=f"Answer {i}: done.", outcome="success" if i % 4 else "failure",
        feedback=0.8 if i % 2 else None, started_at=t, ended_at=t + 5, total_tokens=180,
        total_latency_seconds=5.0, cost_usd=0.0004,
        decision_id=f"d-{i}" if i % 3 else None)


def _decided(tenant: str, user: str, i: int) -> Payload:
    # the decisions of the traces above (every third trace was not routed by one)
    return RouteDecided(query_id=f"d-{i}", model=TRACE_MODELS[i % len(TRACE_MODELS)],
                        policy="grpo", reason="grpo: sampled", query_class="code",
                        propensity=1 / 3, offered=list(TRACE_MODELS), urgency=0.5,
                        configuration=i % 2)


RUN_SPACE = {"search": [{"name": "routing.model_for.code", "type": "categorical",
                         "values": list(TRACE_MODELS)}], "fixed": {}, "constraints": {}}


def _run_started(tenant: str, user: str, i: int) -> Payload:
    return OptimizationRunStarted(
        run_id=f"run-{i}", space=RUN_SPACE, objectives=[
            {"metric": "reward", "direction": "maximize", "weight": 1.0}],
        proposer="random", evaluator="counterfactual", max_trials=5, patience=3, seed=i,
        baseline={"routing.policy": "learned"})


def _trial(tenant: str, user: str, i: int) -> Payload:
    run, index = f"run-{i // 3}", i % 3
    return TrialEvaluated(
        run_id=run, trial_id=f"{run}-t{index}", index=index,
        params={"routing.model_for.code": TRACE_MODELS[i % 3]}, proposer="random",
        metrics={"reward": 0.5 + index / 10}, intervals={"reward": [0.4, 0.7]}, support=40,
        frontier=[f"{run}-t{index}"], best_trial_id=f"{run}-t{index}")


def _run_completed(tenant: str, user: str, i: int) -> Payload:
    return OptimizationRunCompleted(run_id=f"run-{i}", trials=3, best_trial_id=f"run-{i}-t2",
                                    frontier=[f"run-{i}-t2"], stopped_early=i % 2 == 0)


def _advice(tenant: str, user: str, i: int) -> Payload:
    items = [AdviceItem(kind="routing", summary=f"Query class 'code' has {3 + i} failures",
                        detail="Failures by model: qwen3:8b (3).",
                        evidence_trace_ids=[f"tr-{n}" for n in range(3)])][: i % 2 + 1]
    return AdviceIssued(analyzed=10 + i, problems=3 + i, confidence=0.7, recommendations=items,
                        digest=f"{i:064x}")


def _configured(tenant: str, user: str, i: int) -> Payload:
    return ConfigurationApplied(
        version=i + 1, params={"routing.model_for.code": TRACE_MODELS[i % 3]},
        previous={"routing.model_for.code": TRACE_MODELS[(i + 2) % 3]} if i else {},
        run_id=f"run-{i}", trial_id=f"run-{i}-t0")


def _feedback(tenant: str, user: str, i: int) -> Payload:
    # Half for traces already recorded, half for traces still to come.
    return FeedbackGiven(trace_id=f"tr-{i + (3 if i % 2 else 0)}", score=0.9 - (i % 3) * 0.2,
                         outcome="success" if i % 3 else None)


def _policy(tenant: str, user: str, i: int) -> Payload:
    if i % 3 == 2:
        return RoutingPolicyUpdated(policy="learned", version=i + 1,
                                    parameters={"tenant_default": True})
    return RoutingPolicyUpdated(policy="learned", version=i + 1, parameters={
        "table": {"code": "deepseek-coder-v2:16b", "general": "qwen3:8b"}})


DOCUMENT_CHUNKS = (
    "Billing migration plan. Owner: Dana. We move invoices from the legacy Perl service to "
    "the new Go service before March; the frontend moves to Astro at the same time.",
    "Conventions: we use Bun for scripts, uv for Python, and every PR needs one reviewer.",
    "Open questions: do we keep the nightly export? Sarah prefers weekly.",
)


def _document(tenant: str, user: str, i: int) -> Payload:
    return DocumentIngested(source_id=f"doc-{i % 2}", chunk_id=f"chunk-{i}",
                            text=DOCUMENT_CHUNKS[i % len(DOCUMENT_CHUNKS)])


def _window_due(tenant: str, user: str, i: int) -> Payload:
    # Sequences are the stream's: some ticks name a window that is open, some one that is not.
    return ExtractionWindowDue(source=("conversations", "email", "document:doc-0")[i % 3],
                               window_opened_seq=1 + i)


def _reextract(tenant: str, user: str, i: int) -> Payload:
    return ReextractionRequested(since=T0 + i * STEP, prompt_version=f"extract-v{2 + i % 2}",
                                 source="email" if i % 2 else None)


#: the habits the habit examples are about (When, Do); example i is about habit h{i % 3}
HABITS = (("I ask for a status report", "Keep it to three bullet points"),
          ("I share a pull request", "Check that the tests cover the change"),
          ("I book travel", "Prefer aisle seats"))
LAW = "Habits follow the Northwind handbook.\ndeny: production database"
LAW_HASH = "4f1d0a1f2ef5b3c1b2c9d0c2b6f6b2a8e1a7c3d4e5f60718293a4b5c6d7e8f90"


def _habit_id(i: int) -> str:
    return f"h{i % 3}"


def _support(i: int) -> list[HabitSupport]:
    return [HabitSupport(ref=f"obs-{i}-{n}", day=f"2026-09-{20 + n:02d}", confidence_bp=8000)
            for n in range(3)]


def _suggested(tenant: str, user: str, i: int) -> Payload:
    when, do = HABITS[i % 3]
    return HabitSuggested(habit_id=_habit_id(i), when=when, do=do, support=_support(i),
                          confidence_bp=8000)


def _evidence(tenant: str, user: str, i: int) -> Payload:
    return HabitEvidenceAdded(habit_id=_habit_id(i), support=_support(i + 100),
                              confidence_bp=8500)


def _pair_found(tenant: str, user: str, i: int) -> Payload:
    return HabitDuplicateFound(habit_id="h0", other_id=f"h{1 + i % 2}",
                               similarity_bp=7000 + i, strong=i % 2 == 0)


def _approved(tenant: str, user: str, i: int) -> Payload:
    return HabitApproved(habit_id=_habit_id(i), law_hash=LAW_HASH,
                         outcome="accepted_active" if i % 3 else "approved_pending_eligibility")


def _activated(tenant: str, user: str, i: int) -> Payload:
    from services.habits.identity import identity

    when, do = HABITS[i % 3]
    return HabitActivated(habit_id=_habit_id(i), identity=identity(when, do, 1),
                          law_hash=LAW_HASH)


def _edited(tenant: str, user: str, i: int) -> Payload:
    when, do = HABITS[i % 3]
    return HabitEdited(habit_id=_habit_id(i), when=when, do=f"{do} (edit {i})")


def _law(tenant: str, user: str, i: int) -> Payload:
    return HabitLawSet(text=f"{LAW}\n# revision {i}", law_hash=LAW_HASH)


EXAMPLES: dict[str, Callable[[str, str, int], Payload]] = {
    "HabitSettingsChanged": lambda t, u, i: HabitSettingsChanged(
        retention_days=(7, 14, 30)[i % 3], scheduled_analyze=i % 2 == 0,
        project_names=["Northwind"]),
    "HabitLawSet": _law,
    "HabitSuggested": _suggested,
    "HabitEvidenceAdded": _evidence,
    "HabitDuplicateFound": _pair_found,
    "HabitApproved": _approved,
    "HabitActivated": _activated,
    "HabitDisabled": lambda t, u, i: HabitDisabled(habit_id=_habit_id(i), reason="not now"),
    "HabitEnabled": lambda t, u, i: HabitEnabled(habit_id=_habit_id(i), law_hash=LAW_HASH),
    "HabitDormant": lambda t, u, i: HabitDormant(habit_id=_habit_id(i), replaced_by="h9"),
    "HabitSuppressedByLaw": lambda t, u, i: HabitSuppressedByLaw(
        habit_id=_habit_id(i), law_hash=LAW_HASH, patterns=["law:2"]),
    "HabitEdited": _edited,
    "HabitDuplicateResolved": lambda t, u, i: HabitDuplicateResolved(
        habit_id="h0", other_id=f"h{1 + i % 2}", decision="kept_separate"),
    "HabitMerged": lambda t, u, i: HabitMerged(habit_id="h2", into="h1"),
    "HabitSuperseded": lambda t, u, i: HabitSuperseded(habit_id="h1", by="h0"),
    "HabitRejected": lambda t, u, i: HabitRejected(habit_id=_habit_id(i), reason="not me"),
    "HabitRetired": lambda t, u, i: HabitRetired(habit_id=_habit_id(i), reason="done"),
    "DocumentIngested": _document,
    "ExtractionWindowDue": _window_due,
    "ReextractionRequested": _reextract,
    "TurnRecorded": _turn,
    "EmailObserved": _email,
    "ProviderProfileSynced": _provider,
    # a fresh start, then what the user says after it (evidence from before a reset never
    # counts again, so a reset after the round's evidence would leave its summaries empty)
    "CacheResetRequested": _reset,
    "CandidateEmitted": _candidate,
    "FacetPinned": _pinned,
    "FacetUnpinned": _unpinned,
    "FacetForgotten": _forgotten,
    "FacetUpdated": _updated,
    "RebuildRequested": _rebuild,
    "CacheRebuilt": _rebuilt,
    "ConnectedAccountSynced": _account,
    "ToolRuleUpserted": _rule,
    "ToolRuleDeleted": _rule_deleted,
    "ProfileNotesSaved": _notes,
    "UserErased": _erased,
    "TraceCompleted": _trace,
    "FeedbackGiven": _feedback,
    "RoutingPolicyUpdated": _policy,
    "RouteDecided": _decided,
    "OptimizationRunStarted": _run_started,
    "TrialEvaluated": _trial,
    "OptimizationRunCompleted": _run_completed,
    "OptimizationRunStopped": lambda t, u, i: OptimizationRunStopped(
        run_id=f"run-{i + 1}", reason="stopped by the tenant"),
    "OptimizationRunFailed": lambda t, u, i: OptimizationRunFailed(
        run_id=f"run-{i + 2}", error="ValueError: the log is empty"),
    "ConfigurationApplied": _configured,
    "AdviceIssued": _advice,
}


class MissingExample(LookupError):
    pass


def examples_for(event_type: str, tenant: str, user: str, i: int) -> Payload:
    """The i-th example payload of `event_type` for `user` of `tenant`."""
    try:
        make = EXAMPLES[event_type]
    except KeyError:
        raise MissingExample(
            f"add an example for {event_type} to tests/contract/examples.py") from None
    payload = make(tenant, user, i)
    assert CATALOG.spec_for(payload).type == event_type, (event_type, type(payload).__name__)
    return payload


#: events that happen a moment before the others of their index (a reset, before the evidence
#: that follows it)
EARLIER = {"CacheResetRequested": STEP / 2}


def example_event(event_type: str, tenant: str, user: str, i: int) -> Event[Any]:
    return CATALOG.new(examples_for(event_type, tenant, user, i), tenant_id=tenant,
                       user_id=user, producer="contract",
                       occurred_at=at(i) - EARLIER.get(event_type, 0.0))


def sequence(consumes: tuple[str, ...], tenant: str, user: str, rounds: int,
             burst: int = 3) -> list[Event[Any]]:
    """`rounds` rounds of `burst` consecutive examples of every consumed type, in a realistic
    order (evidence first, then the user's commands, then a rebuild). Consecutive events of
    one type reach a handler as one run, and a burst of 3 is split by batches of 2: a
    projection whose result depends on how its events were batched shows it."""
    order = sorted(consumes, key=lambda t: list(EXAMPLES).index(t) if t in EXAMPLES else -1)
    return [example_event(t, tenant, user, r * burst + j)
            for r in range(rounds) for t in order for j in range(burst)]
