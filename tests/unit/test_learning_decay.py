"""`only_decayed` (which rows a rebuild need not write) compares fields in place; it must say
what comparing whole rows says: every field equal but the score, the score the stored one
decayed, the next crossing where it was."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import example, given
from hypothesis import strategies as st

from services.stability_detector.scoring import FacetRow, decayed, only_decayed
from services.stability_detector.settings import DAY, LearningSettings

SETTINGS = LearningSettings()
T0 = 1_790_000_000.0


def by_whole_rows(old: FacetRow, new: FacetRow, as_of: float) -> bool:
    """The definition, with whole rows: what `only_decayed` answered before it read fields."""
    then = decayed(old, as_of, SETTINGS)
    if dataclasses.replace(then, stability=new.stability,
                           next_change_at=new.next_change_at) != new:
        return False
    if (then.next_change_at is None) != (new.next_change_at is None) or (
            then.next_change_at is not None and new.next_change_at is not None
            and abs(then.next_change_at - new.next_change_at) > 1e-3):
        return False
    if not (math.isfinite(then.stability) and math.isfinite(new.stability)):
        return then.stability == new.stability
    return math.isclose(then.stability, new.stability, rel_tol=1e-9, abs_tol=1e-12)


STORED = FacetRow("style", "verbosity", "terse", "active", 2.0, "auto",
                  ({"type": "turn", "turn_id": "t1"},), {"explicit": 2}, 2, T0 - DAY, T0,
                  T0 + 30 * DAY, "learned", T0)
CHANGES = st.fixed_dictionaries({}, optional={
    "value": st.sampled_from(["terse", "detailed"]),
    "state": st.sampled_from(["active", "provisional"]),
    "user_state": st.sampled_from(["auto", "pinned"]),
    "evidence_refs": st.sampled_from([(), ({"type": "turn", "turn_id": "t1"},)]),
    "cue_counts": st.sampled_from([{"explicit": 2}, {"explicit": 3}]),
    "evidence_count": st.integers(1, 3),
    "first_seen_at": st.sampled_from([None, T0 - DAY]),
    "next_change_at": st.sampled_from([None, T0 + 30 * DAY, T0 + 30 * DAY + 0.0005,
                                       T0 + 31 * DAY]),
    "origin": st.sampled_from(["learned", "stated"]),
    "stability": st.sampled_from([2.0, math.inf, 0.0, 1.0]),
    "as_of": st.sampled_from([None, T0, T0 - DAY]),
})


@given(CHANGES, CHANGES, st.sampled_from([T0, T0 + DAY, T0 + 14 * DAY]), st.booleans())
@example({}, {}, T0 + 14 * DAY, True)  # decay alone: not written
@example({}, {"origin": "stated"}, T0, False)
def test_only_decayed_says_what_comparing_whole_rows_says(
        stored: dict[str, object], changed: dict[str, object], as_of: float,
        decay_new: bool) -> None:
    old = dataclasses.replace(STORED, **stored)  # type: ignore[arg-type]
    new = dataclasses.replace(old, **{"as_of": None, **changed})  # type: ignore[arg-type]
    if decay_new and "stability" not in changed:  # a new row computed at as_of: the decay
        new = dataclasses.replace(new, stability=decayed(old, as_of, SETTINGS).stability)
    assert only_decayed(old, new, as_of, SETTINGS) == by_whole_rows(old, new, as_of)
