"""Summaries folded forward rebuild by rebuild give the cache a summary of the whole log gives
(services/stability_detector/incremental.py, summary.py).

The projection keeps each (class, key, value)'s summary and folds in only the evidence logged
since its last rebuild, so that a new candidate costs the same for a user with ten pieces of
evidence as for one with ten thousand. These tests hold it to the reference: for any log and any
sequence of rebuild times, the folded summaries and the cache from them equal `summarize` and
`compute_cache` over everything logged so far, including statements, denials (in and out of
log order), evidence stamped ahead of the clock, authoritative reports and refs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from services.stability_detector.incremental import (
    advance,
    deferred_of,
    summarize_key,
)
from services.stability_detector.scoring import (
    Evidence,
    UserStats,
    cache_from_stats,
    compute_cache,
    summarize,
    value_when_given,
)
from services.stability_detector.settings import DAY, LearningSettings
from services.stability_detector.summary import ValueStats, dumps, dumps_refs

SETTINGS = LearningSettings()
T0 = 1_700_000_000.0
CUES = ("explicit", "structural", "behavioral", "recurrence", "authoritative")
STANCES = (None, None, None, "standing", "declared", "one_off", "confirmed", "denied")
KEYS = (("style", "verbosity"), ("style", "tone"), ("tooling", "package_manager"),
        ("identity", "name"))
VALUES = ("a", "b", "c")


def _as_doc(stats: UserStats) -> dict[str, dict[str, object]]:
    return {f"{c}/{k}": {v: {**s.to_json(), "refs": s.refs_json()}
                         for v, s in sorted(vals.items()) if s.total}
            for (c, k), vals in sorted(stats.items())
            if any(s.total for s in vals.values())}


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[Evidence], list[float]]:
    """A user's evidence in log order (times jittering, some ahead of the rebuilds) and the
    rebuild times (never running backwards)."""
    n = draw(st.integers(1, 40))
    items = []
    for seq in range(1, n + 1):
        fk = draw(st.sampled_from(KEYS))
        at = T0 + draw(st.integers(0, 30)) * DAY / 4
        refs = tuple({"type": "turn", "id": f"t{draw(st.integers(0, 6))}"}
                     for _ in range(draw(st.integers(0, 2))))
        items.append(Evidence(f"e{seq}", fk[0], fk[1], draw(st.sampled_from(VALUES)),
                              draw(st.sampled_from(CUES)), at, 0.9, seq, refs,
                              draw(st.sampled_from(STANCES))))
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=1, max_size=5)))
    times = sorted(T0 + draw(st.integers(0, 32)) * DAY / 4 for _ in cuts)
    return items, [float(c) for c in cuts] + times


@hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs())
def test_folding_forward_equals_summarising_the_log(case: tuple[list[Evidence], list[float]]
                                                    ) -> None:
    items, spec = case
    half = len(spec) // 2
    cuts, times = [int(c) for c in spec[:half]], spec[half:]
    stats: UserStats = {}
    folded_seq, deferred = 0, []
    for cut, as_of in zip(cuts, times, strict=True):
        logged = items[:cut]
        by_seq = {e.seq: e for e in logged}
        fresh = [e for e in logged if e.seq > folded_seq or e.seq in deferred]
        step = advance(stats, fresh, folded_seq, as_of, None, SETTINGS)
        for fk in step.refold:
            summarize_key(stats, fk, [e for e in logged if (e.facet_class, e.key) == fk],
                          as_of, None, SETTINGS)
        folded_seq, deferred = step.folded_seq, step.deferred
        # stored and read back, as the projection does between rebuilds (its serialiser)
        stats = {fk: {v: ValueStats.from_json(json.loads(dumps(s)),
                                              refs=json.loads(dumps_refs(s)))
                      for v, s in vals.items()} for fk, vals in stats.items()}
        reference = summarize(logged, as_of, None, SETTINGS)
        assert _as_doc(stats) == _as_doc(reference)
        assert sorted(deferred) == sorted(deferred_of(logged, as_of, None, SETTINGS))
        assert all(by_seq[s].observed_at > as_of for s in deferred)
        cache = cache_from_stats(stats, [], as_of, SETTINGS, commands_as_of=math.inf,
                                 held=lambda fk, c: c.value)
        assert cache == compute_cache(logged, [], as_of, SETTINGS, commands_as_of=math.inf)


def _e(seq: int, value: str, at: float, stance: str | None = None, cue: str = "explicit"
       ) -> Evidence:
    return Evidence(f"e{seq}", "style", "verbosity", value, cue, at, 0.9, seq,
                    ({"type": "turn", "id": f"t{seq}"},), stance)


def test_a_denial_folded_after_later_evidence_asks_for_the_key_from_the_log() -> None:
    # seq 2 is stamped a day ahead: it waits; seq 3 denies "terse" after seq 4 is folded
    log: Sequence[Evidence] = [_e(1, "terse", T0), _e(2, "terse", T0 + DAY),
                               _e(4, "terse", T0 + 0.2 * DAY),
                               _e(3, "terse", T0 + 2 * DAY, stance="denied")]
    stats: UserStats = {}
    first = advance(stats, log[:3], 0, T0 + 0.5 * DAY, None, SETTINGS)
    assert first.deferred == [2] and not first.refold
    assert stats[("style", "verbosity")]["terse"].total == 2
    second = advance(stats, [log[1], log[3]], first.folded_seq, T0 + 3 * DAY, None, SETTINGS)
    assert second.refold == {("style", "verbosity")}
    written, gone = summarize_key(stats, ("style", "verbosity"), log, T0 + 3 * DAY, None,
                                  SETTINGS)
    # what is left after the denial (seq 3, stamped two days ahead): nothing. Seq 4 was
    # logged after it but observed before it, so it stays denied (see the next test)
    assert stats[("style", "verbosity")]["terse"].total == 0
    assert stats[("style", "verbosity")]["terse"].denied_through == 3
    assert written == {("style", "verbosity", "terse")} and not gone


def test_evidence_observed_before_a_denial_stays_denied_wherever_it_is_logged() -> None:
    """"Forget what I said about tables" at T0 + 1 h; the extractor summarises the morning's
    turns later, so their "tables" lands in the log after the denial: it was said before it and
    stays denied. A "tables" said after the denial counts. Folded a piece at a time or all at
    once, the same."""
    log: Sequence[Evidence] = [_e(1, "terse", T0), _e(2, "terse", T0 + 3600, stance="denied"),
                               _e(3, "terse", T0 + 600), _e(4, "terse", T0 + 7200)]
    whole = summarize(log, T0 + DAY, None, SETTINGS)[("style", "verbosity")]["terse"]
    assert whole.total == 1 and whole.max_seq == 4  # only what was said after the denial
    stats: UserStats = {}
    folded = 0
    for item in log:
        folded = advance(stats, [item], folded, T0 + DAY, None, SETTINGS).folded_seq
    assert stats[("style", "verbosity")]["terse"] == whole


def test_a_user_with_ten_thousand_pieces_folds_only_what_is_new() -> None:
    """The point of it all: the summaries of 10,000 pieces of evidence are as small as those
    of 10, and a rebuild reads only the new piece."""
    many = [_e(i, "terse" if i % 3 else "detailed", T0 + i * 60.0) for i in range(1, 10_001)]
    as_of = T0 + 10_001 * 60.0
    stats = summarize(many, as_of, None, SETTINGS)
    assert sum(len(v) for v in stats.values()) == 2
    summary = stats[("style", "verbosity")]["terse"]
    assert len(summary.refs) == SETTINGS.evidence_refs_kept and summary.total == 6_667
    recent = summarize(many[-300:], as_of, None, SETTINGS)[("style", "verbosity")]["terse"]
    # as big as the summary of the last 300 (the counts have a digit more or two)
    assert len(json.dumps(summary.to_json())) <= len(json.dumps(recent.to_json())) + 8
    assert len(json.dumps(summary.refs_json())) == len(json.dumps(recent.refs_json()))
    new = _e(10_001, "terse", as_of)
    step = advance(stats, [new], 10_000, as_of, None, SETTINGS)
    assert step.changed == {("style", "verbosity", "terse")} and step.folded_seq == 10_001
    assert stats == summarize([*many, new], as_of, None, SETTINGS)


def test_a_pin_without_a_value_holds_the_value_winning_when_given() -> None:
    from services.stability_detector.scoring import Command, fold_commands

    log = [_e(1, "terse", T0), _e(2, "terse", T0 + 60), _e(3, "detailed", T0 + 2 * DAY)]
    pin = Command("pin", T0 + DAY, 10, "style", "verbosity", None)
    controls, _ = fold_commands([pin], math.inf)
    held = value_when_given(("style", "verbosity"), controls[("style", "verbosity")], [pin],
                            log, SETTINGS)
    assert held == "terse"
    stats = summarize(log, T0 + 3 * DAY, None, SETTINGS)
    cache = cache_from_stats(stats, [pin], T0 + 3 * DAY, SETTINGS, commands_as_of=math.inf,
                             held=lambda fk, c: held)
    assert cache[("style", "verbosity")].value == "terse"
    assert cache == compute_cache(log, [pin], T0 + 3 * DAY, SETTINGS, commands_as_of=math.inf)


def test_a_rebuild_writes_only_rows_that_changed_by_more_than_decay() -> None:
    """Decay alone moves every row's stability at every rebuild; those rows are left as they
    were (readers decay them) and only what changed is written."""
    import dataclasses

    from services.stability_detector.scoring import decayed, settled_rows

    log = [_e(1, "terse", T0), _e(2, "terse", T0 + 60), _e(3, "detailed", T0 + 120,
                                                              cue="behavioral")]
    day1 = compute_cache(log, [], T0 + DAY, SETTINGS, commands_as_of=math.inf)
    stored = {fk: dataclasses.replace(r, as_of=T0 + DAY) for fk, r in day1.items()}
    day2 = compute_cache(log, [], T0 + 2 * DAY, SETTINGS, commands_as_of=math.inf)
    row = day2[("style", "verbosity")]
    assert row.stability < day1[("style", "verbosity")].stability  # it did decay
    assert settled_rows(stored, day2, T0 + 2 * DAY, SETTINGS) == []
    # what a reader shows for the row left as it was: the score the rebuild computed
    shown = decayed(stored[("style", "verbosity")], T0 + 2 * DAY, SETTINGS)
    assert math.isclose(shown.stability, row.stability, rel_tol=1e-12)
    assert shown.next_change_at == row.next_change_at or math.isclose(
        shown.next_change_at or 0, row.next_change_at or 0, abs_tol=1e-3)
    # one new piece of evidence: that row is written, with its new count
    more = compute_cache([*log, _e(4, "terse", T0 + 2 * DAY)], [], T0 + 2 * DAY, SETTINGS,
                         commands_as_of=math.inf)
    (written,) = settled_rows(stored, more, T0 + 2 * DAY, SETTINGS)
    assert written.evidence_count == 3
    # a row new to the cache is written; a pinned row's infinite score never "decays"
    pinned = dataclasses.replace(row, stability=math.inf, user_state="pinned", as_of=T0)
    assert decayed(pinned, T0 + 9 * DAY, SETTINGS).stability == math.inf
    assert settled_rows({}, day2, T0 + 2 * DAY, SETTINGS) == list(day2.values())


def test_a_denial_that_waited_for_its_time_still_counts_its_time() -> None:
    """Found by the property test: a denial stamped six hours ahead waits while a later denial
    folds; when it comes in, what was observed up to its time stays denied, as in the whole
    fold."""
    log: Sequence[Evidence] = [_e(1, "terse", T0), _e(2, "terse", T0 + DAY / 4, "denied"),
                               _e(3, "terse", T0, "denied"), _e(4, "terse", T0),
                               _e(5, "terse", T0 + DAY / 4), _e(6, "terse", T0 + DAY / 2)]
    stats: UserStats = {}
    first = advance(stats, log[:3], 0, T0, None, SETTINGS)
    assert first.deferred == [2]
    second = advance(stats, [log[1], *log[3:]], first.folded_seq, T0 + DAY, None, SETTINGS)
    for fk in second.refold:
        summarize_key(stats, fk, log, T0 + DAY, None, SETTINGS)
    whole = summarize(log, T0 + DAY, None, SETTINGS)
    assert stats[("style", "verbosity")]["terse"] == whole[("style", "verbosity")]["terse"]
    assert whole[("style", "verbosity")]["terse"].total == 1  # only what came after both
