"""Stability scoring and the facet cache (services/stability_detector/scoring.py).

Pure functions of (evidence, commands, as_of): every test builds its inputs in memory. Vectors
come from issue 3, the seed ("Stability scoring" .. "States and qualification") and section 1.2
of the openhuman reference, including the anchor's defects we must not repeat (flapping on the
next rebuild, Forgotten not durable, stale Active rows over the budget, unbounded refs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from services.stability_detector.scoring import (
    ACTIVE,
    AUTO,
    CANDIDATE,
    DROPPED,
    FORGOTTEN,
    PINNED,
    PROVISIONAL,
    Command,
    Control,
    Evidence,
    FacetKey,
    FacetRow,
    active_list,
    compute_cache,
    diff,
    fold_commands,
    next_crossing,
    next_due,
    score_keys,
    state_for,
)
from services.stability_detector.settings import DAY, LearningSettings

SETTINGS = LearningSettings()
T0 = 1_700_000_000.0  # an integral epoch: T0 + k·DAY is exact in binary floating point
YEAR = 365 * DAY
FAMILIES = ("explicit", "structural", "behavioral", "recurrence")
CLASSES = ("identity", "veto", "tooling", "goal", "style", "channel")

_seq = itertools.count(1)


def ev(key: str = "verbosity", value: str = "terse", cue: str = "explicit", at: float = T0,
       cls: str = "style", refs: Sequence[Mapping[str, Any]] = (), seq: int | None = None
       ) -> Evidence:
    n = next(_seq) if seq is None else seq
    return Evidence(event_id=f"ev-{n}", facet_class=cls, key=key, value=value, cue=cue,
                    observed_at=at, confidence=0.9, seq=n, refs=tuple(refs))


def many(count: int, key: str = "verbosity", value: str = "terse", cue: str = "explicit",
         at: float = T0, cls: str = "style") -> list[Evidence]:
    return [ev(key, value, cue, at, cls) for _ in range(count)]


def cmd(kind: str, at: float, seq: int, key: str | None = "verbosity",
        value: str | None = None, cls: str | None = "style") -> Command:
    if kind == "reset":
        return Command("reset", at, seq)
    return Command(kind, at, seq, cls, key, value)


def cache(evidence: Iterable[Evidence], commands: Iterable[Command] = (), as_of: float = T0,
          settings: LearningSettings = SETTINGS) -> dict[FacetKey, FacetRow]:
    return compute_cache(list(evidence), list(commands), as_of, settings)


def row(rows: Mapping[FacetKey, FacetRow], key: str = "verbosity", cls: str = "style"
        ) -> FacetRow:
    return rows[(cls, key)]


def states(rows: Mapping[FacetKey, FacetRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows.values():
        out[r.state] = out.get(r.state, 0) + 1
    return out


def ref(turn: str) -> dict[str, str]:
    return {"type": "turn", "session_id": "s1", "turn_id": turn}


# ---------------------------------------------------------------------------- settings


def test_settings_are_the_seeds_constants() -> None:
    s = LearningSettings()
    assert s.weights == {"explicit": 1.0, "structural": 0.9, "behavioral": 0.7,
                         "recurrence": 0.6, "authoritative": 0.9}
    assert (s.tau_active, s.tau_provisional, s.tau_candidate) == (1.5, 0.7, 0.4)
    assert s.explicit_multiplier == 2.0
    assert s.budgets == {"style": 4, "identity": 4, "tooling": 5, "veto": 3, "goal": 3,
                         "channel": 1}
    assert s.overflow == 5
    assert s.evidence_refs_kept == 50


@pytest.mark.parametrize(("cls", "days"), [
    ("identity", 90), ("veto", 60), ("tooling", 30), ("goal", 30), ("style", 14), ("channel", 7),
])
def test_half_lives_per_class_veto_and_goal_not_swapped(cls: str, days: int) -> None:
    assert SETTINGS.half_life(cls) == days * DAY


# ---------------------------------------------------------------------------- vectors


def test_one_explicit_is_provisional_1_386() -> None:
    r = row(cache([ev()]))
    assert r.stability == pytest.approx(1.386, abs=1e-3)
    assert r.stability == pytest.approx(2 * math.log(2), rel=1e-12)
    assert (r.state, r.user_state) == (PROVISIONAL, AUTO)


def test_two_explicit_same_instant_is_active_2_197() -> None:
    r = row(cache(many(2)))
    assert r.stability == pytest.approx(2.197, abs=1e-3)
    assert r.stability == pytest.approx(2 * math.log(3), rel=1e-12)
    assert r.state == ACTIVE


# The reference's table (dt = 0, one family), plus the n just below each promotion.
TABLE = [
    ("explicit", 1, 1.386, PROVISIONAL), ("explicit", 2, 2.197, ACTIVE),
    ("explicit", 4, 3.219, ACTIVE), ("explicit", 5, 3.584, ACTIVE),
    ("structural", 1, 0.624, CANDIDATE), ("structural", 2, 0.989, PROVISIONAL),
    ("structural", 4, 1.448, PROVISIONAL), ("structural", 5, 1.613, ACTIVE),
    ("behavioral", 1, 0.485, CANDIDATE), ("behavioral", 2, 0.769, PROVISIONAL),
    ("behavioral", 4, 1.127, PROVISIONAL), ("behavioral", 5, 1.254, PROVISIONAL),
    ("behavioral", 7, 1.456, PROVISIONAL), ("behavioral", 8, 1.538, ACTIVE),
    ("recurrence", 1, 0.416, CANDIDATE), ("recurrence", 2, 0.659, CANDIDATE),
    ("recurrence", 4, 0.966, PROVISIONAL), ("recurrence", 8, 1.318, PROVISIONAL),
    ("recurrence", 11, 1.491, PROVISIONAL), ("recurrence", 12, 1.539, ACTIVE),
]


@pytest.mark.parametrize(("cue", "n", "expected", "state"), TABLE)
def test_reference_table(cue: str, n: int, expected: float, state: str) -> None:
    r = row(cache(many(n, cue=cue)))
    assert r.stability == pytest.approx(expected, abs=1e-3)
    assert r.state == state
    assert r.cue_counts == {cue: n}
    assert r.evidence_count == n


@pytest.mark.parametrize(("cue", "promoting_n"),
                         [("structural", 5), ("behavioral", 8), ("recurrence", 12)])
def test_n_below_promotion_stays_below_active(cue: str, promoting_n: int) -> None:
    for n in range(1, promoting_n):
        assert row(cache(many(n, cue=cue))).state != ACTIVE, n
    assert row(cache(many(promoting_n, cue=cue))).state == ACTIVE


def test_explicit_doubles_exactly_and_sums_over_families() -> None:
    # the explicit x2 applies to the whole sum, once, whatever the mix (the Σ of the docs, not
    # the anchor's single dominant-cue term)
    items = many(3, cue="behavioral") + many(1, cue="structural") + many(1, cue="explicit")
    r = row(cache(items))
    expected = 2.0 * (0.7 * math.log(4) + 0.9 * math.log(2) + 1.0 * math.log(2))
    assert r.stability == pytest.approx(expected, rel=1e-12)
    without = row(cache(many(3, cue="behavioral") + many(1, cue="structural")))
    assert without.stability == pytest.approx(0.7 * math.log(4) + 0.9 * math.log(2), rel=1e-12)


def test_state_for_thresholds_are_inclusive() -> None:
    assert state_for(1.5, SETTINGS) == ACTIVE
    assert state_for(math.nextafter(1.5, 0), SETTINGS) == PROVISIONAL
    assert state_for(0.7, SETTINGS) == PROVISIONAL
    assert state_for(math.nextafter(0.7, 0), SETTINGS) == CANDIDATE
    assert state_for(0.4, SETTINGS) == CANDIDATE
    assert state_for(math.nextafter(0.4, 0), SETTINGS) == DROPPED
    assert state_for(0.0, SETTINGS) == DROPPED


# ---------------------------------------------------------------------------- decay


def test_two_explicit_decay_active_provisional_candidate_dropped() -> None:
    items = many(2)
    assert row(cache(items, as_of=T0)).state == ACTIVE
    at_14 = row(cache(items, as_of=T0 + 14 * DAY))
    assert at_14.state == PROVISIONAL
    assert at_14.stability == pytest.approx(math.log(3), rel=1e-12)  # exactly half of 2.197
    assert row(cache(items, as_of=T0 + 28 * DAY)).state == CANDIDATE
    assert ("style", "verbosity") not in cache(items, as_of=T0 + 42 * DAY)


@pytest.mark.parametrize("cls", CLASSES)
def test_half_life_halves_exactly(cls: str) -> None:
    h = SETTINGS.half_life(cls)
    items = many(5, cue="structural", cls=cls)
    now = score_keys(items, T0, None, SETTINGS)[(cls, "verbosity")].values[0]
    for k, factor in [(1, 0.5), (2, 0.25), (3, 0.125)]:
        later = score_keys(items, T0 + k * h, None, SETTINGS)[(cls, "verbosity")].values[0]
        assert later.families[0].decay == factor  # 2^(-Δ/h), not exp(-Δ/h) (0.368)
        assert later.stability == now.stability * factor


def test_decay_is_by_each_familys_newest_item() -> None:
    h = SETTINGS.half_life("style")
    items = [ev(cue="behavioral", at=T0 - h), ev(cue="behavioral", at=T0 - 2 * h),
             ev(cue="structural", at=T0)]
    ks = score_keys(items, T0, None, SETTINGS)[("style", "verbosity")]
    fams = {f.family: f for f in ks.values[0].families}
    assert fams["behavioral"].newest == T0 - h
    assert fams["behavioral"].decay == 0.5
    assert fams["behavioral"].count == 2
    assert fams["structural"].decay == 1.0


# ---------------------------------------------------------------------------- no flapping


def test_rebuild_a_minute_later_keeps_active_and_the_explicit_bonus() -> None:
    items = many(5)
    first = cache(items, as_of=T0)
    again = cache(items, as_of=T0 + 60)
    assert row(first).state == ACTIVE
    assert row(again).state == ACTIVE  # the anchor fell to 1.254 (Provisional) here
    assert row(again).stability == pytest.approx(
        2 * math.log(6) * 2 ** (-60 / SETTINGS.half_life("style")), rel=1e-12)
    assert row(again).stability > 3.58
    ks = score_keys(items, T0 + 60, None, SETTINGS)[("style", "verbosity")]
    assert ks.values[0].cue == 2.0
    d = diff(first, again)
    assert not d.changed
    assert (d.added, d.evicted, d.kept) == (0, 0, 1)


def test_two_explicit_do_not_flap_either() -> None:
    items = many(2)
    # the anchor: 2.197 then 0.769; ours decays by evidence time only
    for as_of in (T0 + 60, T0 + 1800, T0 + 3600, T0 + DAY):
        assert row(cache(items, as_of=as_of)).state == ACTIVE
    assert not diff(cache(items, as_of=T0), cache(items, as_of=T0 + DAY)).changed


def test_repeated_rebuilds_at_the_same_as_of_are_identical() -> None:
    items = many(5) + many(3, key="tone", value="warm", cue="behavioral")
    first = cache(items, as_of=T0 + 60)
    for _ in range(5):
        assert cache(items, as_of=T0 + 60) == first


# ---------------------------------------------------------------------------- conflicts


def test_conflict_three_explicit_beat_one_behavioral() -> None:
    items = [*many(3, value="terse"), ev(value="verbose", cue="behavioral", at=T0 + 10)]
    rows = cache(items, as_of=T0 + 10)
    assert row(rows).value == "terse"
    assert len(rows) == 1  # one row per (class, key): the loser is not in the cache
    ks = score_keys(items, T0 + 10, None, SETTINGS)[("style", "verbosity")]
    assert [v.value for v in ks.values] == ["terse", "verbose"]
    assert row(rows).stability == ks.values[0].stability
    assert row(rows).cue_counts == {"explicit": 3}  # the winner's evidence only


def test_conflict_tie_goes_to_newer_evidence() -> None:
    # equal weight*decay by construction: 1.0*0.5 (one half-life old) == 0.5*1.0 (now)
    s = LearningSettings(weights={"explicit": 1.0, "structural": 0.5, "behavioral": 1.0,
                                  "recurrence": 0.6})
    h = s.half_life("style")
    items = (many(7, value="alpha", cue="behavioral", at=T0 - h)
             + many(7, value="zeta", cue="structural", at=T0))
    ks = score_keys(items, T0, None, s)[("style", "verbosity")]
    assert ks.values[0].stability == ks.values[1].stability  # a true tie
    assert ks.winner is not None and ks.winner.value == "zeta"  # newer beats value order
    assert row(cache(items, settings=s)).value == "zeta"


def test_conflict_full_tie_goes_to_value_order() -> None:
    items = many(2, value="terse") + many(2, value="brief")
    for order in (items, list(reversed(items))):
        assert row(cache(order)).value == "brief"


# ---------------------------------------------------------------------------- budgets


def test_ten_style_keys_give_nine_active_and_one_provisional() -> None:
    items = [e for i in range(10) for e in many(5, key=f"k{i}")]
    rows = cache(items)
    assert states(rows) == {ACTIVE: 9, PROVISIONAL: 1}
    assert len(active_list(rows)) == 9
    # equal stability and age: ties go to key order, so the last key is the one demoted
    assert row(rows, "k9").state == PROVISIONAL
    assert row(rows, "k9").stability == pytest.approx(3.584, abs=1e-3)


def test_budget_demotes_the_weakest() -> None:
    items = [e for i in range(10) for e in many(3 + i, key=f"k{i}")]
    rows = cache(items)
    assert row(rows, "k0").state == PROVISIONAL
    assert all(row(rows, f"k{i}").state == ACTIVE for i in range(1, 10))


def test_overflow_is_shared_across_classes_by_stability() -> None:
    style = [20, 19, 18, 17, 16, 14, 12, 10, 8, 6]  # budget 4, six over
    tooling = [30, 29, 28, 27, 26, 15, 13, 11, 9, 7, 5]  # budget 5, six over
    items = ([e for n in style for e in many(n, key=f"s{n}", cls="style")]
             + [e for n in tooling for e in many(n, key=f"t{n}", cls="tooling")])
    rows = cache(items)
    active = {r.key for r in rows.values() if r.state == ACTIVE}
    provisional = {r.key for r in rows.values() if r.state == PROVISIONAL}
    kept = {"s20", "s19", "s18", "s17", "t30", "t29", "t28", "t27", "t26"}
    overflow_winners = {"s16", "t15", "s14", "t13", "s12"}
    assert active == kept | overflow_winners
    assert provisional == {"t11", "s10", "t9", "s8", "t7", "s6", "t5"}
    assert len(rows) == 21


def test_budget_and_overflow_from_settings() -> None:
    s = LearningSettings(budgets={**SETTINGS.budgets, "style": 2}, overflow=1)
    items = [e for i in range(6) for e in many(5 + i, key=f"k{i}")]
    rows = cache(items, settings=s)
    assert {r.key for r in rows.values() if r.state == ACTIVE} == {"k5", "k4", "k3"}
    assert states(rows) == {ACTIVE: 3, PROVISIONAL: 3}


def test_pinned_count_against_the_budget() -> None:
    s = LearningSettings(overflow=0)
    commands = [cmd("update", T0, i + 1, key=f"p{i}", value="v") for i in range(2)]
    items = [e for i in range(3) for e in many(5 + i, key=f"k{i}")]
    rows = cache(items, commands, settings=s)
    assert {r.key for r in rows.values() if r.state == ACTIVE} == {"p0", "p1", "k2", "k1"}
    assert row(rows, "k0").state == PROVISIONAL


def test_pinned_over_budget_are_never_demoted() -> None:
    s = LearningSettings(overflow=0)
    commands = [cmd("update", T0, i + 1, key=f"p{i}", value="v") for i in range(6)]
    items = [e for i in range(3) for e in many(10, key=f"k{i}")]
    rows = cache(items, commands, settings=s)
    pinned = [r for r in rows.values() if r.user_state == PINNED]
    assert len(pinned) == 6
    assert all(r.state == ACTIVE and r.stability == math.inf for r in pinned)
    assert all(row(rows, f"k{i}").state == PROVISIONAL for i in range(3))


def test_over_budget_row_becomes_provisional_not_a_stale_active() -> None:
    items = [e for i in range(9) for e in many(5, key=f"k{i}")]
    before = cache(items, as_of=T0)
    assert states(before) == {ACTIVE: 9}
    later = T0 + 3600
    after = cache(items + many(10, key="new", at=later), as_of=later)
    assert states(after) == {ACTIVE: 9, PROVISIONAL: 1}
    assert row(after, "new").state == ACTIVE
    demoted = row(after, "k8")
    assert demoted.state == PROVISIONAL  # the row is rewritten, not left Active
    assert demoted.stability >= SETTINGS.tau_active  # strong, only over budget
    d = diff(before, after)
    moves = {(b.key if b else None, b.state if b else None, a.state if a else None)
             for b, a in d.changes}
    assert moves == {(None, None, ACTIVE), ("k8", ACTIVE, PROVISIONAL)}
    # counted among Active facets: "new" became Active, k8 stopped being Active
    assert (d.added, d.evicted, d.kept) == (1, 1, 8)


# ---------------------------------------------------------------------------- commands


def test_fold_pin_with_and_without_value() -> None:
    controls, window = fold_commands([cmd("pin", T0, 1, value="terse")], T0)
    assert controls == {("style", "verbosity"): Control(PINNED, "terse")}
    assert window is None
    controls, _ = fold_commands([cmd("pin", T0, 1)], T0)
    assert controls == {("style", "verbosity"): Control(PINNED, None)}


def test_pin_without_value_pins_the_winner() -> None:
    rows = cache([ev(value="terse")], [cmd("pin", T0, 1)])
    r = row(rows)
    assert (r.value, r.state, r.user_state, r.stability) == ("terse", ACTIVE, PINNED, math.inf)
    assert r.next_change_at is None
    assert r.evidence_count == 1  # provenance still attached


def test_pin_with_value_holds_that_value_against_evidence() -> None:
    items = many(5, value="verbose")
    r = row(cache(items, [cmd("pin", T0, 1, value="terse")]))
    assert (r.value, r.user_state, r.state) == ("terse", PINNED, ACTIVE)
    assert r.evidence_count == 0  # no evidence for "terse"


def test_update_sets_value_and_pins() -> None:
    items = many(5, value="verbose")
    controls, _ = fold_commands([cmd("update", T0, 1, value="terse")], T0)
    assert controls == {("style", "verbosity"): Control(PINNED, "terse")}
    r = row(cache(items, [cmd("update", T0, 1, value="terse")]))
    assert (r.value, r.user_state, r.state, r.stability) == ("terse", PINNED, ACTIVE, math.inf)


def test_pin_without_value_keeps_an_earlier_updates_value() -> None:
    controls, _ = fold_commands(
        [cmd("update", T0, 1, value="terse"), cmd("unpin", T0, 2), cmd("pin", T0, 3)], T0)
    assert controls[("style", "verbosity")] == Control(PINNED, None)
    controls, _ = fold_commands([cmd("update", T0, 1, value="terse"), cmd("pin", T0, 2)], T0)
    assert controls[("style", "verbosity")] == Control(PINNED, "terse")


def test_unpin_returns_to_auto() -> None:
    commands = [cmd("pin", T0, 1, value="verbose"), cmd("unpin", T0 + 1, 2)]
    controls, _ = fold_commands(commands, T0 + 1)
    assert controls == {}
    r = row(cache([ev(value="terse")], commands, as_of=T0 + 1))
    assert (r.value, r.user_state, r.state) == ("terse", AUTO, PROVISIONAL)
    assert math.isfinite(r.stability)


def test_forget_is_a_tombstone_that_survives_new_explicit_evidence() -> None:
    items = many(5)
    commands = [cmd("forget", T0 + 1, 1)]
    controls, _ = fold_commands(commands, T0 + 1)
    assert controls == {("style", "verbosity"): Control(FORGOTTEN)}
    r = row(cache(items, commands, as_of=T0 + 1))
    assert (r.state, r.user_state, r.stability) == (DROPPED, FORGOTTEN, 0.0)
    assert r.next_change_at is None
    # 10 new Explicit candidates, rebuilt at several times: still forgotten, never active
    more = items + [ev(at=T0 + 10 * i) for i in range(1, 11)]
    for as_of in (T0 + 100, T0 + 160, T0 + DAY, T0 + 60 * DAY):
        rows = cache(more, commands, as_of=as_of)
        r = row(rows)
        assert (r.state, r.user_state, r.stability) == (DROPPED, FORGOTTEN, 0.0)
        assert active_list(rows) == []
    assert not diff(cache(more, commands, as_of=T0 + 100),
                    cache(more, commands, as_of=T0 + 160)).changed


def test_forget_without_any_evidence_still_keeps_a_tombstone() -> None:
    rows = cache([], [cmd("forget", T0, 1)])
    assert row(rows).user_state == FORGOTTEN
    assert row(rows).state == DROPPED


def test_forgotten_is_not_counted_in_the_budget() -> None:
    items = [e for i in range(10) for e in many(5, key=f"k{i}")]
    rows = cache(items, [cmd("forget", T0, 1, key="k0")])
    assert states(rows) == {ACTIVE: 9, DROPPED: 1}


@pytest.mark.parametrize(("then", "user_state"),
                         [("unpin", AUTO), ("pin", PINNED), ("update", PINNED)])
def test_forget_is_lifted_by_unpin_pin_or_update(then: str, user_state: str) -> None:
    items = many(5)
    value = "brief" if then == "update" else None
    commands = [cmd("forget", T0 + 1, 1), cmd(then, T0 + 2, 2, value=value)]
    controls, _ = fold_commands(commands, T0 + 2)
    if then == "unpin":
        assert controls == {}  # unpin removes the control: back to scoring
    r = row(cache(items + many(3, at=T0 + 3), commands, as_of=T0 + 3))
    assert (r.user_state, r.state) == (user_state, ACTIVE)
    assert r.value == (value or "terse")


def test_commands_apply_in_seq_order() -> None:
    commands = [cmd("unpin", T0, 2), cmd("pin", T0, 1, value="terse")]  # given out of order
    assert fold_commands(commands, T0)[0] == {}
    commands = [cmd("pin", T0, 2, value="terse"), cmd("forget", T0, 1)]
    assert fold_commands(commands, T0)[0] == {("style", "verbosity"): Control(PINNED, "terse")}


def test_commands_after_as_of_are_ignored() -> None:
    items = many(5)
    commands = [cmd("forget", T0 + 100, 1), cmd("reset", T0 + 200, 2)]
    assert fold_commands(commands, T0 + 50) == ({}, None)
    assert row(cache(items, commands, as_of=T0 + 50)).state == ACTIVE
    assert row(cache(items, commands, as_of=T0 + 150)).user_state == FORGOTTEN
    assert fold_commands(commands, T0 + 200) == ({("style", "verbosity"): Control(FORGOTTEN)},
                                                 T0 + 200)


def test_evidence_after_as_of_is_ignored() -> None:
    items = many(5, at=T0) + many(20, value="verbose", at=T0 + 100)
    past = cache(items, as_of=T0 + 50)
    assert (row(past).value, row(past).evidence_count) == ("terse", 5)
    assert row(cache(items, as_of=T0 + 100)).value == "verbose"
    assert cache(items, as_of=T0 - 1) == {}


def test_reset_clears_auto_keeps_pins_and_tombstones() -> None:
    items = (many(5) + many(5, key="tone", value="warm") + many(5, key="lang", value="en")
             + many(5, key="editor", value="vim", cls="tooling"))
    commands = [cmd("update", T0 + 1, 1, key="lang", value="fr"),
                cmd("forget", T0 + 2, 2, key="tone"), cmd("reset", T0 + 10, 3)]
    _, window = fold_commands(commands, T0 + 20)
    assert window == T0 + 10
    rows = cache(items, commands, as_of=T0 + 20)
    assert set(rows) == {("style", "lang"), ("style", "tone")}
    assert (row(rows, "lang").value, row(rows, "lang").user_state) == ("fr", PINNED)
    assert row(rows, "lang").state == ACTIVE
    assert row(rows, "tone").user_state == FORGOTTEN
    # evidence observed before the reset no longer counts, even for the pinned row
    assert row(rows, "lang").evidence_count == 0
    assert score_keys(items, T0 + 20, window, SETTINGS) == {}


def test_new_evidence_after_reset_brings_facets_back() -> None:
    commands = [cmd("reset", T0 + 10, 1)]
    items = many(5) + many(2, at=T0 + 30)
    rows = cache(items, commands, as_of=T0 + 30)
    r = row(rows)
    assert (r.state, r.evidence_count) == (ACTIVE, 2)
    assert r.stability == pytest.approx(2 * math.log(3), rel=1e-12)  # only the 2 new ones
    assert r.first_seen_at == T0 + 30


def test_reset_in_the_future_of_as_of_answers_the_past() -> None:
    items = many(5)
    commands = [cmd("reset", T0 + 10, 1)]
    assert row(cache(items, commands, as_of=T0 + 5)).state == ACTIVE
    assert cache(items, commands, as_of=T0 + 15) == {}


def test_the_latest_reset_wins() -> None:
    commands = [cmd("reset", T0 + 10, 1), cmd("reset", T0 + 20, 2)]
    items = [ev(at=T0 + 15), ev(at=T0 + 25)]
    assert fold_commands(commands, T0 + 30)[1] == T0 + 20
    assert row(cache(items, commands, as_of=T0 + 30)).evidence_count == 1

def test_pin_without_value_survives_reset_with_its_value() -> None:
    items = many(5)
    commands = [cmd("pin", T0 + 1, 1), cmd("reset", T0 + 2, 2)]
    assert row(cache(items, commands, as_of=T0 + 1)).value == "terse"
    r = row(cache(items, commands, as_of=T0 + 3))
    assert (r.user_state, r.state) == (PINNED, ACTIVE)
    assert r.value == "terse"  # the evidence it was pinned on is gone, the value is not


def test_pin_without_value_locks_the_value_winning_when_pinned() -> None:
    items = many(2, value="terse")
    commands = [cmd("pin", T0 + 1, 1)]
    pinned = cache(items, commands, as_of=T0 + 1)
    assert (row(pinned).value, row(pinned).user_state) == ("terse", PINNED)
    # a competing value overtakes later: left alone it would win, the pin still holds "terse"
    more = items + many(10, value="verbose", cue="explicit", at=T0 + DAY)
    later = T0 + 2 * DAY
    assert row(cache(more, as_of=later)).value == "verbose"
    r = row(cache(more, commands, as_of=later))
    assert (r.value, r.user_state, r.state, r.stability) == ("terse", PINNED, ACTIVE, math.inf)
    assert r.evidence_count == 2  # the pinned value's evidence, not the newcomer's
    assert not diff(pinned, cache(more, commands, as_of=later)).changed
    # pinning it again without a value changes nothing: still the value of the first pin
    again = [*commands, cmd("pin", T0 + DAY + 1, 2)]
    assert row(cache(more, again, as_of=later)).value == "terse"


def test_forgotten_tombstone_keeps_its_value_across_a_reset() -> None:
    items = many(5)
    commands = [cmd("forget", T0 + 1, 1), cmd("reset", T0 + 2, 2)]
    before = cache(items, commands, as_of=T0 + 1)
    assert (row(before).value, row(before).user_state) == ("terse", FORGOTTEN)
    after = cache(items, commands, as_of=T0 + 3)  # no evidence left in the window
    assert (row(after).value, row(after).user_state, row(after).state) == (
        "terse", FORGOTTEN, DROPPED)
    d = diff(before, after)
    assert not d.changed
    assert (d.added, d.evicted, d.kept) == (0, 0, 0)  # forgotten: never Active
    # nor does a competing value observed after the reset rename the tombstone
    more = items + many(5, value="verbose", at=T0 + 3)
    r = row(cache(more, commands, as_of=T0 + 4))
    assert (r.value, r.user_state, r.stability) == ("terse", FORGOTTEN, 0.0)
    assert not diff(before, cache(more, commands, as_of=T0 + 4)).changed


@pytest.mark.parametrize(("kind", "user_state", "state"),
                         [("pin", PINNED, ACTIVE), ("forget", FORGOTTEN, DROPPED)])
def test_value_given_without_one_survives_a_reset_at_the_same_instant(
        kind: str, user_state: str, state: str) -> None:
    # commands apply in seq order: the reset comes after the pin/forget, even at the same instant
    items = many(5)
    commands = [cmd(kind, T0 + 1, 1), cmd("reset", T0 + 1, 2)]
    rows = cache(items, commands, as_of=T0 + 3)
    assert ("style", "verbosity") in rows
    assert (row(rows).value, row(rows).user_state, row(rows).state) == (
        "terse", user_state, state)


# ---------------------------------------------------------------------------- pinned, crossings


def test_pinned_survives_any_decay() -> None:
    items = many(2)
    commands = [cmd("pin", T0, 1, value="terse")]
    for as_of in (T0, T0 + YEAR, T0 + 10 * YEAR):
        r = row(cache(items, commands, as_of=as_of))
        assert (r.state, r.stability, r.user_state) == (ACTIVE, math.inf, PINNED)
        assert r.next_change_at is None
    assert cache(items, as_of=T0 + YEAR) == {}  # unpinned, the same evidence is long dropped


def test_next_crossing_is_when_decay_meets_the_threshold() -> None:
    h = SETTINGS.half_life("style")
    items = many(2)
    r = row(cache(items, as_of=T0))
    assert r.state == ACTIVE
    t = r.next_change_at
    assert t is not None
    assert t == pytest.approx(T0 + h * math.log2(2 * math.log(3) / 1.5), abs=1e-3)
    assert row(cache(items, as_of=t - 1)).state == ACTIVE
    below = row(cache(items, as_of=t + 1))
    assert below.state == PROVISIONAL
    # and on down the chain, each rebuild indexing the next threshold
    t = below.next_change_at
    assert t is not None
    assert t == pytest.approx(T0 + h * math.log2(2 * math.log(3) / 0.7), abs=1e-3)
    assert row(cache(items, as_of=t - 1)).state == PROVISIONAL
    below = row(cache(items, as_of=t + 1))
    assert below.state == CANDIDATE
    t = below.next_change_at
    assert t is not None
    assert t == pytest.approx(T0 + h * math.log2(2 * math.log(3) / 0.4), abs=1e-3)
    assert row(cache(items, as_of=t - 1)).state == CANDIDATE
    assert cache(items, as_of=t + 1) == {}  # dropped: an Auto Dropped row is not kept
    assert next_due(cache(items, as_of=t + 1)) is None


def test_next_crossing_targets_the_threshold_just_below() -> None:
    h = SETTINGS.half_life("style")
    for stability, tau in [(3.0, 1.5), (1.5, 1.5), (1.0, 0.7), (0.7, 0.7), (0.5, 0.4)]:
        assert next_crossing(stability, T0, h, SETTINGS) == T0 + h * math.log2(stability / tau)
    assert next_crossing(1.5, T0, h, SETTINGS) == T0  # inclusive: at τ it leaves right now
    for stability in (math.nextafter(0.4, 0), 0.0, math.inf):
        assert next_crossing(stability, T0, h, SETTINGS) is None
    # one half-life from 2·τ
    assert next_crossing(3.0, T0, h, SETTINGS) == T0 + h


def test_next_due_is_the_earliest_row_and_none_for_pinned() -> None:
    h = SETTINGS.half_life("style")
    items = (many(20, key="a") + many(2, key="b") + many(1, key="c")
             + many(1, key="d", cue="recurrence") + many(3, key="p"))
    rows = cache(items, [cmd("pin", T0, 1, key="p")])
    assert row(rows, "p").next_change_at is None
    auto = [r for r in rows.values() if r.user_state == AUTO]
    assert len(auto) == 4
    for r in auto:
        assert r.next_change_at == next_crossing(r.stability, T0, h, SETTINGS)
    assert next_due(rows) == min(r.next_change_at for r in auto if r.next_change_at)
    assert next_due(rows) == row(rows, "d").next_change_at  # 0.416, closest to its 0.4
    assert next_due({}) is None
    pinned_only = cache(items, [cmd("pin", T0, 1, key=k) for k in "abcdp"])
    assert next_due(pinned_only) is None
    forgotten = cache(items, [cmd("forget", T0, 1, key=k) for k in "abcdp"])
    assert next_due(forgotten) is None


def test_nothing_visible_changes_before_next_due() -> None:
    # one class, under budget: follow the index from rebuild to rebuild until all is dropped
    items = (many(20, key="a") + many(2, key="b") + many(1, key="c")
             + many(4, key="d", cue="behavioral", at=T0 - 3 * DAY) + many(3, key="p"))
    commands = [cmd("pin", T0, 1, key="p")]
    t, transitions = T0, 0
    while True:
        rows = cache(items, commands, as_of=t)
        due = next_due(rows)
        if due is None:
            break
        assert due > t
        for frac in (0.0, 0.25, 0.5, 0.9):
            probe = max(t, min(t + frac * (due - t), due - 1))
            assert not diff(rows, cache(items, commands, as_of=probe)).changed, (t, frac)
        assert diff(rows, cache(items, commands, as_of=due + 1)).changed
        transitions += 1
        t = due + 1
    assert set(rows) == {("style", "p")}  # only the pin is left
    assert transitions == 3 + 3 + 2 + 2  # a, b from Active; c, d from Provisional


def test_overflow_swap_across_classes_is_due_before_it_happens() -> None:
    items = ([e for i in range(10) for e in many(5, key=f"s{i}")]  # six style over budget
             + [e for i in range(5) for e in many(5, key=f"t{i}", cls="tooling")]
             + many(4, key="t5", cls="tooling"))  # one tooling over budget, weaker at T0
    rows = cache(items, as_of=T0)
    assert row(rows, "t5", "tooling").state == PROVISIONAL
    later = cache(items, as_of=T0 + 5 * DAY)  # style (14 d) has decayed below tooling (30 d)
    assert row(later, "t5", "tooling").state == ACTIVE
    assert diff(rows, later).changed
    due = next_due(rows)
    assert due is not None and due <= T0 + 5 * DAY  # it is T0 + 17.6 d


# ---------------------------------------------------------------------------- explain


def test_explain_numbers_add_up() -> None:
    h = SETTINGS.half_life("style")
    items = (many(3, at=T0 - 2 * DAY) + many(4, cue="behavioral", at=T0 - DAY)
             + many(2, value="verbose", cue="structural") + many(6, value="brief",
                                                                 cue="recurrence"))
    scored = score_keys(items, T0, None, SETTINGS)
    ks = scored[("style", "verbosity")]
    assert len(ks.values) == 3
    assert all(a.stability >= b.stability for a, b in itertools.pairwise(ks.values))
    for v in ks.values:
        assert v.base == sum(f.contribution for f in v.families)
        assert v.stability == v.base * v.cue
        assert v.cue == (2.0 if any(f.family == "explicit" for f in v.families) else 1.0)
        assert sum(f.count for f in v.families) == ks.stats[v.value].total
        for f in v.families:
            assert f.weight == SETTINGS.weights[f.family]
            assert f.decay == pytest.approx(2 ** (-(T0 - f.newest) / h), rel=1e-15)
            assert f.log_count == math.log1p(f.count)
            assert f.contribution == f.weight * f.decay * f.log_count
    r = row(cache(items))
    assert ks.winner is not None
    assert r.value == ks.winner.value == "terse"
    assert r.stability == ks.winner.stability
    expected = 2 * (1.0 * 2 ** (-2 / 14) * math.log(4) + 0.7 * 2 ** (-1 / 14) * math.log(5))
    assert r.stability == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------- provenance


def test_evidence_refs_deduplicated_newest_first_and_capped() -> None:
    s = LearningSettings(evidence_refs_kept=3)
    a, b, c, d, e = (ref(x) for x in "abcde")
    b_reordered = {"turn_id": "b", "type": "turn", "session_id": "s1"}
    items = [
        ev(at=T0, refs=[a, e]),
        ev(at=T0 + 10, refs=[b, c]),
        ev(cue="behavioral", at=T0 + 20, refs=[d, b_reordered]),
        ev(value="verbose", cue="behavioral", at=T0 + 30, refs=[ref("other")]),
    ]
    r = row(cache(items, as_of=T0 + 30, settings=s))
    assert r.value == "terse"
    assert r.evidence_refs == (d, b_reordered, c)
    r = row(cache(items, as_of=T0 + 30, settings=LearningSettings(evidence_refs_kept=50)))
    assert r.evidence_refs == (d, b_reordered, c, a, e)  # no "other": the loser's refs
    assert r.cue_counts == {"behavioral": 1, "explicit": 2}
    assert list(r.cue_counts) == sorted(r.cue_counts)
    assert (r.evidence_count, r.first_seen_at, r.last_evidence_at) == (3, T0, T0 + 20)


def test_evidence_refs_bounded_by_default() -> None:
    items = [ev(at=T0 + i, refs=[ref(f"t{i}"), ref(f"u{i}")]) for i in range(100)]
    r = row(cache(items, as_of=T0 + 100))
    assert len(r.evidence_refs) == SETTINGS.evidence_refs_kept == 50
    assert r.evidence_refs[0] == ref("t99")
    assert r.evidence_count == 100  # counts keep everything


def test_evidence_refs_same_instant_ordered_by_seq_descending() -> None:
    items = [ev(at=T0, refs=[ref("first")], seq=10_001),
             ev(at=T0, refs=[ref("second")], seq=10_002)]
    r = row(cache(items))
    assert r.evidence_refs == (ref("second"), ref("first"))
    assert row(cache(reversed(items))).evidence_refs == r.evidence_refs


# ---------------------------------------------------------------------------- diff


def test_diff_reports_added_evicted_and_changes() -> None:
    old = cache(many(5) + many(1, key="tone", value="warm"))
    new = cache(many(5) + many(5, key="lang", value="en"))
    d = diff(old, new)
    # "tone" (one cue) was only Provisional: it leaves the changes but is no eviction
    assert row(old, "tone").state == PROVISIONAL
    assert (d.added, d.evicted, d.kept) == (1, 0, 1)
    assert {(b.key if b else None, a.key if a else None) for b, a in d.changes} == {
        (None, "lang"), ("tone", None)}
    stronger = cache(many(5) + many(5, key="tone", value="warm"))
    assert (diff(stronger, new).added, diff(stronger, new).evicted) == (1, 1)


def test_diff_ignores_stability_but_sees_value_state_and_user_state() -> None:
    items = many(5)
    base = cache(items)
    assert not diff(base, cache(items, as_of=T0 + 3600)).changed
    assert diff(base, cache(items, [cmd("pin", T0, 1)])).changed  # only user_state differs
    assert diff(base, cache(items + many(6, value="brief"))).changed


# ---------------------------------------------------------------------------- properties

KEYS = ("k0", "k1", "k2", "k3", "k4", "k5")
VALUES = ("a", "b", "c")
HORIZON = 90 * DAY

evidence_tuples = st.lists(
    st.tuples(st.sampled_from(CLASSES), st.sampled_from(KEYS), st.sampled_from(VALUES),
              st.sampled_from(FAMILIES), st.integers(0, int(HORIZON)),
              st.integers(0, 3)),
    max_size=60,
)
command_tuples = st.lists(
    st.tuples(st.sampled_from(("pin", "unpin", "forget", "update", "reset")),
              st.sampled_from(CLASSES), st.sampled_from(KEYS),
              st.one_of(st.none(), st.sampled_from(VALUES)), st.integers(0, int(HORIZON))),
    max_size=8,
)
as_offsets = st.integers(0, int(HORIZON + 30 * DAY))
PROPS = hsettings(max_examples=120, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])


def build_evidence(tuples: Sequence[tuple[str, str, str, str, int, int]]) -> list[Evidence]:
    return [ev(key, value, cue, T0 + offset, cls, [ref(f"r{r}")], seq=i + 1)
            for i, (cls, key, value, cue, offset, r) in enumerate(tuples)]


def build_commands(tuples: Sequence[tuple[str, str, str, str | None, int]]) -> list[Command]:
    out = []
    for i, (kind, cls, key, value, offset) in enumerate(tuples):
        if kind == "update" and value is None:
            value = "a"
        if kind in ("unpin", "forget"):
            value = None
        out.append(cmd(kind, T0 + offset, i + 1, key=key, value=value, cls=cls))
    return out


@PROPS
@given(evidence_tuples, command_tuples, as_offsets, st.randoms(use_true_random=False))
def test_cache_is_deterministic_and_order_independent(
        ev_t: list[Any], cmd_t: list[Any], offset: int, rnd: Any) -> None:
    items, commands = build_evidence(ev_t), build_commands(cmd_t)
    as_of = T0 + offset
    first = compute_cache(items, commands, as_of, SETTINGS)
    assert compute_cache(items, commands, as_of, SETTINGS) == first
    shuffled_items, shuffled_commands = list(items), list(commands)
    rnd.shuffle(shuffled_items)
    rnd.shuffle(shuffled_commands)
    assert compute_cache(shuffled_items, shuffled_commands, as_of, SETTINGS) == first
    assert list(compute_cache(shuffled_items, [], as_of, SETTINGS)) == sorted(
        compute_cache(items, [], as_of, SETTINGS))


@PROPS
@given(evidence_tuples, st.sampled_from(CLASSES), st.sampled_from(KEYS),
       st.sampled_from(VALUES), st.integers(0, int(HORIZON)), as_offsets)
def test_adding_explicit_never_lowers_that_values_stability(
        ev_t: list[Any], cls: str, key: str, value: str, at: int, offset: int) -> None:
    items = build_evidence(ev_t)
    as_of = T0 + offset

    def stability(evidence: list[Evidence]) -> float:
        ks = score_keys(evidence, as_of, None, SETTINGS).get((cls, key))
        if ks is None:
            return 0.0
        return next((v.stability for v in ks.values if v.value == value), 0.0)

    before = stability(items)
    after = stability([*items, ev(key, value, "explicit", T0 + at, cls, seq=len(items) + 1)])
    assert after >= before
    if at <= offset:
        assert after > before


@PROPS
@given(evidence_tuples, command_tuples, as_offsets)
def test_non_pinned_active_rows_are_bounded_by_budgets_and_overflow(
        ev_t: list[Any], cmd_t: list[Any], offset: int) -> None:
    # make budgets bite: many strong keys
    items = build_evidence(ev_t) + [
        e for cls in ("style", "channel") for i in range(6)
        for e in many(5, key=f"x{i}", cls=cls, at=T0 + offset)]
    rows = compute_cache(items, build_commands(cmd_t), T0 + offset, SETTINGS)
    auto_active = [r for r in rows.values() if r.state == ACTIVE and r.user_state != PINNED]
    assert len(auto_active) <= sum(SETTINGS.budgets.values()) + SETTINGS.overflow
    for cls, budget in SETTINGS.budgets.items():
        in_class = [r for r in rows.values() if r.facet_class == cls and r.state == ACTIVE]
        pinned = sum(1 for r in in_class if r.user_state == PINNED)
        assert len(in_class) - pinned <= max(budget - pinned, 0) + SETTINGS.overflow
    for r in rows.values():
        if r.user_state == PINNED:
            assert (r.state, r.stability) == (ACTIVE, math.inf)
        elif r.user_state == FORGOTTEN:
            assert (r.state, r.stability) == (DROPPED, 0.0)
        else:
            assert r.state != DROPPED
            assert r.state in _allowed_states(r)


def _allowed_states(row: Any) -> set[str]:
    """What the score allows (or Provisional, over budget), plus what the statement and
    identity rules add: a held statement is Active, and an identity value with structural
    sources moves up one state."""
    scored = state_for(row.stability, SETTINGS)
    allowed = {scored, PROVISIONAL}
    if row.origin != "learned":
        allowed.add(ACTIVE)
    if row.facet_class == "identity":
        ladder = [DROPPED, CANDIDATE, PROVISIONAL, ACTIVE]
        allowed.add(ladder[min(ladder.index(scored) + 1, 3)])
    return allowed


@PROPS
@given(evidence_tuples, command_tuples, as_offsets)
def test_diff_of_a_cache_with_itself_is_empty(
        ev_t: list[Any], cmd_t: list[Any], offset: int) -> None:
    rows = compute_cache(build_evidence(ev_t), build_commands(cmd_t), T0 + offset, SETTINGS)
    d = diff(rows, rows)
    assert not d.changed
    assert (d.added, d.evicted, d.kept) == (
        0, 0, sum(r.state == ACTIVE for r in rows.values()))
    assert not diff(rows, dict(rows)).changed


@PROPS
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES),
                          st.sampled_from(FAMILIES), st.integers(0, int(HORIZON))),
                max_size=60),
       command_tuples, st.floats(0.0, 0.999), st.sampled_from(CLASSES))
def test_nothing_visible_changes_before_next_due_within_one_class(
        ev_t: list[Any], cmd_t: list[Any], frac: float, cls: str) -> None:
    items = build_evidence([(cls, k, v, c, o, 0) for k, v, c, o in ev_t])
    commands = build_commands([(kind, cls, k, v, o) for kind, _, k, v, o in cmd_t])
    as_of = T0 + HORIZON  # all evidence and commands are in the past
    rows = compute_cache(items, commands, as_of, SETTINGS)
    due = next_due(rows)
    if due is None:
        assert all(r.user_state != AUTO for r in rows.values())
        later = compute_cache(items, commands, as_of + 10 * YEAR, SETTINGS)
        assert not diff(rows, later).changed
        return
    assert due >= as_of
    probe = max(as_of, min(as_of + frac * (due - as_of), due - 1))
    assert not diff(rows, compute_cache(items, commands, probe, SETTINGS)).changed


# ---------------------------------------------------------------------------- authoritative


def test_one_authoritative_report_is_active_at_once_and_does_not_decay() -> None:
    reported = [ev("name", "Alice Johnson", "authoritative", cls="identity")]
    now = row(cache(reported), "name", "identity")
    assert (now.value, now.state, now.user_state) == ("Alice Johnson", "active", "auto")
    a_year_later = row(cache(reported, as_of=T0 + 365 * DAY), "name", "identity")
    assert a_year_later.state == "active"
    assert a_year_later.next_change_at is None


def test_a_newer_report_that_differs_replaces_the_value_whatever_the_scores() -> None:
    old = [ev("timezone", "Europe/Berlin", "authoritative", at=T0 - 10 * DAY, cls="identity")
           for _ in range(5)]
    new = [ev("timezone", "America/New_York", "authoritative", cls="identity")]
    assert row(cache(old + new), "timezone", "identity").value == "America/New_York"


def test_learned_evidence_does_not_outvote_the_account_but_the_user_does() -> None:
    reported = [ev("name", "Alice Johnson", "authoritative", cls="identity")]
    signatures = many(6, "name", "Al J.", "structural", cls="identity")
    assert row(cache(reported + signatures), "name", "identity").value == "Alice Johnson"
    update = Command("update", T0 + 1, 10_000, "identity", "name", "Ally")
    changed = row(cache(reported + signatures, [update], as_of=T0 + 2), "name", "identity")
    assert (changed.value, changed.user_state) == ("Ally", "pinned")
    forget = Command("forget", T0 + 1, 10_001, "identity", "name")
    forgotten = row(cache(reported, [forget], as_of=T0 + 2), "name", "identity")
    assert forgotten.user_state == "forgotten"


def test_pinning_an_authoritative_facet_holds_the_reported_value() -> None:
    reported = [ev("email", "alice@acme.com", "authoritative", cls="identity")]
    louder = many(3, "email", "al@old.example", "explicit", cls="identity")
    pin = Command("pin", T0 + 1, 10_002, "identity", "email")
    held = row(cache(reported + louder, [pin], as_of=T0 + 2), "email", "identity")
    assert (held.value, held.user_state) == ("alice@acme.com", "pinned")
