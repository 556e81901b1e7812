"""`learning.explain_facet` as pure functions: a facet's explanation, score by score.

No clock, no I/O: the RPC handler loads the user's evidence and commands (store.py), picks the
moment, and calls `explain`; the same inputs always give the same explanation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from services.stability_detector.scoring import (
    AUTO,
    DROPPED,
    FORGOTTEN,
    PINNED,
    Command,
    Evidence,
    FacetKey,
    ValueScore,
    compute_cache,
    fold_commands,
    in_window,
    next_crossing,
    score_keys,
    state_for,
)
from services.stability_detector.settings import LearningSettings


def moments(requested: float | None, last_as_of: float | None, now: float
            ) -> tuple[float, float]:
    """(as_of, commands_as_of) of an explanation.

    Asked for a moment: the evidence and the commands as they were then. Otherwise: the
    evidence as of the user's last rebuild (`now` before the first) and every command so far."""
    if requested is not None:
        return requested, requested
    return (last_as_of or now), math.inf


def state_after(stability: float, settings: LearningSettings) -> str:
    """The state a facet falls to when it decays past its current threshold."""
    order = [("active", settings.tau_active), ("provisional", settings.tau_provisional),
             ("candidate", settings.tau_candidate)]
    for index, (_, tau) in enumerate(order):
        if stability >= tau:
            return order[index + 1][0] if index + 1 < len(order) else DROPPED
    return DROPPED


def value_doc(score: ValueScore, settings: LearningSettings) -> dict[str, Any]:
    """One value's score: each cue family's term, their sum, the cue multiplier, the state."""
    return {
        "value": score.value,
        "families": [{
            "family": f.family, "count": f.count, "newest": f.newest,
            "weight": f.weight, "decay": f.decay, "log_count": f.log_count,
            "contribution": f.contribution,
        } for f in score.families],
        "base": score.base,
        "cue_multiplier": score.cue,
        "stability": score.stability,
        "state": state_for(score.stability, settings),
    }


def explain(facet: FacetKey, evidence: Iterable[Evidence], commands: Iterable[Command],
            as_of: float, commands_as_of: float, settings: LearningSettings
            ) -> dict[str, Any] | None:
    """The explanation of `facet` at `as_of` (commands up to `commands_as_of`), or None when
    there is neither evidence nor a user setting for it."""
    evidence = list(evidence)
    commands = list(commands)
    controls, window_start = fold_commands(commands, commands_as_of)
    scored = score_keys(evidence, as_of, window_start, settings)
    control = controls.get(facet)
    if facet not in scored and control is None:
        return None
    keys = scored.get(facet)
    user_state = control.user_state if control else AUTO
    multiplier = {PINNED: "inf", FORGOTTEN: 0.0}.get(user_state, 1.0)
    values = [value_doc(score, settings) for score in (keys.values if keys else ())]
    cache = compute_cache(evidence, commands, as_of, settings, commands_as_of=commands_as_of)
    row = cache.get(facet)
    half_life = settings.half_life(facet[0])
    winner = keys.winner if keys else None
    held = row is not None and row.origin != "learned"
    change_at = (next_crossing(winner.stability, as_of, half_life, settings)
                 if winner and user_state == AUTO and not held else None)
    return {
        "class": facet[0], "key": facet[1], "as_of": as_of, "user_state": user_state,
        "user_multiplier": multiplier,
        "value": row.value if row else (winner.value if winner else None),
        "state": row.state if row else DROPPED,
        "stability": None if row is None or math.isinf(row.stability) else row.stability,
        "half_life_seconds": half_life,
        "evidence_window_start": window_start,
        "thresholds": {"active": settings.tau_active,
                       "provisional": settings.tau_provisional,
                       "candidate": settings.tau_candidate},
        "values": values,
        "next_change_at": change_at,
        "next_state": (state_after(winner.stability, settings)
                       if winner and change_at else None),
        "evidence": list(row.evidence_refs) if row else [],
        "origin": row.origin if row else "learned",
        **statements_doc(evidence, facet, as_of, window_start),
    }


def _statement(item: Evidence) -> dict[str, Any]:
    return {"value": item.value, "stance": item.stance, "sentence": item.sentence,
            "observed_at": item.observed_at, "evidence": list(item.refs)}


def statements_doc(evidence: Iterable[Evidence], facet: FacetKey, as_of: float,
                   window_start: float | None) -> dict[str, Any]:
    """The user's latest statement about the key and the statements of other values it
    replaced: what explains "why does it say English now?"."""
    said = sorted((e for e in evidence
                   if (e.facet_class, e.key) == facet and e.stance not in (None, "one_off")
                   and in_window(e, as_of, window_start)),
                  key=lambda e: e.seq, reverse=True)
    if not said:
        return {"statement": None, "replaced": []}
    latest = said[0]
    replaced, seen = [], {latest.value}
    for item in said[1:]:
        if item.value not in seen:
            seen.add(item.value)
            replaced.append(_statement(item))
    return {"statement": _statement(latest), "replaced": replaced}
