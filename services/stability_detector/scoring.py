"""Stability scoring and the facet cache as pure functions of (evidence, commands, as_of).

No clock, no I/O: the projection, the `as_of` queries and `explain_facet` all call these with
data from the log, so the same inputs always give the same cache, and a replay from sequence 1
rebuilds it byte for byte.

Decay is by evidence time only: a value's weight halves every class half-life after the newest
evidence of each cue family. A rebuild with nothing new therefore changes nothing but the decay
that time itself brings (resetting `last_seen` on every rebuild, and losing the explicit bonus,
would make facets flap between Active and Provisional).

Long on purpose: the learning cache's arithmetic as one set of pure functions (scoring, user
state, the cache, budgets, diff) that a replay must reproduce byte for byte; read together.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.stability_detector.settings import LearningSettings
from services.stability_detector.summary import ValueStats

ACTIVE, PROVISIONAL, CANDIDATE, DROPPED = "active", "provisional", "candidate", "dropped"
LEARNED, STATED, SET_BY_USER, PROVIDER = "learned", "stated", "set_by_user", "provider"
#: statement stances (habitus.events.domain.Stance): what holds a value, what drops one
HOLDING_STANCES = frozenset({"standing", "declared", "confirmed"})
SETTING_STANCES = frozenset({"declared", "confirmed"})
#: classes that never become Active from weak cues (behavioral, recurrence) alone
GUARDED_CLASSES = frozenset({"identity", "veto"})
WEAK_CUES = frozenset({"behavioral", "recurrence"})
AUTO, PINNED, FORGOTTEN = "auto", "pinned", "forgotten"
#: evidence from the user's own account at a provider: the newest such value is held Active
AUTHORITATIVE = "authoritative"
INF = math.inf
FacetKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Evidence:
    event_id: str
    facet_class: str
    key: str
    value: str
    cue: str
    observed_at: float
    confidence: float
    seq: int
    refs: tuple[Mapping[str, Any], ...] = ()
    #: how the user meant it, for a statement (`Stance` values); None for other evidence
    stance: str | None = None
    sentence: str | None = None


@dataclass(frozen=True, slots=True)
class Command:
    kind: str  # "pin" | "unpin" | "forget" | "update" | "reset"
    at: float
    seq: int
    facet_class: str | None = None
    key: str | None = None
    value: str | None = None


@dataclass(frozen=True, slots=True)
class Control:
    user_state: str
    value: str | None = None
    #: when the user gave it: a pin without a value holds the value winning at that moment
    since: float = field(default=0.0, compare=False)
    #: its place in the log: only the commands before it shape that moment
    seq: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class FamilyScore:
    family: str
    count: int
    newest: float
    weight: float
    decay: float
    log_count: float

    @property
    def contribution(self) -> float:
        return self.weight * self.decay * self.log_count


@dataclass(frozen=True, slots=True)
class ValueScore:
    value: str
    families: tuple[FamilyScore, ...]
    cue: float
    newest: float

    @property
    def base(self) -> float:
        return sum(f.contribution for f in self.families)

    @property
    def stability(self) -> float:
        return self.base * self.cue


@dataclass(frozen=True)
class FacetRow:
    facet_class: str
    key: str
    value: str
    state: str
    stability: float
    user_state: str
    evidence_refs: tuple[Mapping[str, Any], ...] = ()
    cue_counts: Mapping[str, int] = field(default_factory=dict)
    evidence_count: int = 0
    first_seen_at: float | None = None
    last_evidence_at: float | None = None
    next_change_at: float | None = None
    #: why it holds its value: learned, stated, set_by_user or provider
    origin: str = LEARNED
    #: the `as_of` its stability is at, for a row read back from the cache (None: computed now)
    as_of: float | None = field(default=None, compare=False)

    @property
    def visible(self) -> tuple[str, str, str, str]:
        """What downstream consumers see change: value, state, user state, origin."""
        return (self.value, self.state, self.user_state, self.origin)


def decayed(row: FacetRow, as_of: float, settings: LearningSettings) -> FacetRow:
    """A stored row with its stability brought to `as_of` by decay alone.

    Every term of a value's score decays with the class half-life from its family's newest
    evidence, so the whole score does: S(t) = S(t0) · 2^(-(t - t0)/h). A rebuild leaves a row
    whose evidence, value and state did not change as it was (rewriting every row at every
    rebuild only to store the decay was most of a rebuild's writes); readers decay it."""
    stability = decayed_stability(row, as_of, settings)
    if stability is None:
        return row
    return dataclasses.replace(row, stability=stability, as_of=as_of)


def decayed_stability(row: FacetRow, as_of: float, settings: LearningSettings) -> float | None:
    """`decayed(row, as_of).stability`, or None where decay leaves the row as it is."""
    if row.as_of is None or as_of <= row.as_of or not math.isfinite(row.stability) \
            or row.stability == 0:
        return None
    return float(row.stability * 2.0 ** (-(as_of - row.as_of)
                                        / settings.half_life(row.facet_class)))


#: what two rows compare on besides the score and its next crossing (`FacetRow.__eq__`'s
#: fields but those two), read in one C call: `only_decayed` runs for every row of every rebuild
_BESIDES_SCORE = operator.attrgetter(*(
    f.name for f in dataclasses.fields(FacetRow)
    if f.compare and f.name not in ("stability", "next_change_at")))


def only_decayed(old: FacetRow, new: FacetRow, as_of: float, settings: LearningSettings
                 ) -> bool:
    """Whether `new` (computed at `as_of`) differs from the stored `old` by decay alone, so it
    need not be written: everything equal but the stability, which is `old`'s decayed to
    `as_of`, and the next threshold crossing, which pure decay leaves where it was."""
    if _BESIDES_SCORE(old) != _BESIDES_SCORE(new):
        return False
    then_next = old.next_change_at  # decay leaves it where it was
    if (then_next is None) != (new.next_change_at is None) or (
            then_next is not None and new.next_change_at is not None
            and abs(then_next - new.next_change_at) > 1e-3):
        return False
    then = decayed_stability(old, as_of, settings)
    then_stability = old.stability if then is None else then
    if not (math.isfinite(then_stability) and math.isfinite(new.stability)):
        return then_stability == new.stability
    return math.isclose(then_stability, new.stability, rel_tol=1e-9, abs_tol=1e-12)


def settled_rows(old: Mapping[FacetKey, FacetRow], new: Mapping[FacetKey, FacetRow],
                 as_of: float, settings: LearningSettings) -> list[FacetRow]:
    """The rows of `new` a rebuild at `as_of` must write: new ones, and those that changed by
    more than the decay since the stored row's time."""
    return [row for fk, row in new.items()
            if fk not in old or not only_decayed(old[fk], row, as_of, settings)]


# ---------------------------------------------------------------------------- scoring


def score_value(value: str, stats: ValueStats, as_of: float, half_life: float,
                settings: LearningSettings) -> ValueScore:
    """A value's score at `as_of` from the summary of its evidence."""
    families = tuple(
        FamilyScore(
            family=family,
            count=stats.counts[family],
            newest=stats.newest[family],
            weight=settings.weights.get(family, 0.0),
            decay=2.0 ** (-max(as_of - stats.newest[family], 0.0) / half_life),
            log_count=math.log1p(stats.counts[family]),
        )
        for family in sorted(stats.counts) if stats.counts[family]
    )
    explicit = stats.counts.get("explicit", 0) > 0
    return ValueScore(
        value=value,
        families=families,
        cue=settings.explicit_multiplier if explicit else 1.0,
        newest=max((f.newest for f in families), default=0.0),
    )


def state_for(stability: float, settings: LearningSettings) -> str:
    if stability >= settings.tau_active:
        return ACTIVE
    if stability >= settings.tau_provisional:
        return PROVISIONAL
    if stability >= settings.tau_candidate:
        return CANDIDATE
    return DROPPED


def next_crossing(stability: float, as_of: float, half_life: float,
                  settings: LearningSettings) -> float | None:
    """When pure decay takes `stability` below the next threshold under it.

    Every term of a (class, key, value) decays with the same half-life, so the whole score does:
    S(t) = S(as_of) · 2^(-(t - as_of)/h), and S(t) = τ at t = as_of + h·log2(S/τ).
    """
    if not math.isfinite(stability) or stability <= 0:
        return None
    for tau in (settings.tau_active, settings.tau_provisional, settings.tau_candidate):
        if stability >= tau:
            return as_of + half_life * math.log2(stability / tau)
    return None


# ---------------------------------------------------------------------------- user state


def fold_commands(commands: Iterable[Command], as_of: float
                  ) -> tuple[dict[FacetKey, Control], float | None]:
    """The user's controls and evidence-window start, as of `as_of`, from their commands."""
    controls: dict[FacetKey, Control] = {}
    window_start: float | None = None
    for cmd in sorted(commands, key=lambda c: c.seq):
        if cmd.at > as_of:
            continue
        if cmd.kind == "reset":
            window_start = cmd.at
            continue
        assert cmd.facet_class is not None and cmd.key is not None
        fk = (cmd.facet_class, cmd.key)
        if cmd.kind in ("pin", "update"):
            previous = controls.get(fk)
            if cmd.value is not None:
                controls[fk] = Control(PINNED, cmd.value, cmd.at, cmd.seq)
            elif previous is not None and previous.user_state == PINNED:
                controls[fk] = previous  # pinning a pinned facet changes nothing
            else:
                controls[fk] = Control(PINNED, None, cmd.at, cmd.seq)
        elif cmd.kind == "unpin":
            controls.pop(fk, None)
        elif cmd.kind == "forget":
            controls[fk] = Control(FORGOTTEN, None, cmd.at, cmd.seq)
    return controls, window_start


# ---------------------------------------------------------------------------- the cache


@dataclass(frozen=True)
class KeyScores:
    """Everything known about one (class, key) at as_of: used by the cache and by explain."""

    facet_class: str
    key: str
    values: tuple[ValueScore, ...]  # best first
    stats: Mapping[str, ValueStats]

    @property
    def winner(self) -> ValueScore | None:
        return self.values[0] if self.values else None


#: the summaries of one user's evidence: (class, key) -> value -> summary
UserStats = dict[FacetKey, dict[str, ValueStats]]


def in_window(item: Evidence, as_of: float, window_start: float | None) -> bool:
    return item.observed_at <= as_of and (window_start is None or item.observed_at > window_start)


def counted(item: Evidence, window_start: float | None, settings: LearningSettings) -> bool:
    """Whether `item` ever counts: a class the cache learns, inside the evidence window (its
    time against `as_of` is the other half of `in_window`, which waits rather than drops)."""
    return item.facet_class in settings.half_life_days and (
        window_start is None or item.observed_at > window_start)


def fold(stats: UserStats, item: Evidence, settings: LearningSettings) -> None:
    """Fold one counted, in-window piece of evidence into the user's summaries (raises
    `OutOfOrderDenial` for a denial older than evidence already folded; nothing changes)."""
    values = stats.setdefault((item.facet_class, item.key), {})
    target = values.get(item.value)
    if target is None:
        target = values[item.value] = ValueStats()
    target.add(event_id=item.event_id, cue=item.cue, observed_at=item.observed_at,
               seq=item.seq, refs=item.refs, stance=item.stance,
               keep_refs=settings.evidence_refs_kept)


def summarize(evidence: Iterable[Evidence], as_of: float, window_start: float | None,
              settings: LearningSettings) -> UserStats:
    """The summaries of all the evidence inside the window and observed by `as_of`, folded in
    log order (so a denial never comes out of order)."""
    stats: UserStats = {}
    for item in sorted(evidence, key=lambda i: i.seq):
        if in_window(item, as_of, window_start) and counted(item, window_start, settings):
            fold(stats, item, settings)
    return stats


def score_keys(evidence: Iterable[Evidence], as_of: float, window_start: float | None,
               settings: LearningSettings) -> dict[FacetKey, KeyScores]:
    return score_stats(summarize(evidence, as_of, window_start, settings), as_of, settings)


def score_stats(stats: Mapping[FacetKey, Mapping[str, ValueStats]], as_of: float,
                settings: LearningSettings) -> dict[FacetKey, KeyScores]:
    """Every key's values scored at `as_of` (keys whose evidence was all denied are left out)."""
    result = {}
    for (facet_class, key), by_value in stats.items():
        live = {v: s for v, s in by_value.items() if s.total}
        if not live:
            continue
        half_life = settings.half_life(facet_class)
        scores = [score_value(v, s, as_of, half_life, settings) for v, s in live.items()]
        # argmax of stability; ties go to newer evidence, then to value order
        scores.sort(key=lambda s: (-s.stability, -s.newest, s.value))
        result[(facet_class, key)] = KeyScores(facet_class, key, tuple(scores), live)
    return result


def authoritative_value(scores: KeyScores | None) -> str | None:
    """The value of the newest authoritative evidence in the window, if any: the provider's
    latest report of the user's own account. Newer reports win, whatever their scores."""
    newest: tuple[float, int] | None = None
    value = None
    for v, stats in scores.stats.items() if scores else ():
        if stats.authoritative is not None and (newest is None or stats.authoritative > newest):
            newest, value = stats.authoritative, v
    return value


def _row_for(scores: KeyScores | None, facet_class: str, key: str, value: str, state: str,
             stability: float, user_state: str, as_of: float, settings: LearningSettings
             ) -> FacetRow:
    stats = scores.stats.get(value) if scores else None
    next_change = None
    if user_state == AUTO:
        next_change = next_crossing(stability, as_of, settings.half_life(facet_class), settings)
    return FacetRow(
        facet_class=facet_class,
        key=key,
        value=value,
        state=state,
        stability=stability,
        user_state=user_state,
        evidence_refs=stats.ref_list() if stats else (),
        cue_counts=dict(sorted((c, n) for c, n in stats.counts.items() if n)) if stats else {},
        evidence_count=stats.total if stats else 0,
        first_seen_at=stats.first_at if stats else None,
        last_evidence_at=stats.last_at if stats else None,
        next_change_at=next_change,
    )


def value_when_given(fk: FacetKey, control: Control, commands: Sequence[Command],
                     evidence: Iterable[Evidence], settings: LearningSettings) -> str | None:
    """The value winning when the user pinned or forgot without naming one: the key's
    evidence and the commands before it, at that moment."""
    if control.value is not None:
        return control.value
    _, window = fold_commands([c for c in commands if c.seq < control.seq], control.since)
    relevant = [e for e in evidence if (e.facet_class, e.key) == fk]
    then = score_keys(relevant, control.since, window, settings).get(fk)
    held = authoritative_value(then)
    if held is not None:
        return held
    return then.winner.value if then and then.winner else None


#: the value a control without one holds, given its key and itself
HeldValue = Callable[[FacetKey, Control], "str | None"]


def compute_cache(evidence: Iterable[Evidence], commands: Iterable[Command], as_of: float,
                  settings: LearningSettings, *, commands_as_of: float | None = None
                  ) -> dict[FacetKey, FacetRow]:
    """The user's facet cache at `as_of`: every row worth keeping (Auto Dropped rows are not).

    Commands count up to `commands_as_of` (default `as_of`). The live cache passes infinity:
    a user's command takes effect as soon as it is applied, without moving the cache's clock
    (only RebuildRequested does that); a question about the past passes nothing and sees only
    the commands given by then.
    """
    commands = list(commands)
    evidence = list(evidence)
    _, window_start = fold_commands(
        commands, as_of if commands_as_of is None else commands_as_of)
    stats = summarize(evidence, as_of, window_start, settings)
    return cache_from_stats(
        stats, commands, as_of, settings, commands_as_of=commands_as_of,
        held=lambda fk, control: value_when_given(fk, control, commands, evidence, settings))


def cache_from_stats(stats: Mapping[FacetKey, Mapping[str, ValueStats]],
                     commands: Sequence[Command], as_of: float, settings: LearningSettings, *,
                     held: HeldValue, commands_as_of: float | None = None
                     ) -> dict[FacetKey, FacetRow]:
    """`compute_cache` from the summaries of the evidence (as `summarize` gives them, or as the
    projection keeps them folded up to date) rather than the evidence itself. `held`: the value
    a pin or forget without one holds (`value_when_given`, or what was recorded of it)."""
    controls, _ = fold_commands(commands, as_of if commands_as_of is None else commands_as_of)
    scored = score_stats(stats, as_of, settings)
    rows: dict[FacetKey, FacetRow] = {}
    for fk in sorted(set(scored) | set(controls)):
        facet_class, key = fk
        scores = scored.get(fk)
        control = controls.get(fk)
        said = latest_statement(scores)
        if said is not None and control is not None and control.seq < said.seq and (
                control.user_state != FORGOTTEN or said.stance in SETTING_STANCES):
            # the user spoke after their command: the statement counts. A forget is lifted
            # only by the user setting the value ("from now on ...", a yes to a confirmation):
            # it blocks re-learning, from what is said in passing too.
            control = None
        winner = scores.winner if scores else None
        if said is not None and control is None and said.stance in HOLDING_STANCES:
            row = _held_by_statement(scores, said, as_of, settings)  # type: ignore[arg-type]
            if row is not None:
                rows[fk] = row
                continue
        if control is not None and control.user_state == FORGOTTEN:
            value = held(fk, control) or (winner.value if winner else "")
            rows[fk] = _row_for(scores, facet_class, key, value, DROPPED, 0.0, FORGOTTEN,
                                as_of, settings)
        elif control is not None and control.user_state == PINNED:
            pinned_value = held(fk, control)
            if pinned_value is not None:  # a pin of nothing holds nothing
                rows[fk] = dataclasses.replace(
                    _row_for(scores, facet_class, key, pinned_value, ACTIVE, INF, PINNED,
                             as_of, settings), origin=SET_BY_USER)
        elif (reported := authoritative_value(scores)) is not None:
            # Not learned but reported by the source system: Active at once and no decay,
            # until the user changes it (a control, above) or a newer report differs.
            rows[fk] = dataclasses.replace(
                _row_for(scores, facet_class, key, reported, ACTIVE, INF, AUTO, as_of,
                         settings), origin=PROVIDER)
        elif winner is not None:
            state = _guarded(scores, winner, state_for(winner.stability, settings))  # type: ignore[arg-type]
            if state != DROPPED:
                rows[fk] = _row_for(scores, facet_class, key, winner.value, state,
                                    winner.stability, AUTO, as_of, settings)
    return apply_budgets(rows, settings, as_of)


@dataclass(frozen=True, slots=True)
class Said:
    """The user's newest statement about a key: its value, place in the log and stance."""

    value: str
    seq: int
    stance: str


def latest_statement(scores: KeyScores | None) -> Said | None:
    """The user's newest statement about this key (in log order), whatever its stance."""
    newest: Said | None = None
    for value, stats in scores.stats.items() if scores else ():
        if stats.said is not None and (newest is None or stats.said[0] > newest.seq):
            newest = Said(value, stats.said[0], stats.said[1])
    return newest


def _held_by_statement(scores: KeyScores, said: Said, as_of: float,
                       settings: LearningSettings) -> FacetRow | None:
    """The row a statement holds: its value, Active, until a newer statement, the user's own
    command or (for a plain statement) another value that earns Active on evidence newer than
    the statement replaces it."""
    value = said.value
    stated = next(v for v in scores.values if v.value == value)
    if said.stance not in SETTING_STANCES:
        for other in scores.values:
            newer = scores.stats[other.value].max_seq > said.seq
            if other.value != value and newer and state_for(
                    other.stability, settings) == ACTIVE and other.stability > stated.stability:
                return None  # later evidence replaced what was said once
    origin = SET_BY_USER if said.stance in SETTING_STANCES else STATED
    row = _row_for(scores, scores.facet_class, scores.key, value, ACTIVE, stated.stability,
                   AUTO, as_of, settings)
    return dataclasses.replace(row, origin=origin, next_change_at=None)


def _guarded(scores: KeyScores, winner: ValueScore, state: str) -> str:
    """Identity and vetoes: never Active from weak cues alone; an identity value two
    independent sources agree on (two signatures, a signature and a provider) is Active, and
    one structural source makes it at least Provisional."""
    stats = scores.stats.get(winner.value)
    cues = stats.cues if stats else frozenset()
    if scores.facet_class in GUARDED_CLASSES and state == ACTIVE and cues <= WEAK_CUES:
        return PROVISIONAL
    if scores.facet_class == "identity":
        # one step up, never more: the state still changes exactly where the score crosses a
        # threshold, so the rebuild index (next_change_at) stays right
        sources = stats.sources if stats else []
        if len(sources) >= 2 and state == PROVISIONAL:
            return ACTIVE
        if sources and state == CANDIDATE:
            return PROVISIONAL
    return state


def _rank(row: FacetRow) -> tuple[float, float, str, str]:
    """Strongest first; ties go to newer evidence, then class and key order."""
    return (-row.stability, -(row.last_evidence_at or 0.0), row.facet_class, row.key)


def apply_budgets(rows: dict[FacetKey, FacetRow], settings: LearningSettings,
                  as_of: float | None = None) -> dict[FacetKey, FacetRow]:
    """Each class keeps its top-N Active; the rest compete for the shared overflow slots; what is
    left is Provisional. Pinned rows count against the budget and are never demoted.

    Classes decay at different rates, so a row left out of the overflow can overtake an admitted
    row of another class before either crosses a threshold; that moment is indexed too (given
    `as_of`), so the periodic rebuild comes back for it."""
    by_class: dict[str, list[FacetRow]] = defaultdict(list)
    for row in rows.values():
        if row.state == ACTIVE:
            by_class[row.facet_class].append(row)
    overflow: list[FacetRow] = []
    for facet_class, actives in by_class.items():
        actives.sort(key=_rank)
        budget = settings.budgets.get(facet_class, 0)
        kept = 0
        for row in actives:
            if row.user_state == PINNED or kept < budget:
                kept += 1
            else:
                overflow.append(row)
    overflow.sort(key=_rank)
    admitted, left_out = overflow[: settings.overflow], overflow[settings.overflow :]
    result = dict(rows)
    for row in left_out:
        fk = (row.facet_class, row.key)
        swap = None if as_of is None else _overtakes_at(row, admitted, as_of, settings)
        next_change = row.next_change_at
        if swap is not None and (next_change is None or swap < next_change):
            next_change = swap
        result[fk] = dataclasses.replace(row, state=PROVISIONAL, next_change_at=next_change)
    return result


def _overtakes_at(row: FacetRow, admitted: Sequence[FacetRow], as_of: float,
                  settings: LearningSettings) -> float | None:
    """Earliest time `row` outranks an admitted row of a faster-decaying class.

    S_r·2^(-Δ/h_r) = S_a·2^(-Δ/h_a)  ⇒  Δ = log2(S_a/S_r) / (1/h_a - 1/h_r), when h_a < h_r.
    """
    h_r = settings.half_life(row.facet_class)
    best: float | None = None
    for other in admitted:
        h_a = settings.half_life(other.facet_class)
        if h_a >= h_r or not math.isfinite(other.stability) or row.stability <= 0:
            continue
        delta = math.log2(other.stability / row.stability) / (1.0 / h_a - 1.0 / h_r)
        at = as_of + max(delta, 0.0)
        best = at if best is None else min(best, at)
    return best


def active_list(rows: Mapping[FacetKey, FacetRow]) -> list[FacetRow]:
    """Active facets, strongest first (pinned first), then by class and key."""
    return sorted((r for r in rows.values() if r.state == ACTIVE),
                  key=lambda r: (-r.stability, r.facet_class, r.key))


def next_due(rows: Mapping[FacetKey, FacetRow]) -> float | None:
    return min((r.next_change_at for r in rows.values() if r.next_change_at is not None),
               default=None)


@dataclass(frozen=True)
class Diff:
    """What a rebuild changed. The counts are about Active facets only, the ones prompts carry
    (what `CacheRebuilt` promises its subscribers): `added` became Active, `evicted` stopped
    being Active, `kept` were Active before and after (perhaps with another value, which
    `changes` shows), so `added + kept` is the number Active now. `changes` lists every facet
    whose visible value or state changed, Provisional ones included."""

    added: int
    evicted: int
    kept: int
    changes: tuple[tuple[FacetRow | None, FacetRow | None], ...]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def diff(old: Mapping[FacetKey, FacetRow], new: Mapping[FacetKey, FacetRow]) -> Diff:
    changes = []
    added = evicted = kept = 0
    for fk in sorted(set(old) | set(new)):
        before, after = old.get(fk), new.get(fk)
        was = before is not None and before.state == ACTIVE
        now = after is not None and after.state == ACTIVE
        if now and not was:
            added += 1
        elif was and not now:
            evicted += 1
        elif was and now:
            kept += 1
        if before is None or after is None or before.visible != after.visible:
            changes.append((before, after))
    return Diff(added, evicted, kept, tuple(changes))
