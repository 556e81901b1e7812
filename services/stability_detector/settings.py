"""Learning settings: the scoring constants, each overridable from the environment
(`HABITUS_LEARNING_*`, JSON for the maps)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DAY = 86_400.0


class LearningSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_LEARNING_", extra="ignore",
                                      frozen=True)

    weights: dict[str, float] = Field(default_factory=lambda: {
        "explicit": 1.0, "structural": 0.9, "behavioral": 0.7, "recurrence": 0.6,
        "authoritative": 0.9,
    }, description=("weight of each cue family in a facet's stability (an authoritative "
                    "value is held Active whatever its score)"))
    half_life_days: dict[str, float] = Field(default_factory=lambda: {
        "identity": 90.0, "veto": 60.0, "tooling": 30.0, "goal": 30.0, "style": 14.0,
        "channel": 7.0,
    }, description="days for a class's evidence to lose half its weight")
    budgets: dict[str, int] = Field(default_factory=lambda: {
        "style": 4, "identity": 4, "tooling": 5, "veto": 3, "goal": 3, "channel": 1,
    }, description="Active facets each class keeps")
    overflow: int = Field(default=5, description=(
        "shared Active slots for over-budget facets of any class"))
    explicit_multiplier: float = Field(default=2.0, description=(
        "multiplier for a value with explicit evidence"))
    tau_active: float = Field(default=1.5, description="stability at which a facet is Active")
    tau_provisional: float = Field(default=0.7, description=(
        "stability at which a facet is Provisional"))
    tau_candidate: float = Field(default=0.4, description=(
        "stability at which a facet is a Candidate (below it: dropped)"))
    evidence_refs_kept: int = Field(default=50, description="evidence refs kept per facet")
    debounce_seconds: float = Field(default=1.5, gt=0, description=(
        "a user's new evidence is rebuilt once no more has arrived for this long (one rebuild "
        "per burst)"))
    max_wait_seconds: float = Field(default=10.0, gt=0, description=(
        "a user whose evidence keeps arriving is still rebuilt once its oldest pending "
        "evidence has waited this long"))
    periodic_seconds: float = Field(default=1800.0, description=(
        "interval of the periodic rebuild of users with a threshold crossing due"))
    scheduler_tick_seconds: float = Field(default=0.25, gt=0, description=(
        "how often the scheduler looks for settled evidence (one indexed query; keep it well "
        "under the debounce)"))
    request_repeat_seconds: float = Field(default=30.0, gt=0, description=(
        "a rebuild request the scheduler published is published again only after this long "
        "(it is still on its way while the projection is behind; the stream's duplicate "
        "window would drop the copy, but each copy still costs a publish and an ack)"))
    scheduler_enabled: bool = Field(default=True, description=(
        "publish the debounce and periodic rebuilds (tests that give `as_of` turn it off)"))

    def half_life(self, facet_class: str) -> float:
        return self.half_life_days[facet_class] * DAY


@lru_cache(maxsize=1)
def get_learning_settings() -> LearningSettings:
    return LearningSettings()
