"""`learning.explain_facet` as pure functions (services/stability_detector/explain.py).

The rows are what `store.load_evidence` / `store.load_commands` return for one user's
style/verbosity: an explicit statement and behavioral cues for "terse", fewer and newer
behavioral cues for "detailed". Expected numbers are worked out from the default settings
(weights explicit 1.0 / behavioral 0.7, style half-life 14 days, explicit multiplier 2,
thresholds 1.5 / 0.7 / 0.4).
"""

from __future__ import annotations

import math

import pytest

from services.stability_detector.explain import explain, moments, state_after, value_doc
from services.stability_detector.scoring import (
    AUTO,
    FORGOTTEN,
    PINNED,
    Command,
    Evidence,
    score_keys,
)
from services.stability_detector.settings import DAY, LearningSettings

SETTINGS = LearningSettings()
T0 = 1_700_000_000.0
FK = ("style", "verbosity")
HALF_LIFE = 14 * DAY


def ev(seq: int, value: str, cue: str, at: float) -> Evidence:
    return Evidence(event_id=f"ev-{seq}", facet_class="style", key="verbosity", value=value,
                    cue=cue, observed_at=at, confidence=0.9, seq=seq,
                    refs=({"event_id": f"ev-{seq}", "producer": f"producer.{cue}"},))


EVIDENCE = [
    ev(1, "terse", "explicit", T0),               # "keep it short", said once
    ev(2, "terse", "behavioral", T0 + 1 * DAY),   # the user cut long answers short...
    ev(3, "terse", "behavioral", T0 + 4 * DAY),
    ev(4, "terse", "behavioral", T0 + 7 * DAY),
    ev(5, "detailed", "behavioral", T0 + 10 * DAY),  # ...then asked for detail twice
    ev(6, "detailed", "behavioral", T0 + 10 * DAY),
]
AS_OF = T0 + 14 * DAY  # one half-life after the explicit statement


def test_an_explicit_and_a_behavioral_candidate_explained_term_by_term() -> None:
    out = explain(FK, EVIDENCE, [], AS_OF, math.inf, SETTINGS)
    assert out is not None
    terse, detailed = out["values"]

    assert terse["value"] == "terse"
    behavioral, explicit = terse["families"]  # sorted by family name
    assert behavioral["family"] == "behavioral" and behavioral["count"] == 3
    assert behavioral["newest"] == T0 + 7 * DAY
    assert behavioral["weight"] == 0.7
    assert behavioral["decay"] == pytest.approx(2 ** -0.5)  # newest is half a half-life old
    assert behavioral["log_count"] == pytest.approx(math.log(4))
    assert behavioral["contribution"] == pytest.approx(0.7 * 2 ** -0.5 * math.log(4))
    assert explicit["family"] == "explicit" and explicit["count"] == 1
    assert explicit["decay"] == pytest.approx(0.5)  # one half-life old
    assert explicit["contribution"] == pytest.approx(0.5 * math.log(2))
    base = behavioral["contribution"] + explicit["contribution"]
    assert terse["base"] == pytest.approx(base)
    assert terse["cue_multiplier"] == 2.0  # it has explicit evidence
    assert terse["stability"] == pytest.approx(2 * base) == pytest.approx(2.0655, abs=1e-4)
    assert terse["state"] == "active"

    assert detailed["value"] == "detailed" and detailed["cue_multiplier"] == 1.0
    assert [f["family"] for f in detailed["families"]] == ["behavioral"]
    assert detailed["stability"] == pytest.approx(0.7 * 2 ** (-4 / 14) * math.log(3))
    assert detailed["state"] == "candidate"

    assert out["class"] == "style" and out["key"] == "verbosity" and out["as_of"] == AS_OF
    assert out["user_state"] == AUTO and out["user_multiplier"] == 1.0
    assert out["value"] == "terse" and out["state"] == "active"
    assert out["stability"] == pytest.approx(terse["stability"])
    assert out["half_life_seconds"] == HALF_LIFE
    assert out["evidence_window_start"] is None
    assert out["thresholds"] == {"active": 1.5, "provisional": 0.7, "candidate": 0.4}
    # pure decay takes the winner below 1.5 at as_of + h·log2(S/1.5), and it falls to provisional
    assert out["next_change_at"] == pytest.approx(
        AS_OF + HALF_LIFE * math.log2(terse["stability"] / 1.5))
    assert out["next_state"] == "provisional"
    # the winner's refs, newest first
    assert [r["event_id"] for r in out["evidence"]] == ["ev-4", "ev-3", "ev-2", "ev-1"]


def test_the_whole_score_decays_with_the_class_half_life() -> None:
    now = explain(FK, EVIDENCE, [], AS_OF, math.inf, SETTINGS)
    later = explain(FK, EVIDENCE, [], AS_OF + HALF_LIFE, math.inf, SETTINGS)
    assert now is not None and later is not None
    for a, b in zip(now["values"], later["values"], strict=True):
        assert b["stability"] == pytest.approx(a["stability"] / 2)
        for fa, fb in zip(a["families"], b["families"], strict=True):
            assert fb["decay"] == pytest.approx(fa["decay"] / 2)
            assert fb["log_count"] == fa["log_count"]
    assert later["state"] == "provisional"  # 2.07 / 2 ≈ 1.03
    assert later["next_state"] == "candidate"
    # the crossing is a property of the decay, not of when one asks
    assert now["next_change_at"] < AS_OF + HALF_LIFE < later["next_change_at"]


def test_a_pin_holds_its_value_with_an_infinite_multiplier_and_no_crossing() -> None:
    pin = Command("pin", T0 + 12 * DAY, 7, "style", "verbosity", "brief")
    out = explain(FK, EVIDENCE, [pin], AS_OF, math.inf, SETTINGS)
    assert out is not None
    assert out["user_state"] == PINNED and out["user_multiplier"] == "inf"
    assert out["value"] == "brief" and out["state"] == "active"
    assert out["stability"] is None  # infinite
    assert out["next_change_at"] is None and out["next_state"] is None
    assert [v["value"] for v in out["values"]] == ["terse", "detailed"]  # still explained


def test_a_forgotten_facet_is_dropped_with_a_zero_multiplier() -> None:
    forget = Command("forget", T0 + 12 * DAY, 7, "style", "verbosity")
    out = explain(FK, EVIDENCE, [forget], AS_OF, math.inf, SETTINGS)
    assert out is not None
    assert out["user_state"] == FORGOTTEN and out["user_multiplier"] == 0.0
    assert out["state"] == "dropped" and out["stability"] == 0.0
    assert out["next_change_at"] is None and out["next_state"] is None


def test_a_reset_starts_the_evidence_window() -> None:
    reset = Command("reset", T0 + 8 * DAY, 7)
    out = explain(FK, EVIDENCE, [reset], AS_OF, math.inf, SETTINGS)
    assert out is not None
    assert out["evidence_window_start"] == T0 + 8 * DAY
    assert [v["value"] for v in out["values"]] == ["detailed"]  # only what came after
    assert out["value"] == "detailed" and out["state"] == "candidate"
    assert out["next_state"] == "dropped"
    assert [r["event_id"] for r in out["evidence"]] == ["ev-6", "ev-5"]


def test_commands_after_a_past_as_of_do_not_count() -> None:
    pin = Command("pin", T0 + 20 * DAY, 7, "style", "verbosity", "brief")
    past = explain(FK, EVIDENCE, [pin], AS_OF, AS_OF, SETTINGS)
    assert past is not None and past["user_state"] == AUTO and past["value"] == "terse"
    current = explain(FK, EVIDENCE, [pin], AS_OF, math.inf, SETTINGS)
    assert current is not None and current["user_state"] == PINNED


def test_nothing_to_explain() -> None:
    assert explain(FK, [], [], AS_OF, math.inf, SETTINGS) is None
    # evidence only from before a reset: still nothing
    reset = Command("reset", T0 + 30 * DAY, 7)
    assert explain(FK, EVIDENCE, [reset], T0 + 31 * DAY, math.inf, SETTINGS) is None
    # a user setting alone is explained (no evidence, no values)
    pin = Command("pin", T0, 1, "style", "verbosity", "terse")
    only_pin = explain(FK, [], [pin], AS_OF, math.inf, SETTINGS)
    assert only_pin is not None
    assert only_pin["values"] == [] and only_pin["value"] == "terse"
    assert only_pin["user_state"] == PINNED and only_pin["next_state"] is None


def test_value_doc_matches_the_score() -> None:
    scored = score_keys(EVIDENCE, AS_OF, None, SETTINGS)[FK]
    winner = scored.winner
    assert winner is not None
    doc = value_doc(winner, SETTINGS)
    assert doc["stability"] == winner.stability and doc["base"] == winner.base
    assert sum(f["contribution"] for f in doc["families"]) == pytest.approx(doc["base"])


def test_moments() -> None:
    asked = T0 + 3 * DAY
    assert moments(asked, T0 + 5 * DAY, T0 + 9 * DAY) == (asked, asked)
    assert moments(None, T0 + 5 * DAY, T0 + 9 * DAY) == (T0 + 5 * DAY, math.inf)
    assert moments(None, None, T0 + 9 * DAY) == (T0 + 9 * DAY, math.inf)


@pytest.mark.parametrize(("stability", "after"), [
    (math.inf, "provisional"), (2.0, "provisional"), (1.5, "provisional"),
    (1.49, "candidate"), (0.7, "candidate"), (0.69, "dropped"), (0.4, "dropped"),
    (0.39, "dropped"), (0.0, "dropped"),
])
def test_state_after(stability: float, after: str) -> None:
    assert state_after(stability, SETTINGS) == after
