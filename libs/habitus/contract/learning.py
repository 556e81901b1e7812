"""Parameters and results of the `learning.*` methods (the stability detector's facet cache).

Parameters reject unknown fields so a misspelt `clas` is an error, not a silently ignored filter.
Results forbid extra fields too: the OpenAPI document is generated from them, so a handler that
starts returning something undocumented fails the API fuzz test instead of drifting.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, StringConstraints

from habitus.events.domain import FacetClass, FacetOrigin, FacetState, UserState
from habitus.events.evidence import EvidenceRef
from habitus.ids import CallerUserId

UserId = CallerUserId
Key = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\s/][^\s]*$")]

_USER = "The user, within the caller's tenant."
_CLASS = "The facet class (what kind of preference it is)."
_KEY = "The facet key within its class, e.g. `verbosity`."
_PENDING = ("When the oldest evidence not yet in the cache arrived (its event time, epoch "
            "seconds): a rebuild is on its way. Null: nothing is waiting.")
_AS_OF = ("Answer as the cache was at this time (epoch seconds), recomputed from the event log; "
          "absent: the current cache.")


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    user_id: UserId = Field(description=_USER)


class ListFacets(_Params):
    class_: FacetClass | None = Field(default=None, alias="class",
                                      description="Only facets of this class; absent: all.")
    as_of: float | None = Field(default=None, ge=0, description=_AS_OF)


class FacetParams(_Params):
    class_: FacetClass = Field(alias="class", description=_CLASS)
    key: Key = Field(description=_KEY)


class ExplainFacet(FacetParams):
    as_of: float | None = Field(default=None, ge=0, description=_AS_OF)


class UpdateFacet(FacetParams):
    value: str = Field(min_length=1, max_length=2000,
                       description="The value to hold; the facet is pinned to it.")


class CacheParams(_Params):
    """The user whose facet cache is read, reset or rebuilt."""


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Facet(_Result):
    class_: FacetClass = Field(alias="class", description=_CLASS)
    key: str = Field(description=_KEY)
    value: str = Field(description="The winning value.")
    state: FacetState = Field(description="How stable the evidence makes it: `active` facets "
                                          "go into prompts, `provisional` ones with a hedge.")
    user_state: UserState = Field(description="What the user decided: `auto` (the evidence "
                                              "decides), `pinned`, or `forgotten`.")
    stability: float | None = Field(description="The evidence score; null when pinned (a pinned "
                                                "facet never decays).")
    pinned: bool = Field(description="Whether the user pinned it.")
    origin: FacetOrigin = Field(
        default=FacetOrigin.LEARNED,
        description="Why it holds its value: `learned` from evidence, `stated` once in so many "
                    "words, `set_by_user` (a declaration, a confirmation, an update or a pin) or "
                    "`provider` (the user's connected account reports it).")
    evidence_count: int = Field(ge=0, description="Evidence items seen for the winning value.")
    cue_counts: dict[str, int] = Field(description="Evidence items per cue family.")
    first_seen_at: float | None = Field(description="When the first evidence was observed.")
    last_evidence_at: float | None = Field(description="When the newest evidence was observed.")
    next_change_at: float | None = Field(description="When decay will next move it to another "
                                                     "state without new evidence; null: never.")
    evidence: list[EvidenceRef] = Field(description="The newest evidence it came from.")


class DroppedFacet(_Result):
    """What unpinning answers when the facet has no evidence left to stand on."""

    class_: FacetClass = Field(alias="class", description=_CLASS)
    key: str = Field(description=_KEY)
    state: Literal["dropped"] = Field(description="No longer in the cache.")
    user_state: Literal["auto"] = Field(description="Back to automatic.")


class UnpinResult(RootModel[Facet | DroppedFacet]):
    pass


class FacetList(_Result):
    user_id: str = Field(description=_USER)
    as_of: float | None = Field(description="The `as_of` asked for; null: the current cache.")
    pending_since: float | None = Field(description=_PENDING + " Null with `as_of` (a past "
                                        "cache is recomputed from all its evidence).")
    facets: list[Facet] = Field(description="Active then provisional facets, strongest first.")


class CacheStats(_Result):
    user_id: str = Field(description=_USER)
    total: int = Field(ge=0, description="Facets not forgotten.")
    active: int = Field(ge=0, description="Active facets.")
    provisional: int = Field(ge=0, description="Provisional facets.")
    candidate: int = Field(ge=0, description="Candidates (seen, not yet shown to prompts).")
    pinned: int = Field(ge=0, description="Facets the user pinned.")
    forgotten: int = Field(ge=0, description="Facets the user asked to forget.")
    by_class: dict[str, dict[str, int]] = Field(description="Counts per class, then per state.")
    pending_since: float | None = Field(description=_PENDING)


class RebuildStats(CacheStats):
    as_of: float = Field(description="The time the rebuild was computed as of.")


class Thresholds(_Result):
    active: float = Field(description="Stability at or above which a facet is active.")
    provisional: float = Field(description="Stability at or above which it is provisional.")
    candidate: float = Field(description="Stability at or above which it is kept as a candidate.")


class FamilyContribution(_Result):
    family: str = Field(description="The cue family (explicit, structural, behavioral, ...).")
    count: int = Field(ge=0, description="Evidence items of this family.")
    newest: float = Field(description="When the newest of them was observed.")
    weight: float = Field(description="The family's weight.")
    decay: float = Field(description="Decay since the newest item (1 = none).")
    log_count: float = Field(description="The count's diminishing-returns factor.")
    contribution: float = Field(description="weight * decay * log_count.")


class ValueExplanation(_Result):
    value: str = Field(description="A value the evidence supports.")
    families: list[FamilyContribution] = Field(description="Its score per cue family.")
    base: float = Field(description="The sum of the family contributions.")
    cue_multiplier: float = Field(description="The multiplier from the cue mix.")
    stability: float = Field(description="base * cue_multiplier.")
    state: FacetState = Field(description="The state this stability alone would give.")


class StatementExplanation(_Result):
    value: str = Field(description="The value the statement gave.")
    stance: str = Field(description="How it was meant: `standing`, `declared`, `confirmed`, "
                                    "`one_off` or `denied`.")
    sentence: str | None = Field(description="What the user said.")
    observed_at: float = Field(description="When it was said (epoch seconds).")
    evidence: list[EvidenceRef] = Field(description="Where it was said (the turn).")


class Explanation(_Result):
    class_: FacetClass = Field(alias="class", description=_CLASS)
    key: str = Field(description=_KEY)
    as_of: float = Field(description="The time the explanation was computed as of.")
    user_state: UserState = Field(description="What the user decided for this facet.")
    user_multiplier: float | Literal["inf"] = Field(
        description="The user's override: `inf` when pinned, 0 when forgotten, else 1.")
    value: str | None = Field(description="The value the cache holds (or would hold).")
    state: FacetState = Field(description="Its state in the cache; `dropped` when not in it.")
    stability: float | None = Field(description="Its stability; null when pinned or dropped.")
    half_life_seconds: float = Field(description="The class's decay half-life.")
    evidence_window_start: float | None = Field(
        description="Evidence at or before this time is ignored (a reset); null: none.")
    thresholds: Thresholds = Field(description="The state thresholds in force.")
    values: list[ValueExplanation] = Field(description="Every supported value, best first.")
    next_change_at: float | None = Field(description="When decay changes the state next.")
    next_state: FacetState | None = Field(description="The state it then falls to.")
    evidence: list[EvidenceRef] = Field(description="The newest evidence it came from.")
    origin: FacetOrigin = Field(
        default=FacetOrigin.LEARNED,
        description="Why it holds its value (as in `Facet.origin`).")
    statement: StatementExplanation | None = Field(
        default=None,
        description="The user's latest statement about this key, which holds (or once held) "
                    "its value; null when the user never stated one.")
    replaced: list[StatementExplanation] = Field(
        default_factory=list,
        description="Earlier statements of other values that the latest one replaced, newest "
                    "first.")
