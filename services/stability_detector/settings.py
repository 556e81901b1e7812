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
    })
    half_life_days: dict[str, float] = Field(default_factory=lambda: {
        "identity": 90.0, "veto": 60.0, "tooling": 30.0, "goal": 30.0, "style": 14.0,
        "channel": 7.0,
    })
    budgets: dict[str, int] = Field(default_factory=lambda: {
        "style": 4, "identity": 4, "tooling": 5, "veto": 3, "goal": 3, "channel": 1,
    })
    overflow: int = 5
    explicit_multiplier: float = 2.0
    tau_active: float = 1.5
    tau_provisional: float = 0.7
    tau_candidate: float = 0.4
    evidence_refs_kept: int = 50
    debounce_seconds: float = 60.0
    periodic_seconds: float = 1800.0
    scheduler_tick_seconds: float = 5.0
    #: publish debounce and periodic RebuildRequested events (off in tests that give as_of)
    scheduler_enabled: bool = True

    def half_life(self, facet_class: str) -> float:
        return self.half_life_days[facet_class] * DAY


@lru_cache(maxsize=1)
def get_learning_settings() -> LearningSettings:
    return LearningSettings()
