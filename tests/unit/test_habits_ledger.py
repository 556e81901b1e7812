"""The habit fold (services/habits/ledger.py): what each event does to a habit, and the one
invariant everything rests on: a habit is active only under an approval of its current wording.

The property test folds random event sequences and checks them against an oracle of its own
(the approvals it has seen since the last identity-changing edit), not against ledger.py's code.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

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
from habitus.events.evidence import TurnRef
from services.habits import identity as ident
from services.habits.ledger import Habit, Support, absorb, evolve, merge_support

S, R = HabitStatus, ReviewStatus
LAW = ident.sha256("")
OTHER_LAW = ident.sha256("deny: tables")
COND, DO = "When I ask for a status report", "Keep it to three bullet points"

# ---------------------------------------------------------------------------------------------
# the property: random event sequences over three habits
# ---------------------------------------------------------------------------------------------

IDS = ("h-status", "h-summary", "h-review")
#: the first two of each differ only in case and spacing: the same normalised identity
CONDITIONS = (
    "When I ask for a status report",
    "  when i ask for a STATUS   report ",
    "When I ask for a weekly summary",
)
BEHAVIORS = (
    "Keep it to three bullet points",
    "keep it to three   Bullet points",
    "Use a short table",
)
POLARITIES = (1, -1)
REFS = tuple(f"ev-{i}" for i in range(6))
DAYS = ("2024-05-01", "2024-05-02", "2024-05-03")

Wording = tuple[str, str, int]


def identity_of(w: Wording) -> str:
    return ident.identity(*w)


@dataclass(frozen=True)
class Step:
    """One event, with its identity left symbolic until the fold reaches it: `"none"` (an
    approval without one), `"current"` (the wording the habit has then), or a pool wording
    (stale, or by chance the current one)."""

    kind: str
    habit_id: str
    args: dict[str, Any] = field(default_factory=dict)


supports = st.lists(
    st.builds(HabitSupport, ref=st.sampled_from(REFS), day=st.sampled_from(DAYS),
              polarity=st.sampled_from((1, -1)),
              confidence_bp=st.sampled_from((2500, 7500, 9000))),
    min_size=1, max_size=4)
wordings = st.tuples(st.sampled_from(CONDITIONS), st.sampled_from(BEHAVIORS),
                     st.sampled_from(POLARITIES))
identities = st.one_of(st.just("current"), wordings)
#: mostly the first habit, so long stories about one habit are common
ids = st.sampled_from((IDS[0], IDS[0], IDS[0], IDS[1], IDS[2]))


def step(kind: str, **args: Any) -> st.SearchStrategy[Step]:
    return st.builds(Step, st.just(kind), ids, st.fixed_dictionaries(args))


KINDS: dict[str, st.SearchStrategy[Step]] = {
    "suggested": step("suggested", wording=wordings, support=supports,
                      origin=st.sampled_from(("analyze", "declared"))),
    "evidence": step("evidence", support=supports),
    "approved": step("approved", identity=st.one_of(st.just("none"), identities),
                     outcome=st.one_of(st.sampled_from((R.ACCEPTED_ACTIVE, R.PROMOTED_ACTIVE)),
                                       st.sampled_from(list(ReviewStatus)))),
    "activated": step("activated", identity=identities),
    "enabled": step("enabled"),
    "rejected": step("rejected"),
    "edited": step("edited", wording=wordings, keep_polarity=st.booleans()),
    "retired": step("retired"),
    "disabled": step("disabled"),
    "dormant": step("dormant"),
    "suppressed": step("suppressed"),
    "merged": step("merged", into=ids),
    "superseded": step("superseded", by=ids),
}
#: how often each comes: the events that end a habit (it stays archived) are rare, so most
#: sequences tell a long story of approvals, edits, activations and re-enables
WEIGHTS = {"suggested": 2, "evidence": 2, "approved": 8, "activated": 6, "enabled": 6,
           "rejected": 1, "edited": 10, "retired": 1, "disabled": 4, "dormant": 2,
           "suppressed": 2, "merged": 1, "superseded": 1}
steps = st.sampled_from([k for k, n in WEIGHTS.items() for _ in range(n)]).flatmap(
    KINDS.__getitem__)


def resolve(choice: Any, current: Wording | None) -> str | None:
    if choice == "none":
        return None
    if choice == "current":
        return identity_of(current) if current is not None else identity_of(
            (CONDITIONS[0], BEHAVIORS[0], 1))
    return identity_of(choice)


def payload_for(s: Step, current: Wording | None) -> Payload:
    a, h = s.args, s.habit_id
    match s.kind:
        case "suggested":
            when, do, polarity = a["wording"]
            return HabitSuggested(habit_id=h, when=when, do=do, polarity=polarity,
                                  support=a["support"], origin=a["origin"],
                                  evidence=[TurnRef(session_id="s1", turn_id="t1")])
        case "evidence":
            return HabitEvidenceAdded(habit_id=h, support=a["support"])
        case "approved":
            return HabitApproved(habit_id=h, identity=resolve(a["identity"], current),
                                 outcome=a["outcome"], law_hash=LAW)
        case "activated":
            activated = resolve(a["identity"], current)
            assert activated is not None
            return HabitActivated(habit_id=h, identity=activated, law_hash=LAW)
        case "enabled":
            return HabitEnabled(habit_id=h, law_hash=LAW)
        case "rejected":
            return HabitRejected(habit_id=h, reason="not how I work")
        case "edited":
            when, do, polarity = a["wording"]
            return HabitEdited(habit_id=h, when=when, do=do,
                               polarity=None if a["keep_polarity"] else polarity)
        case "retired":
            return HabitRetired(habit_id=h)
        case "disabled":
            return HabitDisabled(habit_id=h)
        case "dormant":
            return HabitDormant(habit_id=h)
        case "suppressed":
            return HabitSuppressedByLaw(habit_id=h, law_hash=OTHER_LAW, patterns=["law:1"])
        case "merged":
            return HabitMerged(habit_id=h, into=a["into"])
        case "superseded":
            return HabitSuperseded(habit_id=h, by=a["by"])
    raise AssertionError(s.kind)


@dataclass
class Oracle:
    """What the log says about one habit, tracked without ledger.py."""

    wording: Wording | None = None
    #: identities a HabitApproved approved, since the last edit that changed the identity
    approvals: set[str] = field(default_factory=set)

    def see(self, p: Payload) -> None:
        if isinstance(p, HabitSuggested):
            if self.wording is None:
                self.wording = (p.when, p.do, p.polarity)
            return
        if self.wording is None:
            return
        if isinstance(p, HabitEdited):
            new = (p.when, p.do, self.wording[2] if p.polarity is None else p.polarity)
            if identity_of(new) != identity_of(self.wording):
                self.approvals.clear()
            self.wording = new
        elif isinstance(p, HabitApproved):
            approved = p.identity or identity_of(self.wording)
            if approved == identity_of(self.wording):
                self.approvals.add(approved)


#: how a habit may enter ACTIVE: (status before, event)
ACTIVATIONS = {(S.CANDIDATE, HabitApproved), (S.CANDIDATE, HabitActivated),
               (S.SUPPRESSED_BY_LAW, HabitActivated), (S.DISABLED, HabitEnabled)}


def fold(sequence: list[Step]) -> tuple[dict[str, Habit | None], list[Payload]]:
    habits: dict[str, Habit | None] = dict.fromkeys(IDS)
    oracles = {h: Oracle() for h in IDS}
    payloads = []
    for i, s in enumerate(sequence):
        p = payload_for(s, oracles[s.habit_id].wording)
        payloads.append(p)
        note(f"{i}: {p!r}")
        before = habits[s.habit_id]
        after = evolve(before, p, 1_700_000_000.0 + i)
        oracles[s.habit_id].see(p)
        habits[s.habit_id] = after
        check_step(before, after, p, oracles[s.habit_id])
    return habits, payloads


def check_step(before: Habit | None, after: Habit | None, p: Payload, oracle: Oracle) -> None:
    if oracle.wording is None:
        assert after is None
        return
    assert after is not None
    assert (after.condition, after.behavior, after.polarity) == oracle.wording
    current = identity_of(oracle.wording)
    if after.status is S.ACTIVE:
        event("active")
        # the invariant: an approval of this very wording, no identity-changing edit since
        assert current in oracle.approvals, (p, after)
        assert after.approved and after.approved_identity == current
    if before is None:
        return
    if before.status is S.ARCHIVED:
        assert after.status is S.ARCHIVED, "an archived habit stays archived"
    if after.status is S.ACTIVE and before.status is not S.ACTIVE:
        assert (before.status, type(p)) in ACTIVATIONS, (before.status, p)
    if after.status in (S.DORMANT, S.SUPPRESSED_BY_LAW) and after.status is not before.status:
        assert before.status is S.ACTIVE
    # the checksum seals the state: it changes exactly when the state does
    assert after.checksum == ident.checksum(after.state())
    assert (after.state() != before.state()) == (after.checksum != before.checksum)
    round_tripped = Habit.from_state(json.loads(json.dumps(after.state())))
    assert round_tripped.state() == after.state()
    assert round_tripped.checksum == after.checksum


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.builds(Step, st.just("suggested"), ids, st.fixed_dictionaries(
    {"wording": wordings, "support": supports, "origin": st.sampled_from(("analyze",))})),
    min_size=1, max_size=3), st.lists(steps, min_size=4, max_size=40))
def test_no_habit_is_ever_active_without_an_approval_of_its_current_wording(
        opening: list[Step], sequence: list[Step]) -> None:
    first, payloads = fold([*opening, *sequence])
    # replaying the same log gives the same habits, to the checksum
    replayed: dict[str, Habit | None] = dict.fromkeys(IDS)
    for i, p in enumerate(payloads):
        hid = p.habit_id  # type: ignore[attr-defined]
        replayed[hid] = evolve(replayed[hid], p, 1_700_000_000.0 + i)
    for hid in IDS:
        a, b = first[hid], replayed[hid]
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a.state() == b.state() and a.checksum == b.checksum


# ---------------------------------------------------------------------------------------------
# examples
# ---------------------------------------------------------------------------------------------

T0 = 1_700_000_000.0


def run(*payloads: Payload, habit: Habit | None = None) -> Habit:
    for i, p in enumerate(payloads):
        habit = evolve(habit, p, T0 + i)
    assert habit is not None
    return habit


def suggested(habit_id: str = "h1", when: str = COND, do: str = DO, polarity: int = 1,
              support: list[HabitSupport] | None = None) -> HabitSuggested:
    return HabitSuggested(habit_id=habit_id, when=when, do=do, polarity=polarity,
                          support=support or [])


def active(habit_id: str = "h1") -> Habit:
    h = run(suggested(habit_id))
    h = run(HabitApproved(habit_id=habit_id, identity=h.identity, law_hash=LAW), habit=h)
    assert h.status is S.ACTIVE and h.approved
    return h


def test_a_suggestion_starts_a_candidate_and_a_second_one_changes_nothing() -> None:
    h = run(suggested())
    assert (h.status, h.review_status, h.approved, h.version) == (
        S.CANDIDATE, R.AWAITING_REVIEW, False, 1)
    assert h.created_at == h.updated_at == T0
    assert evolve(h, suggested(do="Use a short table"), T0 + 5) is h
    assert evolve(None, HabitApproved(habit_id="h1"), T0) is None


def test_an_edit_of_case_and_spacing_only_keeps_the_approval() -> None:
    h = active()
    edited = run(HabitEdited(habit_id="h1", when="  when I ask for a STATUS  report",
                             do="keep it to THREE bullet points "), habit=h)
    assert edited.status is S.ACTIVE
    assert edited.review_status is R.ACCEPTED_ACTIVE
    assert edited.approved and edited.identity == h.identity
    assert edited.condition == "  when I ask for a STATUS  report"  # the new text is kept
    assert edited.version == h.version + 1 and edited.checksum != h.checksum


def test_a_rewording_of_an_active_habit_asks_for_reapproval() -> None:
    h = active()
    edited = run(HabitEdited(habit_id="h1", when=COND, do="Keep it to five bullet points"),
                 habit=h)
    assert edited.status is S.CANDIDATE
    assert edited.review_status is R.REAPPROVAL_REQUIRED
    assert edited.review_status.value == "candidate_reapproval_required"
    assert edited.approved is False


def test_a_polarity_change_is_a_rewording() -> None:
    edited = run(HabitEdited(habit_id="h1", when=COND, do=DO, polarity=-1), habit=active())
    assert (edited.status, edited.review_status, edited.approved) == (
        S.CANDIDATE, R.REAPPROVAL_REQUIRED, False)


def test_rewording_back_does_not_restore_the_old_approval() -> None:
    """A -> B -> A: the person was asked to reapprove; a stale activation of A (published
    before the edits) or an enable must not bring the habit back without a new approval."""
    h = active()
    old = h.identity
    h = run(HabitDisabled(habit_id="h1"), habit=h)
    h = run(HabitEdited(habit_id="h1", when=COND, do="Use a short table"), habit=h)
    h = run(HabitEdited(habit_id="h1", when=COND, do=DO), habit=h)
    assert h.identity == old
    assert h.status is S.CANDIDATE and h.review_status is R.REAPPROVAL_REQUIRED
    assert not h.approved
    assert evolve(h, HabitActivated(habit_id="h1", identity=old, law_hash=LAW), T0 + 9) is h
    assert evolve(h, HabitEnabled(habit_id="h1", law_hash=LAW), T0 + 9) is h
    again = run(HabitApproved(habit_id="h1", identity=old, law_hash=LAW), habit=h)
    assert again.status is S.ACTIVE and again.approved


def test_an_approval_of_a_wording_the_habit_no_longer_has_changes_nothing() -> None:
    h = run(suggested())
    stale = ident.identity(COND, "Use a short table", 1)
    assert evolve(h, HabitApproved(habit_id="h1", identity=stale), T0 + 1) is h
    approved = run(HabitApproved(habit_id="h1", identity=None, law_hash=LAW), habit=h)
    assert approved.approved_identity == h.identity and approved.status is S.ACTIVE


def test_a_waiting_approval_stays_a_candidate_until_activated_under_its_identity() -> None:
    h = run(suggested())
    h = run(HabitApproved(habit_id="h1", identity=h.identity,
                          outcome=R.APPROVED_PENDING_ELIGIBILITY, law_hash=LAW), habit=h)
    assert (h.status, h.review_status, h.approved) == (
        S.CANDIDATE, R.APPROVED_PENDING_ELIGIBILITY, True)
    stale = ident.identity(COND, "Use a short table", 1)
    assert evolve(h, HabitActivated(habit_id="h1", identity=stale, law_hash=LAW), T0 + 5) is h
    # an enable is for a disabled habit, not a way round the wait
    assert evolve(h, HabitEnabled(habit_id="h1", law_hash=LAW), T0 + 5) is h
    on = run(HabitActivated(habit_id="h1", identity=h.identity, law_hash=OTHER_LAW), habit=h)
    assert (on.status, on.review_status, on.law_hash) == (S.ACTIVE, R.PROMOTED_ACTIVE,
                                                          OTHER_LAW)


def test_an_activation_needs_an_approval() -> None:
    h = run(suggested())
    assert evolve(h, HabitActivated(habit_id="h1", identity=h.identity, law_hash=LAW),
                  T0 + 1) is h


def test_a_rejected_habit_cannot_be_activated() -> None:
    h = run(suggested(), HabitRejected(habit_id="h1", reason="not how I work"))
    assert (h.status, h.review_status) == (S.ARCHIVED, R.REJECTED)
    for p in (HabitApproved(habit_id="h1", identity=h.identity, law_hash=LAW),
              HabitApproved(habit_id="h1", law_hash=LAW),
              HabitActivated(habit_id="h1", identity=h.identity, law_hash=LAW),
              HabitEnabled(habit_id="h1", law_hash=LAW)):
        assert evolve(h, p, T0 + 10) is h, p


def test_only_a_candidate_can_be_rejected() -> None:
    h = active()
    assert evolve(h, HabitRejected(habit_id="h1"), T0 + 5) is h


def test_disable_and_enable() -> None:
    off = run(HabitDisabled(habit_id="h1"), habit=active())
    assert (off.status, off.review_status, off.approved) == (S.DISABLED, R.DISABLED, True)
    assert evolve(off, HabitDisabled(habit_id="h1"), T0 + 5) is off
    on = run(HabitEnabled(habit_id="h1", law_hash=OTHER_LAW), habit=off)
    assert (on.status, on.review_status, on.law_hash) == (S.ACTIVE, R.ACCEPTED_ACTIVE,
                                                          OTHER_LAW)
    # a candidate that never was approved cannot be disabled
    h = run(suggested())
    assert evolve(h, HabitDisabled(habit_id="h1"), T0 + 5) is h


def test_merged_and_superseded_archive() -> None:
    merged = run(HabitMerged(habit_id="h1", into="h2"), habit=active())
    assert (merged.status, merged.review_status, merged.related_id) == (
        S.ARCHIVED, R.MERGED, "h2")
    superseded = run(HabitSuperseded(habit_id="h1", by="h3"), habit=run(suggested()))
    assert (superseded.status, superseded.review_status, superseded.related_id) == (
        S.ARCHIVED, R.SUPERSEDED, "h3")
    retired = run(HabitRetired(habit_id="h1"), habit=active())
    assert (retired.status, retired.review_status) == (S.ARCHIVED, R.ARCHIVED)


def sup(ref: str, day: str, polarity: int = 1) -> HabitSupport:
    return HabitSupport(ref=ref, day=day, polarity=polarity, confidence_bp=8000)


def test_absorb_merges_support_without_counting_a_ref_twice() -> None:
    kept = run(suggested("h1", support=[sup("ev-1", "2024-05-01"), sup("ev-2", "2024-05-01")]))
    dup = run(suggested("h2", support=[sup("ev-2", "2024-05-02"), sup("ev-3", "2024-05-02")]))
    merged = absorb(kept, dup, T0 + 10)
    assert [s.ref for s in merged.support] == ["ev-1", "ev-2", "ev-3"]
    # the first sighting of ev-2 is the one kept
    assert merged.support[1] == Support("ev-2", "2024-05-01", 1, 8000)
    assert merged.version == kept.version + 1 and merged.updated_at == T0 + 10
    assert merged.checksum == ident.checksum(merged.state())
    # absorbing again adds nothing more
    assert absorb(merged, dup, T0 + 11).support == merged.support


def test_evidence_counts_a_ref_once() -> None:
    h = run(suggested(support=[sup("ev-1", "2024-05-01")]))
    h = run(HabitEvidenceAdded(habit_id="h1",
                               support=[sup("ev-1", "2024-05-03"), sup("ev-2", "2024-05-02"),
                                        sup("ev-2", "2024-05-02")],
                               confidence_bp=8100), habit=h)
    assert [(s.ref, s.day) for s in h.support] == [("ev-1", "2024-05-01"), ("ev-2", "2024-05-02")]
    assert h.confidence_bp == 8100
    again = run(HabitEvidenceAdded(habit_id="h1", support=[sup("ev-2", "2024-05-02")]), habit=h)
    assert again.support == h.support and again.confidence_bp == 8100
    assert merge_support([Support("a", "2024-05-01")], [Support("a", "2024-05-02")]) == (
        Support("a", "2024-05-01"),)


def test_evidence_keeps_the_approval() -> None:
    h = run(HabitEvidenceAdded(habit_id="h1", support=[sup("ev-9", "2024-05-03")]),
            habit=active())
    assert h.status is S.ACTIVE and h.approved


def test_dormant_only_from_active() -> None:
    for start in (run(suggested()), run(HabitDisabled(habit_id="h1"), habit=active()),
                  run(suggested(), HabitRejected(habit_id="h1"))):
        assert evolve(start, HabitDormant(habit_id="h1", replaced_by="h2"), T0 + 9) is start
    h = run(HabitDormant(habit_id="h1", replaced_by="h2"), habit=active())
    assert (h.status, h.review_status, h.related_id) == (S.DORMANT, R.CONTRADICTED, "h2")


def test_suppressed_only_from_active() -> None:
    p = HabitSuppressedByLaw(habit_id="h1", law_hash=OTHER_LAW, patterns=["law:1"])
    for start in (run(suggested()), run(HabitDisabled(habit_id="h1"), habit=active()),
                  run(HabitDormant(habit_id="h1"), habit=active())):
        assert evolve(start, p, T0 + 9) is start
    h = run(p, habit=active())
    assert (h.status, h.review_status, h.law_hash, h.blocked_by) == (
        S.SUPPRESSED_BY_LAW, R.SUPPRESSED, OTHER_LAW, ("law:1",))
    # a suppressed habit is not approved back into service behind the law's back
    assert evolve(h, HabitApproved(habit_id="h1", identity=h.identity, law_hash=LAW),
                  T0 + 10) is h
    # once the law allows it again its standing approval restores it, under the new law
    back = evolve(h, HabitActivated(habit_id="h1", identity=h.identity, law_hash=LAW), T0 + 11)
    assert back is not None
    assert (back.status, back.law_hash, back.blocked_by) == (S.ACTIVE, LAW, ())


def test_state_round_trips_with_its_checksum() -> None:
    h = run(suggested(support=[sup("ev-1", "2024-05-01")]),
            HabitEvidenceAdded(habit_id="h1", support=[sup("ev-2", "2024-05-02", -1)]),
            HabitApproved(habit_id="h1", outcome=R.APPROVED_PENDING_LAW, law_hash=LAW,
                          blocked_by=["bypass_safety"]))
    back = Habit.from_state(json.loads(json.dumps(h.state())))
    assert back == h and back.checksum == h.checksum
    assert Habit.from_state({**h.state(), "checksum": "forged"}).checksum == h.checksum
    assert dataclasses.replace(h, confidence_bp=1).sealed().checksum != h.checksum


def test_an_approval_of_a_declared_wording_makes_the_suggestion_a_declaration() -> None:
    h = run(suggested())
    assert h.origin == "analyze"
    waiting = run(HabitApproved(habit_id="h1", identity=h.identity, law_hash=LAW, declared=True,
                                outcome=R.DUPLICATE_RESOLUTION, blocked_by=["h2"]), habit=h)
    # waiting on a duplicate, it will not be asked for repeated evidence once that is resolved
    assert (waiting.origin, waiting.status, waiting.approved) == ("declared", S.CANDIDATE, True)
    plain = run(HabitApproved(habit_id="h1", identity=h.identity, law_hash=LAW), habit=h)
    assert plain.origin == "analyze"
