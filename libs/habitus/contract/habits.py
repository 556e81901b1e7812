"""Parameters and results of `habits.*`: reviewed "When / Do" habits.

Every change names the habit and the checksum the caller last saw (`habits.list`,
`habits.list_review`, `habits.get` return it): a habit that changed meanwhile is a conflict
(409), never overwritten. Nothing becomes active without an approval, and an approval holds
only while the habit's normalised wording and polarity stay the ones approved.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from habitus.events.domain import HabitStatus, ReviewStatus
from habitus.ids import CallerUserId


def _text(value: str) -> str:
    text = " ".join(value.split())
    if not text:
        raise ValueError("must not be blank")
    return text


Wording = Annotated[str, StringConstraints(max_length=1000), AfterValidator(_text)]
HabitId = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                           pattern=r"^[A-Za-z0-9._:-]+$")]
Checksum = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Reason = Annotated[str, StringConstraints(max_length=2000)]

_USER = "The user whose habits these are."
_CHECKSUM = "The habit's checksum as last read; a habit changed since is a conflict (409)."


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmptyParams(_Params):
    pass


class ListReview(_Params):
    user_id: CallerUserId = Field(description=_USER)


class ListHabits(_Params):
    user_id: CallerUserId = Field(description=_USER)
    status: HabitStatus | None = Field(default=None, description="Only habits in this status.")


class HabitRef(_Params):
    user_id: CallerUserId = Field(description=_USER)
    habit_id: HabitId = Field(description="The habit.")


class Guarded(HabitRef):
    checksum: Checksum = Field(description=_CHECKSUM)
    reason: Reason | None = Field(default=None, description="Why, for the audit trail.")


class Declare(_Params):
    user_id: CallerUserId = Field(description=_USER)
    when: Wording = Field(description="The situation (`When:`), e.g. \"I ask for a status "
                                      "report\".")
    do: Wording = Field(description="What the agent should then do (`Do:`).")
    polarity: Literal[-1, 1] = Field(default=1, description="1: do it; -1: avoid it.")


class Edit(Guarded):
    when: Wording = Field(description="The new `When:`.")
    do: Wording = Field(description="The new `Do:`.")
    polarity: Literal[-1, 1] | None = Field(default=None, description="The new polarity.")


ReviewAction = Literal["approve", "reject", "merge", "supersede", "archive", "keep_separate"]


class ApplyReview(Guarded):
    action: ReviewAction = Field(description=(
        "approve / reject / archive the habit; with `other_id`, a possible duplicate pair: "
        "merge (this habit's evidence moves into `other_id`, this one is archived), "
        "supersede (this habit replaces `other_id`, and is approved), keep_separate."))
    other_id: HabitId | None = Field(default=None, description=(
        "The other habit of a duplicate pair (merge, supersede, keep_separate)."))


class SetLaw(_Params):
    text: Annotated[str, StringConstraints(max_length=1_000_000)] = Field(description=(
        "The tenant's law for habits. Beside the built-in denylist (bypassing safety, "
        "revealing secrets, skipping redaction or approval, ...), each line `deny: <regex>` "
        "forbids habits whose wording matches it. Active habits are re-checked at once."))


class Configure(_Params):
    retention_days: Literal[7, 14, 30] | None = Field(
        default=None, description="How long captured observations are kept (default 7).")
    scheduled_analyze: bool | None = Field(
        default=None, description="Analyze users' unread observations on a schedule.")
    project_names: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None \
        = Field(default=None, max_length=500, description=(
            "Names habits must not mention; Analyze quarantines proposals that do."))


class Analyze(_Params):
    user_id: CallerUserId = Field(description=_USER)
    max_records: int | None = Field(default=None, ge=1, le=500, description=(
        "Records per model call (default 200)."))
    max_bytes: int | None = Field(default=None, ge=65_537, le=2_000_000, description=(
        "Bytes per model call (default 80,000)."))


class HabitQuarantineQuery(_Params):
    user_id: CallerUserId = Field(description=_USER)
    limit: int = Field(default=100, ge=1, le=1000, description="The most items, newest first.")


class Select(_Params):
    user_id: CallerUserId = Field(description=_USER)
    request: Annotated[str, StringConstraints(min_length=1, max_length=20_000)] = Field(
        description="The user's current request: the only thing that can make a habit apply.")
    context: list[Annotated[str, StringConstraints(max_length=20_000)]] = Field(
        default_factory=list, max_length=16, description=(
            "Earlier turns, oldest first; they may resolve a reference in the request, never "
            "make a habit apply alone (the last 4, 300 characters each, are used)."))


class Habit(_Result):
    habit_id: str = Field(description="The habit.")
    when: str = Field(description="`When:` the situation.")
    do: str = Field(description="`Do:` what the agent does then.")
    polarity: int = Field(description="1: do it; -1: avoid it.")
    status: HabitStatus = Field(description="candidate, active, dormant, archived, "
                                            "suppressed_by_law or disabled.")
    review_status: ReviewStatus = Field(description="Where it stands in review.")
    approved: bool = Field(description="Approved, under its current wording.")
    confidence_bp: int = Field(description="Confidence in basis points (0-10000).")
    staleness: float = Field(description="0 fresh .. 1 stale; above 0.8 it is not selected.")
    support: int = Field(description="Distinct observations supporting it.")
    days: int = Field(description="Distinct days they were on.")
    origin: str = Field(description="analyze or declared.")
    blocked_by: list[str] = Field(description="What an approval waits for, if anything.")
    related_id: str | None = Field(description="The habit it was merged into, superseded by, "
                                               "or made dormant for.")
    checksum: str = Field(description="Pass it back with a change.")
    created_at: float = Field(description="Epoch seconds.")
    updated_at: float = Field(description="Epoch seconds.")


class HabitList(_Result):
    habits: list[Habit]
    proposals_off: str | None = Field(default=None, description=(
        "Why the habits service cannot propose habits (Analyze needs an LLM), e.g. "
        "`HABITUS_LLM_BASE_URL is unset`; null when it can. Declared habits work either way."))


class AuditEntry(_Result):
    event_type: str
    at: float
    actor: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class HabitDetail(_Result):
    habit: Habit
    audit: list[AuditEntry] = Field(description="Every change, oldest first.")


class ReviewItem(_Result):
    number: int = Field(description="Its number in this list.")
    text: str = Field(description="`When: ...` / `Do: ...`, as a person reviews it.")
    habit: Habit
    duplicates: list[int] = Field(description="Numbers of possible duplicates in this list.")
    similar: list[int] = Field(description="Numbers of items with much the same words.")


class Review(_Result):
    items: list[ReviewItem]
    pending_duplicates: int = Field(description="Duplicate pairs waiting for a decision.")


class Changed(_Result):
    habit: Habit = Field(description="The habit after the change.")
    outcome: str = Field(description="What happened: active, approved_pending_*, "
                                     "duplicate_resolution, rejected, archived, merged, ...")
    changed: list[str] = Field(description="Every habit id the change touched.")


class Law(_Result):
    law_hash: str
    text: str
    suppressed: list[str] = Field(default_factory=list,
                                  description="Active habits the law now forbids.")


class TenantSettings(_Result):
    retention_days: int
    scheduled_analyze: bool
    project_names: list[str]


class AnalyzeResult(_Result):
    batches: int = Field(description="Model calls made (or stored answers reused).")
    records: int = Field(description="Observations read.")
    suggested: int
    evidence_added: int
    quarantined: int
    dormant: int
    activated: int
    remaining: int = Field(description="Unread observations left (a failed batch stops).")
    error: str | None = Field(default=None, description="Why a batch failed, if one did.")


class QuarantinedProposal(_Result):
    first_seq: int = Field(description="The batch's first observation (stream sequence).")
    last_seq: int = Field(description="The batch's last observation.")
    reason: str = Field(description="Why it was refused: malformed_output, invalid_item, "
                                    "unknown_ref, empty_wording, wording_too_long, sensitive, "
                                    "names_a_path, names_a_version, names_an_id, "
                                    "names_a_project.")
    item: Any = Field(description="What the model proposed, redacted.")
    model: str = Field(description="The model that proposed it.")
    at: float = Field(description="When it was refused (epoch seconds).")


class HabitQuarantine(_Result):
    items: list[QuarantinedProposal]


class SteeringHabit(_Result):
    habit_id: str
    when: str
    do: str
    polarity: int = Field(description="1: do it; -1: avoid it.")


class Selection(_Result):
    habits: list[SteeringHabit] = Field(description="At most 3.")
    section: str = Field(description="The guidance block for the system prompt (\"\" if none).")
    steered_by: list[str] = Field(description="`When:` lines, for a \"Steered by habit\" mark.")
    reason: str | None = Field(default=None, description="Why nothing was selected.")
