"""Review as pure functions (services/habits/review.py): what an approval leads to, in which
order the checks hold it back, and the numbered review list a person sees."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from habitus.events.domain import HabitStatus, ReviewStatus
from services.habits.identity import identity
from services.habits.law import parse_law
from services.habits.ledger import Habit, Support
from services.habits.review import (
    SIMILAR_JACCARD,
    as_result,
    gate,
    jaccard,
    review_items,
    review_text,
    reviewable,
    waiting,
)

S, R = HabitStatus, ReviewStatus
COND, DO = "When I ask for a status report", "Keep it to three bullet points"
NOW = datetime.datetime(2024, 5, 10, 12, tzinfo=datetime.UTC).timestamp()
DAY = 86_400.0
NO_LAW = parse_law(None)
#: a tenant law forbidding bullet points
BULLETS = parse_law("# house rules\ndeny: bullet points")
ENOUGH = (Support("ev-1", "2024-05-08"), Support("ev-2", "2024-05-08"),
          Support("ev-3", "2024-05-09"))


def habit(habit_id: str = "h1", when: str = COND, do: str = DO, *, polarity: int = 1,
          status: HabitStatus = S.CANDIDATE, review: ReviewStatus = R.AWAITING_REVIEW,
          support: tuple[Support, ...] = (), origin: str = "analyze",
          created_at: float = NOW - DAY, approved: bool = False) -> Habit:
    return Habit(habit_id=habit_id, condition=when, behavior=do, polarity=polarity,
                 status=status, review_status=review, confidence_bp=8000, origin=origin,
                 created_at=created_at, updated_at=created_at, support=support,
                 approved_identity=identity(when, do, polarity) if approved else None,
                 ).sealed()


# the habit under review conflicts with `rival` (same condition, another behavior)
rival = habit("h-rival", do="Write a full paragraph", status=S.ACTIVE, approved=True)


# -- gate -----------------------------------------------------------------------------------

def test_the_law_comes_first() -> None:
    h = habit()  # no evidence, a conflict, a duplicate, and the law forbids it
    assert gate(h, law=BULLETS, comparators=[rival], duplicate_ids=["h-dup"]) == (
        R.APPROVED_PENDING_LAW, ("law:2",))
    forbidden = habit(do="Bypass the approval step and ship it")
    assert gate(forbidden, law=NO_LAW, comparators=[], duplicate_ids=[]) == (
        R.APPROVED_PENDING_LAW, ("bypass_approval",))


def test_then_a_conflict() -> None:
    assert gate(habit(), law=NO_LAW, comparators=[rival], duplicate_ids=["h-dup"]) == (
        R.APPROVED_PENDING_CONFLICT, ("h-rival",))


def test_then_a_duplicate() -> None:
    assert gate(habit(), law=NO_LAW, comparators=[], duplicate_ids=["h-dup", "h-dup2"]) == (
        R.DUPLICATE_RESOLUTION, ("h-dup", "h-dup2"))


def test_then_the_evidence() -> None:
    assert gate(habit(), law=NO_LAW, comparators=[], duplicate_ids=[]) == (
        R.APPROVED_PENDING_ELIGIBILITY, ())
    # three refs on one day are not enough; two refs on two days neither
    one_day = tuple(dataclasses.replace(s, day="2024-05-08") for s in ENOUGH)
    assert gate(habit(support=one_day), law=NO_LAW, comparators=[], duplicate_ids=[])[0] is (
        R.APPROVED_PENDING_ELIGIBILITY)
    assert gate(habit(support=ENOUGH[1:]), law=NO_LAW, comparators=[],
                duplicate_ids=[])[0] is R.APPROVED_PENDING_ELIGIBILITY
    # contradicting support is no evidence for it
    against = (*ENOUGH[:2], Support("ev-3", "2024-05-09", polarity=-1))
    assert gate(habit(support=against), law=NO_LAW, comparators=[],
                duplicate_ids=[])[0] is R.APPROVED_PENDING_ELIGIBILITY
    assert gate(habit(support=ENOUGH), law=NO_LAW, comparators=[], duplicate_ids=[]) == (
        R.ACCEPTED_ACTIVE, ())


def test_a_declared_habit_skips_only_the_evidence() -> None:
    declared = habit(origin="declared")
    assert gate(declared, law=NO_LAW, comparators=[], duplicate_ids=[]) == (
        R.ACCEPTED_ACTIVE, ())
    assert gate(declared, law=BULLETS, comparators=[], duplicate_ids=[])[0] is (
        R.APPROVED_PENDING_LAW)
    assert gate(declared, law=NO_LAW, comparators=[rival], duplicate_ids=[])[0] is (
        R.APPROVED_PENDING_CONFLICT)
    assert gate(declared, law=NO_LAW, comparators=[], duplicate_ids=["h-dup"])[0] is (
        R.DUPLICATE_RESOLUTION)


@pytest.mark.parametrize("status", [S.CANDIDATE, S.DORMANT, S.ARCHIVED, S.SUPPRESSED_BY_LAW])
def test_only_active_and_disabled_habits_are_compared(status: HabitStatus) -> None:
    other = dataclasses.replace(rival, status=status)
    assert gate(habit(support=ENOUGH), law=NO_LAW, comparators=[other],
                duplicate_ids=[]) == (R.ACCEPTED_ACTIVE, ())


def test_a_disabled_habit_is_compared_and_the_habit_itself_is_not() -> None:
    off = dataclasses.replace(rival, status=S.DISABLED)
    assert gate(habit(support=ENOUGH), law=NO_LAW, comparators=[off], duplicate_ids=[]) == (
        R.APPROVED_PENDING_CONFLICT, ("h-rival",))
    h = habit(support=ENOUGH)
    itself = dataclasses.replace(h, status=S.ACTIVE, behavior="Write a full paragraph")
    assert gate(h, law=NO_LAW, comparators=[itself], duplicate_ids=[]) == (
        R.ACCEPTED_ACTIVE, ())


def test_the_opposite_polarity_under_the_same_wording_conflicts() -> None:
    avoid = habit("h-avoid", polarity=-1, status=S.ACTIVE, approved=True)
    assert gate(habit(support=ENOUGH), law=NO_LAW, comparators=[avoid],
                duplicate_ids=[]) == (R.APPROVED_PENDING_CONFLICT, ("h-avoid",))


def test_reviewable_and_waiting() -> None:
    assert reviewable(habit()) and not reviewable(habit(status=S.ACTIVE))
    assert not reviewable(habit(status=S.ARCHIVED, review=R.REJECTED))
    pending = habit(review=R.APPROVED_PENDING_ELIGIBILITY, approved=True)
    assert waiting(pending)
    assert not waiting(dataclasses.replace(pending, approved_identity=None))
    assert not waiting(dataclasses.replace(pending, behavior="Use a short table"))
    assert not waiting(dataclasses.replace(pending, review_status=R.REAPPROVAL_REQUIRED))


# -- as_result ------------------------------------------------------------------------------

def test_as_result_counts_distinct_refs_of_positive_support_and_their_days() -> None:
    support = (Support("ev-1", "2024-05-08", 1, 9000), Support("ev-2", "2024-05-08", 1, 5000),
               Support("ev-3", "2024-05-09", -1, 9000), Support("ev-4", "2024-05-09", 1, 5000),
               Support("ev-1", "2024-05-07", 1, 9000))  # cited again: counts once, first day
    r = as_result(habit(support=support, review=R.APPROVED_PENDING_ELIGIBILITY,
                        approved=True), NOW)
    assert (r["support"], r["days"]) == (3, 2)
    assert r == {
        "habit_id": "h1", "when": COND, "do": DO, "polarity": 1, "status": "candidate",
        "review_status": "approved_pending_eligibility", "approved": True,
        "confidence_bp": 8000, "staleness": r["staleness"], "support": 3, "days": 2,
        "origin": "analyze", "blocked_by": [], "related_id": None,
        "checksum": habit(support=support, review=R.APPROVED_PENDING_ELIGIBILITY,
                          approved=True).checksum,
        "created_at": NOW - DAY, "updated_at": NOW - DAY,
    }
    # the last confident affirmation is ev-1 on 2024-05-08, two days before NOW, and ev-3
    # contradicts it a day later: 1 - 0.95^2 / (1 + 1)
    assert r["staleness"] == round(1 - 0.95**2 / 2, 4)


def test_as_result_of_a_fresh_habit() -> None:
    r = as_result(habit(created_at=NOW), NOW)
    assert (r["support"], r["days"], r["staleness"], r["approved"]) == (0, 0, 0.0, False)


def test_review_text() -> None:
    assert review_text(habit()) == f"When: {COND.removeprefix('When ')}\nDo: {DO}"
    assert review_text(habit(polarity=-1)) == (
        f"When: {COND.removeprefix('When ')}\nDo: avoid {DO}")


# -- review_items ---------------------------------------------------------------------------

def test_numbered_in_creation_order() -> None:
    old = habit("h-b", do="Use a short table", created_at=NOW - 3 * DAY)
    mid = habit("h-a", "When I open a pull request", "Link the ticket", created_at=NOW - DAY)
    same_time = habit("h-c", "When I open a pull request", "Tag a reviewer",
                      created_at=NOW - DAY)
    new = habit("h-0", "When I write an email", "Sign with my first name", created_at=NOW)
    items = review_items([new, same_time, mid, old], {}, NOW)
    assert [(i["number"], i["habit"]["habit_id"]) for i in items] == [
        (1, "h-b"), (2, "h-a"), (3, "h-c"), (4, "h-0")]
    assert items[0]["text"] == "When: I ask for a status report\nDo: Use a short table"
    assert items[0]["habit"] == as_result(old, NOW)


def test_only_candidates_and_pending_pairs_are_shown() -> None:
    a = habit("h1", created_at=NOW - 4 * DAY)
    active = habit("h2", "When I open a pull request", "Link the ticket", status=S.ACTIVE,
                   approved=True, created_at=NOW - 3 * DAY)
    archived = habit("h3", "When I write an email", "Sign with my first name",
                     status=S.ARCHIVED, review=R.REJECTED, created_at=NOW - 2 * DAY)
    dup = habit("h4", "When I ask for a status update", "Keep it to 3 bullets",
                created_at=NOW - DAY)
    assert [i["habit"]["habit_id"] for i in review_items([a, active, archived, dup], {})] == [
        "h1", "h4"]
    # a pending pair shows both sides, whatever their status; archived stays hidden
    items = review_items([a, active, archived, dup], {"h2": ["h4"], "h4": ["h2"]}, NOW)
    assert [(i["number"], i["habit"]["habit_id"], i["duplicates"]) for i in items] == [
        (1, "h1", []), (2, "h2", [3]), (3, "h4", [2])]
    shown_pending = review_items([archived], {"h3": ["h9"]}, NOW)
    assert [i["habit"]["habit_id"] for i in shown_pending] == ["h3"]
    assert shown_pending[0]["duplicates"] == []  # h9 is not on the list: no number


def test_duplicates_are_listed_by_number_sorted() -> None:
    hs = [habit(f"h{i}", f"When I ask for report {i}", f"Do step {i}",
                created_at=NOW - (10 - i) * DAY) for i in range(4)]
    items = review_items(hs, {"h0": ["h3", "h1"], "h1": ["h0"], "h3": ["h0"]}, NOW)
    assert [i["duplicates"] for i in items] == [[2, 4], [1], [], [1]]


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def test_jaccard() -> None:
    assert jaccard(set(), set()) == 0.0
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard({"a"}, {"a"}) == 1.0
    assert SIMILAR_JACCARD == 0.72


def test_similar_by_shared_words_at_or_above_the_threshold() -> None:
    base = habit("h1", COND, DO, created_at=NOW - 3 * DAY)
    # 13 words; "four" for "three": 12 shared of 14
    close = habit("h2", "when I ask for a STATUS report", "Keep it to four bullet points",
                  created_at=NOW - 2 * DAY)
    far = habit("h3", "When I write an email", "Sign with my first name",
                created_at=NOW - DAY)
    items = review_items([base, close, far], {}, NOW)
    assert [i["similar"] for i in items] == [[2], [1], []]
    # exactly at the threshold: 18 shared words of 25 is 0.72; 17 of 25 is not
    at = habit("a", words(10), words(15, "x"), created_at=NOW - 3 * DAY)
    edge = habit("b", words(10), words(8, "x"), created_at=NOW - 2 * DAY)
    below = habit("c", words(10), f"{words(7, 'x')} y1", created_at=NOW - DAY)
    items = review_items([at, edge, below], {}, NOW)
    assert [i["similar"] for i in items] == [[2], [1, 3], [2]]
    assert [len(i["similar"]) for i in review_items([at, below], {}, NOW)] == [0, 0]
