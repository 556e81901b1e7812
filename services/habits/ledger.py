"""A habit as the fold of its events: the one place that says what each event does to it.

The ledger projection folds with `evolve`; the review commands read the folded habit and decide
which event to publish. `evolve` applies what the log says but never breaks the invariant the
whole service rests on: a habit is active only under an approval of its current wording. An
activation whose approval no longer holds (the wording changed since) leaves the habit as it
was, whoever published it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from habitus.events.domain import (
    HabitActivated,
    HabitApproved,
    HabitDisabled,
    HabitDormant,
    HabitEdited,
    HabitEnabled,
    HabitEvidenceAdded,
    HabitMerged,
    HabitRejected,
    HabitRetired,
    HabitStatus,
    HabitSuggested,
    HabitSuperseded,
    HabitSupport,
    HabitSuppressedByLaw,
    ReviewStatus,
)
from habitus.events.envelope import Payload
from services.habits import identity as ident
from services.habits.scoring import eligible

Status = HabitStatus
Review = ReviewStatus

#: what an approval outcome leaves the habit as
_ACTIVE_OUTCOMES = (Review.ACCEPTED_ACTIVE, Review.PROMOTED_ACTIVE)


@dataclass(frozen=True)
class Support:
    ref: str
    day: str
    polarity: int = 1
    confidence_bp: int = 5000

    @classmethod
    def of(cls, s: HabitSupport) -> Support:
        return cls(s.ref, s.day, s.polarity, s.confidence_bp)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Habit:
    habit_id: str
    condition: str
    behavior: str
    polarity: int
    status: HabitStatus
    review_status: ReviewStatus
    confidence_bp: int
    origin: str
    created_at: float
    updated_at: float
    support: tuple[Support, ...] = ()
    evidence: tuple[dict[str, Any], ...] = ()
    approved_identity: str | None = None
    law_hash: str | None = None
    #: the ids this habit is blocked by (law patterns, a conflicting or duplicate habit)
    blocked_by: tuple[str, ...] = ()
    related_id: str | None = None
    version: int = 1
    checksum: str = field(default="", compare=False)

    @property
    def identity(self) -> str:
        return ident.identity(self.condition, self.behavior, self.polarity)

    @property
    def approved(self) -> bool:
        """Approved, and still under the wording that was approved."""
        return self.approved_identity is not None and self.approved_identity == self.identity

    @property
    def refs(self) -> list[tuple[str, str]]:
        return [(s.ref, s.day) for s in self.support if s.polarity > 0]

    def state(self) -> dict[str, Any]:
        """Everything the checksum covers (all but the checksum)."""
        data = dataclasses.asdict(self)
        data.pop("checksum")
        data["status"] = self.status.value
        data["review_status"] = self.review_status.value
        return data

    def sealed(self) -> Habit:
        return dataclasses.replace(self, checksum=ident.checksum(self.state()))

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> Habit:
        values = dict(data)
        values.pop("checksum", None)
        values["status"] = HabitStatus(values["status"])
        values["review_status"] = ReviewStatus(values["review_status"])
        values["support"] = tuple(Support(**s) for s in values.get("support", ()))
        values["evidence"] = tuple(dict(e) for e in values.get("evidence", ()))
        values["blocked_by"] = tuple(values.get("blocked_by", ()))
        return cls(**values).sealed()


def merge_support(old: Iterable[Support], new: Iterable[Support]) -> tuple[Support, ...]:
    """Support by ref, first sighting kept: a re-analysed observation counts once."""
    seen: dict[str, Support] = {}
    for s in (*old, *new):
        seen.setdefault(s.ref, s)
    return tuple(seen.values())


def _merge_evidence(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]
                    ) -> tuple[dict[str, Any], ...]:
    out: list[dict[str, Any]] = []
    for e in (*old, *new):
        if dict(e) not in out:
            out.append(dict(e))
    return tuple(out[-64:])


def _change(habit: Habit, at: float, **changes: Any) -> Habit:
    return dataclasses.replace(habit, updated_at=at, version=habit.version + 1,
                               **changes).sealed()


def evolve(habit: Habit | None, payload: Payload, at: float) -> Habit | None:
    """The habit after `payload` (an event about it, published at `at`); `habit` is None
    before its first event. An event that does not apply (no such habit, an activation
    without a standing approval) returns the habit unchanged."""
    if isinstance(payload, HabitSuggested):
        if habit is not None:
            return habit  # the id is taken: a replayed or conflicting suggestion changes nothing
        return Habit(
            habit_id=payload.habit_id, condition=payload.when, behavior=payload.do,
            polarity=payload.polarity, status=Status.CANDIDATE,
            review_status=payload.review_status, confidence_bp=payload.confidence_bp,
            origin=payload.origin, created_at=at, updated_at=at,
            support=merge_support((), (Support.of(s) for s in payload.support)),
            evidence=_merge_evidence((), (e.model_dump(mode="json") for e in payload.evidence)),
        ).sealed()
    if habit is None:
        return None
    if isinstance(payload, HabitEvidenceAdded):
        support = merge_support(habit.support, (Support.of(s) for s in payload.support))
        review = habit.review_status
        if review is Review.COLLECTING_EVIDENCE and eligible(
                [(s.ref, s.day) for s in support if s.polarity > 0]):
            review = Review.AWAITING_REVIEW  # enough evidence now to be worth a person's look
        return _change(
            habit, at, review_status=review, support=support,
            evidence=_merge_evidence(habit.evidence,
                                     (e.model_dump(mode="json") for e in payload.evidence)),
            confidence_bp=(habit.confidence_bp if payload.confidence_bp is None
                           else payload.confidence_bp))
    if isinstance(payload, HabitApproved):
        if habit.status is not Status.CANDIDATE:
            return habit  # only a candidate is reviewed; a rejected one must be declared anew
        approved = payload.identity or habit.identity
        if approved != habit.identity:
            return habit  # approved a wording the habit no longer has
        active = payload.outcome in _ACTIVE_OUTCOMES
        return _change(
            habit, at, approved_identity=approved,
            origin="declared" if payload.declared else habit.origin,
            status=Status.ACTIVE if active else Status.CANDIDATE,
            review_status=payload.outcome, law_hash=payload.law_hash,
            blocked_by=tuple(payload.blocked_by))
    if isinstance(payload, HabitActivated | HabitEnabled):
        # an activation ends an approved candidate's wait, or restores an approved habit the
        # law had suppressed once the law allows it again; an enable switches a disabled habit
        # back on: neither is a way round the other's checks
        from_statuses = ((Status.CANDIDATE, Status.SUPPRESSED_BY_LAW)
                         if isinstance(payload, HabitActivated) else (Status.DISABLED,))
        if not habit.approved or habit.status not in from_statuses:
            return habit
        if isinstance(payload, HabitActivated) and payload.identity != habit.identity:
            return habit
        review = Review.PROMOTED_ACTIVE if isinstance(payload, HabitActivated) \
            else Review.ACCEPTED_ACTIVE
        return _change(habit, at, status=Status.ACTIVE, review_status=review,
                       law_hash=payload.law_hash, blocked_by=())
    if isinstance(payload, HabitRejected):
        if habit.status is not Status.CANDIDATE:
            return habit
        return _change(habit, at, status=Status.ARCHIVED, review_status=Review.REJECTED)
    if isinstance(payload, HabitEdited):
        polarity = habit.polarity if payload.polarity is None else payload.polarity
        edited = dataclasses.replace(habit, condition=payload.when, behavior=payload.do,
                                     polarity=polarity)
        if edited.identity == habit.identity:
            return _change(habit, at, condition=payload.when, behavior=payload.do)
        status = (habit.status if habit.status in (Status.ARCHIVED, Status.SUPPRESSED_BY_LAW)
                  else Status.CANDIDATE)
        # the approval was of the old wording and ends here: rewording back later does not
        # bring it back (the person was asked to approve again)
        return _change(habit, at, condition=payload.when, behavior=payload.do,
                       polarity=polarity, status=status, approved_identity=None,
                       review_status=Review.REAPPROVAL_REQUIRED
                       if habit.approved_identity else habit.review_status)
    if isinstance(payload, HabitRetired):
        return _change(habit, at, status=Status.ARCHIVED, review_status=Review.ARCHIVED)
    if isinstance(payload, HabitDisabled):
        if habit.status is not Status.ACTIVE:
            return habit
        return _change(habit, at, status=Status.DISABLED, review_status=Review.DISABLED)
    if isinstance(payload, HabitDormant):
        if habit.status is not Status.ACTIVE:
            return habit
        return _change(habit, at, status=Status.DORMANT, review_status=Review.CONTRADICTED,
                       related_id=payload.replaced_by)
    if isinstance(payload, HabitSuppressedByLaw):
        if habit.status is not Status.ACTIVE:
            return habit
        return _change(habit, at, status=Status.SUPPRESSED_BY_LAW,
                       review_status=Review.SUPPRESSED, law_hash=payload.law_hash,
                       blocked_by=tuple(payload.patterns))
    if isinstance(payload, HabitMerged):
        return _change(habit, at, status=Status.ARCHIVED, review_status=Review.MERGED,
                       related_id=payload.into)
    if isinstance(payload, HabitSuperseded):
        return _change(habit, at, status=Status.ARCHIVED, review_status=Review.SUPERSEDED,
                       related_id=payload.by)
    return habit


def absorb(target: Habit, absorbed: Habit, at: float) -> Habit:
    """A merge's other half: the habit kept gains the duplicate's support and evidence."""
    return _change(target, at, support=merge_support(target.support, absorbed.support),
                   evidence=_merge_evidence(target.evidence, absorbed.evidence))


def re_stamp(habit: Habit, law_hash: str, at: float) -> Habit:
    """An active habit the new law allows: checked against it now."""
    if habit.law_hash == law_hash:
        return habit
    return _change(habit, at, law_hash=law_hash)
