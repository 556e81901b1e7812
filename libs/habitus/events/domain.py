"""Domain events on HABITUS_EVENTS: what Habitus concluded, and the commands users gave it.

Each payload is owned by the service that publishes it; the fields here are the contract other
services subscribe to. New fields must be optional (or a new schema_version with an upcaster).

Long on purpose: every domain payload of the stream, one short model after another, is the
contract subscribers read, so it is one file (by family: facets and the cache, profile, tool
rules, routing, extraction, accounts, erasure, habits, optimization); `catalog.py` lists the
types.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field

from habitus.events.envelope import Payload
from habitus.events.evidence import EvidenceRef
from habitus.events.ingest import Timestamp


class FacetClass(StrEnum):
    STYLE = "style"
    IDENTITY = "identity"
    TOOLING = "tooling"
    VETO = "veto"
    GOAL = "goal"
    CHANNEL = "channel"


class CueFamily(StrEnum):
    EXPLICIT = "explicit"
    STRUCTURAL = "structural"
    BEHAVIORAL = "behavioral"
    RECURRENCE = "recurrence"
    #: the user's own account at a provider reported it: held Active until the user changes
    #: it or a newer report differs, whatever the scores
    AUTHORITATIVE = "authoritative"


class Stance(StrEnum):
    """How the user meant a statement: for good, for this answer, or as an answer to a
    confirmation question."""

    #: a lasting first-person preference ("I'd rather you skip the intro"): Active from this
    #: one statement, replaced by a later statement or stronger later evidence
    STANDING = "standing"
    #: framed for good ("from now on ...", "always ..."): set by the user, replaced only by
    #: another statement or the user's own command
    DECLARED = "declared"
    #: about the current answer only ("shorter", "more detail on step 2"): evidence, scored
    ONE_OFF = "one_off"
    #: the user said yes when asked to confirm the value: set by the user
    CONFIRMED = "confirmed"
    #: the user said no when asked to confirm the value, or took it back in words ("forget
    #: what I said about tables"): the value is dropped
    DENIED = "denied"


class FacetOrigin(StrEnum):
    """Why a facet holds its value, in words the same on every surface."""

    LEARNED = "learned"
    #: said once in so many words
    STATED = "stated"
    #: the user set it: a declaration, a confirmation, an update, a pin
    SET_BY_USER = "set_by_user"
    #: the user's account at a connected provider reports it
    PROVIDER = "provider"


class FacetState(StrEnum):
    ACTIVE = "active"
    PROVISIONAL = "provisional"
    CANDIDATE = "candidate"
    DROPPED = "dropped"


class UserState(StrEnum):
    AUTO = "auto"
    PINNED = "pinned"
    FORGOTTEN = "forgotten"


FacetKey = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\s/][^\s]*$")]


class FacetRef(Payload):
    class_: FacetClass = Field(
        alias="class", description="The facet class: what kind of preference it is.")
    key: FacetKey = Field(description="The facet key within its class, e.g. `verbosity`.")


class CandidateEmitted(Payload):
    class_: FacetClass = Field(
        alias="class", description="The facet class: what kind of preference it is.")
    key: FacetKey = Field(description="The facet key within its class, e.g. `verbosity`.")
    value: str = Field(
        min_length=1, max_length=2000, description="The value the evidence supports, e.g. `terse`.")
    cue_family: CueFamily = Field(
        description="What kind of cue it was; families are weighted differently.")
    evidence: list[EvidenceRef] = Field(
        default_factory=list, max_length=64, description="The ingest events it was seen in.")
    initial_confidence: float = Field(
        ge=0, le=1, description="How sure the producer is, from 0 to 1.")
    observed_at: float = Field(
        ge=0, description="When the evidence happened (epoch seconds); decay runs from it.")
    producer: str = Field(
        min_length=1, max_length=128,
        description="The producer that emitted it (a heuristic, the extractor, ...).")
    stance: Stance | None = Field(
        default=None,
        description="For a statement the user made in so many words: how they meant it "
                    "(`standing`, `declared`, `one_off`, `confirmed`, `denied`); absent for "
                    "every other kind of evidence.")
    sentence: str | None = Field(
        default=None, max_length=500,
        description="The sentence of a statement, so `explain_facet` can say which statement "
                    "set or replaced a value.")


class FacetPinned(FacetRef):
    value: str | None = Field(
        default=None, min_length=1, max_length=2000,
        description="The value pinned (the active value when the user pinned it), so the log alone "
                    "says what a pinned facet holds after later evidence or a reset; absent, the "
                    "value winning at the time of the pin is held.")


class FacetUnpinned(FacetRef):
    pass


class FacetForgotten(FacetRef):
    pass


class FacetUpdated(FacetRef):
    value: str = Field(
        min_length=1, max_length=2000,
        description="The value the user set; the facet is pinned to it.")


class CacheResetRequested(Payload):
    reason: str | None = Field(
        default=None, max_length=500, description="Why, for the audit trail.")


class RebuildRequested(Payload):
    as_of: float = Field(
        ge=0,
        description="The time to compute the cache as of (epoch seconds): decay is computed to it, "
                    "so a replay gives the same result.")
    scope: Literal["user", "periodic", "manual"] = Field(
        default="user",
        description="Who asked: `user` (after new evidence), `periodic` (the scheduler), or "
                    "`manual`.")
    reason: str | None = Field(
        default=None, max_length=500, description="Why, for the audit trail.")


class FacetChange(Payload):
    class_: FacetClass = Field(alias="class", description="The facet class.")
    key: str = Field(description="The facet key.")
    old_value: str | None = Field(
        default=None, description="The value before; null: the facet was not in the cache.")
    new_value: str | None = Field(
        default=None, description="The value after; null: the facet left the cache.")
    old_state: FacetState | None = Field(default=None, description="The state before.")
    new_state: FacetState | None = Field(default=None, description="The state after.")


class ActiveFacet(Payload):
    class_: FacetClass = Field(alias="class", description="The facet class.")
    key: str = Field(description="The facet key.")
    value: str = Field(description="The value held.")
    stability: float | None = Field(
        description="The evidence score; null when pinned (a pinned facet's stability is infinite: "
                    "it never decays).")
    user_state: UserState = Field(
        default=UserState.AUTO,
        description="What the user decided: `auto` (the evidence decides) or `pinned`.")
    origin: FacetOrigin = Field(
        default=FacetOrigin.LEARNED,
        description="Why it holds: `learned` from evidence, `stated` once in so many words, "
                    "`set_by_user` (a declaration, a confirmation, an update or a pin) or "
                    "`provider` (the user's connected account reports it).")


class ProvisionalFacet(Payload):
    class_: FacetClass = Field(alias="class", description="The facet class.")
    key: str = Field(description="The facet key.")
    value: str = Field(description="The value the evidence points to.")
    stability: float = Field(ge=0, description="The evidence score, under the Active threshold.")
    evidence: list[str] = Field(
        default_factory=list,
        description="What it rests on, in words: `1 email signature`, `2 chat turns`.")


class CacheRebuilt(Payload):
    as_of: float = Field(ge=0, description="The time the cache was computed as of (epoch seconds).")
    added: int = Field(ge=0, description=(
        "Facets that became Active (in prompts) with this rebuild. Counts are about Active "
        "facets only: a facet that became Provisional is in `changes` and `provisional`, not "
        "here. `added + kept == total_size`."))
    evicted: int = Field(ge=0, description=(
        "Facets that stopped being Active (decayed to Provisional, dropped, forgotten)."))
    kept: int = Field(ge=0, description=(
        "Facets Active before and after (a kept facet may have a new value: see `changes`)."))
    total_size: int = Field(ge=0, description="Active facets after the rebuild: `len(active)`.")
    changes: list[FacetChange] = Field(
        default_factory=list, description="Every facet whose value or state changed.")
    active: list[ActiveFacet] = Field(
        default_factory=list,
        description="The active facets after the rebuild: a subscriber needs no query.")
    provisional: list[ProvisionalFacet] = Field(
        default_factory=list,
        description="Facets the evidence points to but not yet surely (Provisional): what "
                    "PROFILE.md lists under \"Not yet sure\" and a prompt may ask to confirm.")


class ProfileRendered(Payload):
    version: int = Field(ge=1, description="The new PROFILE.md version (1, 2, ...).")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the new document.")
    blocks_changed: list[str] = Field(
        default_factory=list, description="The managed blocks whose content changed.")


class ProfileNotesSaved(Payload):
    markdown: str = Field(
        max_length=1_000_000,
        description="The whole PROFILE.md as the user edited it; only the notes outside the "
                    "managed blocks are taken.")
    base_version: int = Field(
        ge=0,
        description="The version the edit was made on; a save over a newer one is a conflict.")


class RulePriority(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class RuleSource(StrEnum):
    USER_EXPLICIT = "user_explicit"
    POST_TURN = "post_turn"
    PROGRAMMATIC = "programmatic"


class RuleScope(StrEnum):
    USER = "user"
    TENANT = "tenant"


class ToolRuleUpserted(Payload):
    """The whole rule as it now stands (version 2: scope, source, times and causation)."""

    rule_id: str = Field(
        min_length=1, max_length=128,
        description="The rule, unique per user; upserting it again replaces it.")
    tool_name: str = Field(
        min_length=1, max_length=128,
        description="The tool the rule applies to, trimmed and lower-case; `*` is every tool.")
    rule: str = Field(
        min_length=1, max_length=4000, description="The rule's text, as the prompt will carry it.")
    priority: RulePriority = Field(
        default=RulePriority.NORMAL,
        description="critical and high are pinned into every prompt that may use the tool; "
                    "normal is recalled on demand.")
    source: RuleSource = Field(
        default=RuleSource.PROGRAMMATIC,
        description="Where the rule came from: the user's own words, a turn's outcome, or a "
                    "program (a platform's safety pipeline, an API call).")
    tags: list[str] = Field(
        default_factory=list, max_length=32, description="Free labels, for filtering.")
    scope: RuleScope = Field(
        default=RuleScope.USER,
        description="`user`: the event's user only; `tenant`: every user of the tenant (the "
                    "event's user is then `_tenant`).")
    created_at: Timestamp | None = Field(
        default=None, ge=0,
        description="When the rule was first stored (epoch seconds); absent before version 2.")
    updated_at: Timestamp | None = Field(
        default=None, ge=0,
        description="When it last changed (epoch seconds); absent before version 2: the "
                    "event's occurred_at.")
    causation: str | None = Field(
        default=None, max_length=256,
        description="What it came from: `turn:<session>/<turn>` or the request's correlation "
                    "id.")


def tool_rule_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had a free-form `source` (`user` for a user's own rule)."""
    source = payload.get("source")
    payload["source"] = "user_explicit" if source in (None, "user") else "programmatic"
    return payload


class ToolRuleDeleted(Payload):
    rule_id: str = Field(min_length=1, max_length=128, description="The rule removed.")
    tool_name: str = Field(min_length=1, max_length=128, description="The tool it applied to.")


class RouteDecided(Payload):
    query_id: str = Field(min_length=1, max_length=128, description=(
        "The decision (its id: an agent reports it with the trace that followed, "
        "`TraceCompleted.decision_id`)."))
    model: str = Field(min_length=1, max_length=256, description="The model chosen.")
    policy: str = Field(
        min_length=1, max_length=128, description="The routing policy that chose it.")
    reason: str | None = Field(default=None, max_length=2000, description="Why, in words.")
    scores: dict[str, float] = Field(
        default_factory=dict, description="Each candidate model's score.")
    query_class: str | None = Field(default=None, max_length=64, description=(
        "The query's class (code, math, short, long, general)."))
    propensity: float | None = Field(default=None, gt=0, le=1, description=(
        "The probability the policy had of choosing this model among those offered (1 for a "
        "deterministic policy): what an off-policy estimate weighs the decision by."))
    offered: list[str] = Field(default_factory=list, max_length=200, description=(
        "The models that were offered."))
    urgency: float | None = Field(default=None, ge=0, le=1, description=(
        "The request's urgency, as the policy read it."))
    default_model: str | None = Field(default=None, max_length=256, description=(
        "The request's default model."))
    fallback_model: str | None = Field(default=None, max_length=256, description=(
        "The request's fallback model."))
    configuration: int | None = Field(default=None, ge=0, description=(
        "The tenant's configuration version the decision followed (0: none applied)."))


class AdviceItem(Payload):
    kind: Literal["agent_structure", "routing"] = Field(description=(
        "agent_structure (the agent's plan: many tool calls in problem traces) or routing "
        "(a query class failing on its models)."))
    summary: str = Field(max_length=2000, description="The advice in one line.")
    detail: str = Field(max_length=4000, description="What the traces show and what to change.")
    evidence_trace_ids: list[str] = Field(default_factory=list, max_length=20, description=(
        "The traces it rests on, newest first."))


class AdviceIssued(Payload):
    """The advisor's recommendations for a tenant changed (published for `_tenant` when the
    trace router relearns and finds them different from the last ones issued): what an agent
    platform subscribes to, to act on advice without polling `advisor.recommendations`."""

    analyzed: int = Field(ge=0, description="Traces read.")
    problems: int = Field(ge=0, description="Of them, not a success or slower than 5 s.")
    confidence: float = Field(ge=0, le=1, description="1 - problems / analyzed.")
    recommendations: list[AdviceItem] = Field(default_factory=list, max_length=50, description=(
        "The advice, structure first, then routing by failures (empty: the last advice no "
        "longer applies)."))
    digest: str = Field(pattern=r"^[0-9a-f]{64}$", description=(
        "SHA-256 of the recommendations: equal digests, equal advice."))


class RoutingPolicyUpdated(Payload):
    policy: str = Field(min_length=1, max_length=128, description="The policy that changed.")
    version: int = Field(ge=1, description="Its new version (1, 2, ...).")
    parameters: dict[str, Any] = Field(default_factory=dict, description="Its learned parameters.")


class SourceSummarised(Payload):
    """One window of a source's material went through the LLM extractor. Published after the
    window's `CandidateEmitted` events, so a reader that sees it knows the window is complete."""

    source: str = Field(
        min_length=1, max_length=600,
        description="The source (`conversations`, `email`, `document:<source_id>`).")
    window_id: str = Field(
        min_length=1, max_length=128,
        description="The window: a hash of its material, its kind and the prompt version.")
    kind: Literal["extract", "reflect"] = Field(
        description="`extract`: a window of a source; `reflect`: one complex turn.")
    summary: str = Field(
        max_length=4000, description="The source's rolling summary after this window.")
    prompt_version: str = Field(
        min_length=1, max_length=64, description="The prompt the window was extracted with.")
    model: str = Field(min_length=1, max_length=256, description="The model that answered.")
    evidence: list[EvidenceRef] = Field(
        default_factory=list, max_length=512, description="The material of the window.")
    facets_emitted: int = Field(ge=0, description="Candidates published for it.")
    facets_rejected: int = Field(ge=0, description="Facets quarantined by validation.")
    observations: list[str] = Field(
        default_factory=list, max_length=20,
        description="Reflections only: what the turn showed about the user's work.")
    patterns: list[str] = Field(
        default_factory=list, max_length=20,
        description="Reflections only: recurring ways of working it fits.")


class ReextractionRequested(Payload):
    """An operator's request to extract windows again with the current prompt version
    (a new prompt never re-spends tokens on old material unless asked)."""

    since: float = Field(
        ge=0, description="Windows closed at or after this time (epoch seconds).")
    prompt_version: str = Field(
        min_length=1, max_length=64, description="The prompt version to extract them with.")
    source: str | None = Field(
        default=None, max_length=600, description="Only this source (all when absent).")


class ConnectedAccountSynced(Payload):
    """A provider sync seen on the ingest stream, restated as a domain event so the profile's
    document is rendered from one stream, in one order."""

    toolkit: str = Field(
        min_length=1, max_length=128, description="The provider (gmail, github, slack, ...).")
    connection_id: str = Field(
        min_length=1, max_length=256,
        description="The connected account, unique within the toolkit.")
    label: str = Field(
        default="", max_length=512,
        description="How the profile names the account, e.g. its email address.")


class UserErased(Payload):
    reason: str | None = Field(
        default=None, max_length=500,
        description="Why, for the audit trail (never the user's data).")


class HabitStatus(StrEnum):
    CANDIDATE = "candidate"
    ACTIVE = "active"
    DORMANT = "dormant"
    ARCHIVED = "archived"
    SUPPRESSED_BY_LAW = "suppressed_by_law"
    DISABLED = "disabled"


class ReviewStatus(StrEnum):
    """Where a habit stands in review. Approval is not a status: an approved habit waiting for
    evidence, law or a duplicate decision is still a candidate, approved pending that."""

    AWAITING_REVIEW = "awaiting_review"
    COLLECTING_EVIDENCE = "collecting_evidence"
    APPROVED_PENDING_ELIGIBILITY = "approved_pending_eligibility"
    APPROVED_PENDING_CONFLICT = "approved_pending_conflict"
    APPROVED_PENDING_LAW = "approved_pending_law"
    DUPLICATE_RESOLUTION = "duplicate_resolution"
    ACCEPTED_ACTIVE = "accepted_active"
    PROMOTED_ACTIVE = "promoted_active"
    REJECTED = "rejected"
    REAPPROVAL_REQUIRED = "candidate_reapproval_required"
    CONTRADICTED = "contradicted_pending_review"
    MERGED = "merged"
    SUPERSEDED = "superseded"
    ARCHIVED = "archived"
    DISABLED = "disabled"
    SUPPRESSED = "suppressed_by_law"


HabitId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]
Wording = Annotated[str, Field(min_length=1, max_length=2000)]
Polarity = Annotated[int, Field(ge=-1, le=1)]
Bp = Annotated[int, Field(ge=0, le=10_000)]
LawHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Day = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")]


class HabitSupport(Payload):
    """One observation that bears on a habit: which, on what day, for or against it."""

    ref: str = Field(min_length=1, max_length=128,
                     description="The observation (the ingest event id it was captured from).")
    day: Day = Field(description="Its UTC day; eligibility needs support on two distinct days.")
    polarity: Polarity = Field(
        default=1, description="1: it affirms the habit; -1: it contradicts it.")
    confidence_bp: Bp = Field(default=5000, description="How strongly, in basis points.")


class HabitSuggested(Payload):
    habit_id: HabitId = Field(description="The habit, unique per user.")
    when: Wording = Field(description="The situation it applies in (`When:`).")
    do: Wording = Field(description="What the agent should then do (`Do:`).")
    evidence: list[EvidenceRef] = Field(
        default_factory=list, max_length=64, description="The ingest events it was learned from.")
    polarity: Polarity = Field(
        default=1, description="1: do it; -1: the habit is to avoid it.")
    support: list[HabitSupport] = Field(
        default_factory=list, max_length=512, description="The observations behind it.")
    confidence_bp: Bp = Field(default=5000, description="How sure the proposer is.")
    origin: Literal["analyze", "declared"] = Field(
        default="analyze", description="Proposed by Analyze, or declared by the user.")
    review_status: ReviewStatus = Field(
        default=ReviewStatus.AWAITING_REVIEW, description="Where it starts in review.")


class HabitEvidenceAdded(Payload):
    """Analyze saw the same normalised habit again: more support, the approval unchanged."""

    habit_id: HabitId = Field(description="The habit.")
    support: list[HabitSupport] = Field(min_length=1, max_length=512,
                                        description="The new observations.")
    evidence: list[EvidenceRef] = Field(default_factory=list, max_length=64,
                                        description="Their ingest events.")
    confidence_bp: Bp | None = Field(default=None, description="The habit's new confidence.")


class HabitApproved(Payload):
    habit_id: HabitId = Field(description="The habit approved.")
    identity: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$",
        description="The normalised wording approved; the approval holds only while it stays.")
    outcome: ReviewStatus = Field(
        default=ReviewStatus.ACCEPTED_ACTIVE,
        description="`accepted_active`, or what it waits for: `approved_pending_eligibility`, "
                    "`approved_pending_conflict`, `approved_pending_law`, "
                    "`duplicate_resolution`.")
    law_hash: LawHash | None = Field(default=None, description="The law it was checked against.")
    blocked_by: list[str] = Field(
        default_factory=list, max_length=128,
        description="What holds it back: law patterns, a conflicting or duplicate habit id.")
    declared: bool = Field(
        default=False,
        description="The user declared this wording (it then needs no repeated evidence, "
                    "even if Analyze suggested it first).")


class HabitActivated(Payload):
    """An approved habit whose wait ended (evidence arrived, a duplicate was resolved)."""

    habit_id: HabitId = Field(description="The habit.")
    identity: str = Field(pattern=r"^[0-9a-f]{64}$",
                          description="The approved identity it is activated under.")
    law_hash: LawHash = Field(description="The law it was checked against.")


class HabitRejected(Payload):
    habit_id: HabitId = Field(description="The habit rejected.")
    reason: str | None = Field(
        default=None, max_length=2000, description="Why, in the user's words.")


class HabitEdited(Payload):
    habit_id: HabitId = Field(description="The habit edited.")
    when: Wording = Field(description="The situation it applies in, as edited.")
    do: Wording = Field(description="What the agent should then do, as edited.")
    polarity: Polarity | None = Field(default=None, description="The polarity, if changed.")


class HabitRetired(Payload):
    habit_id: HabitId = Field(description="The habit retired (archived).")
    reason: str | None = Field(default=None, max_length=2000, description="Why it was retired.")


class HabitDisabled(Payload):
    habit_id: HabitId = Field(description="The habit switched off; it keeps its approval.")
    reason: str | None = Field(default=None, max_length=2000, description="Why.")


class HabitEnabled(Payload):
    habit_id: HabitId = Field(description="The habit switched back on.")
    law_hash: LawHash = Field(description="The law it was re-checked against.")


class HabitDormant(Payload):
    habit_id: HabitId = Field(description="The active habit a strong contradiction put to sleep.")
    replaced_by: HabitId | None = Field(
        default=None, description="The contradicting proposal (it stays a proposal).")


class HabitSuppressedByLaw(Payload):
    habit_id: HabitId = Field(description="The habit the tenant's law now forbids.")
    law_hash: LawHash = Field(description="The law that forbids it.")
    patterns: list[str] = Field(default_factory=list, max_length=64,
                                description="The law's patterns it matched.")


class HabitMerged(Payload):
    habit_id: HabitId = Field(description="The duplicate absorbed (archived).")
    into: HabitId = Field(description="The habit that keeps its evidence.")


class HabitSuperseded(Payload):
    habit_id: HabitId = Field(description="The habit replaced (archived).")
    by: HabitId = Field(description="The habit that replaces it.")


class HabitDuplicateFound(Payload):
    habit_id: HabitId = Field(description="The older habit of the pair.")
    other_id: HabitId = Field(description="The newer habit of the pair.")
    similarity_bp: Bp = Field(description="The lower of the two wordings' similarities.")
    strong: bool = Field(description="At or above the strong threshold.")


class HabitDuplicateResolved(Payload):
    habit_id: HabitId = Field(description="The older habit of the pair.")
    other_id: HabitId = Field(description="The newer habit of the pair.")
    decision: Literal["merged", "superseded", "kept_separate", "archived_duplicate"] = Field(
        description="What the person decided.")


class HabitLawSet(Payload):
    """A tenant's law (published for the tenant-wide user `_tenant`)."""

    text: str = Field(max_length=1_000_000, description="The law document.")
    law_hash: LawHash = Field(description="SHA-256 of the text.")


class HabitSettingsChanged(Payload):
    """A tenant's habit settings (published for `_tenant`)."""

    retention_days: Literal[7, 14, 30] = Field(
        default=7, description="How long captured observations are kept.")
    scheduled_analyze: bool = Field(
        default=False, description="Analyze each user's unread observations on a schedule.")
    project_names: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=500,
        description="Names a habit must not mention (projects, products): Analyze quarantines "
                    "proposals that do.")


# ---------------------------------------------------------------------- optimization

OptimizationId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class OptimizationRunStarted(Payload):
    """A tenant asked to search its configuration (published for `_tenant`). The run's whole
    definition, validated: what the optimizer's worker runs, and what a replay folds."""

    run_id: OptimizationId = Field(description="The run.")
    space: dict[str, Any] = Field(description=(
        "The search space: `search` (dimensions), `fixed` and `constraints`, as validated."))
    objectives: list[dict[str, Any]] = Field(
        min_length=1, max_length=10, description="`[{metric, direction, weight}]`.")
    proposer: Literal["random", "grid", "llm"] = Field(description="What proposes trials.")
    evaluator: Literal["counterfactual", "replay"] = Field(description="What scores them.")
    max_trials: int = Field(ge=1, le=500, description="At most this many trials.")
    patience: int = Field(ge=1, le=500, description=(
        "Stop after this many trials in a row without a better best trial."))
    seed: int = Field(description="Seeds the proposers that draw, so a run can be repeated.")
    best_by: Literal["weighted", "accuracy"] = Field(default="weighted", description=(
        "How the best trial is chosen: the objectives' weighted score, or accuracy alone."))
    replay: dict[str, Any] | None = Field(default=None, description=(
        "The replay evaluator's settings (sample, benchmark, judge), when it is the one."))
    since: float | None = Field(default=None, description=(
        "Only traces that started at or after this (epoch seconds) are evaluated over."))
    until: float | None = Field(default=None, description=(
        "Only traces that started before this are evaluated over."))
    baseline: dict[str, Any] = Field(default_factory=dict, description=(
        "The tenant's configuration when the run started: what every trial is applied over."))


class TrialEvaluated(Payload):
    """One trial of a run: the configuration proposed, what the evaluator measured, and the
    run's frontier and best trial with it (published for `_tenant`)."""

    run_id: OptimizationId = Field(description="The run.")
    trial_id: OptimizationId = Field(description="The trial (`<run_id>-t<n>`).")
    index: int = Field(ge=0, description="Its place in the run, from 0.")
    params: dict[str, Any] = Field(description="The configuration tried: dotted path -> value.")
    proposer: str = Field(max_length=64, description=(
        "What proposed it: random, grid, merge (from the frontier), llm."))
    reasoning: str | None = Field(default=None, max_length=4000, description=(
        "The proposer's reasons (the model's words for `llm`)."))
    parse_failure: bool = Field(default=False, description=(
        "The model's proposal could not be read: the fixed values were tried instead."))
    metrics: dict[str, float | None] = Field(description=(
        "Each objective's estimate (null: the evaluator could not support one)."))
    intervals: dict[str, list[float]] = Field(default_factory=dict, description=(
        "Each estimate's confidence interval, [low, high] (95 %)."))
    support: int = Field(ge=0, description=(
        "The recorded decisions (or replayed queries) the estimates rest on."))
    refused: str | None = Field(default=None, max_length=2000, description=(
        "Why the evaluator would not claim an estimate (too little support in the log)."))
    frontier: list[OptimizationId] = Field(default_factory=list, description=(
        "The run's Pareto frontier after this trial (trial ids, in trial order)."))
    best_trial_id: OptimizationId | None = Field(default=None, description=(
        "The run's best trial after this one."))


class OptimizationRunCompleted(Payload):
    """A run ended: every trial it was allowed, or the patience ran out (published for
    `_tenant`)."""

    run_id: OptimizationId = Field(description="The run.")
    trials: int = Field(ge=0, description="How many trials it evaluated.")
    best_trial_id: OptimizationId | None = Field(default=None, description="Its best trial.")
    frontier: list[OptimizationId] = Field(default_factory=list, description=(
        "Its Pareto frontier (trial ids, in trial order)."))
    stopped_early: bool = Field(default=False, description=(
        "It stopped because `patience` trials in a row found nothing better."))


class OptimizationRunStopped(Payload):
    """A run was stopped before its end (by the tenant, or by a deployment stopping it)."""

    run_id: OptimizationId = Field(description="The run.")
    reason: str = Field(max_length=2000, description="Why.")


class OptimizationRunFailed(Payload):
    """A run could not go on (its evaluator failed for good)."""

    run_id: OptimizationId = Field(description="The run.")
    error: str = Field(max_length=4000, description="What failed.")


class ConfigurationApplied(Payload):
    """The tenant's configuration changed: a trial's parameters were applied, or an earlier
    change was undone (published for `_tenant`). `params` is the whole configuration from now
    on; `previous` what it replaced, so an undo is itself an auditable event."""

    version: int = Field(ge=1, description="The configuration's version (1, 2, ...).")
    params: dict[str, Any] = Field(description="The configuration: dotted path -> value.")
    previous: dict[str, Any] = Field(default_factory=dict, description="What it replaced.")
    run_id: OptimizationId | None = Field(default=None, description="The run it came from.")
    trial_id: OptimizationId | None = Field(default=None, description="The trial applied.")
    undoes: int | None = Field(default=None, ge=1, description=(
        "The version this change undid (it restores the one before it)."))
