"""Habits settings (`HABITUS_HABITS_*`), with the LLM client's (`HABITUS_LLM_*`) inside."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from habitus.llm import LlmSettings


class HabitsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_HABITS_", extra="ignore", frozen=True)

    capture: bool = Field(default=True, description=(
        "store completed turns as redacted observations for Analyze (`0`: nothing is "
        "captured; declared habits still work)"))
    semantic: bool = Field(default=True, description=(
        "load the local multilingual sentence encoder for duplicate checks and selection; "
        "off, activation and selection fail closed (nothing activates, nothing is selected)"))
    schedule_seconds: float = Field(default=3600.0, gt=0, description=(
        "how often tenants with scheduled Analyze get one batch per user with unread "
        "observations (and expired observations are deleted)"))
    judge_timeout_seconds: float = Field(default=20.0, gt=0, description=(
        "the longest `habits.select` waits for the judge before answering with no guidance"))
    llm: LlmSettings = Field(default_factory=LlmSettings, description=(
        "the LLM client's settings (`HABITUS_LLM_*`): Analyze proposes habits with it and "
        "selection asks it which habits apply"))
