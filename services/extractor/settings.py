"""Extractor settings (`HABITUS_EXTRACTOR_*`), with the LLM client's (`HABITUS_LLM_*`) inside."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from habitus.llm import LlmSettings


class ExtractorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_EXTRACTOR_", extra="ignore",
                                      frozen=True)

    window_tokens: int = Field(default=1500, ge=10, description=(
        "a source's window is summarised once its material reaches this many tokens (about "
        "4 characters each): with more traffic, windows fill sooner and each call covers more "
        "events"))
    window_seconds: float = Field(default=300.0, gt=0, description=(
        "a window that stopped filling is summarised this long after its first material "
        "arrived"))
    window_max_chunks: int = Field(default=40, ge=1, le=500, description=(
        "most pieces of material (turn halves, emails, document chunks) in one window"))
    sweep_seconds: float = Field(default=5.0, gt=0, description=(
        "how often the extractor looks for windows that are due and work that is ready"))
    max_reflections_per_session: int = Field(default=20, ge=0, description=(
        "complex turns (a tool call, or a reply over 500 characters) reflected on per "
        "session; 0: no reflections"))
    concurrency: int = Field(default=4, ge=1, le=64, description=(
        "LLM calls in flight at once (one per source at a time)"))
    retry_seconds: float = Field(default=30.0, gt=0, description=(
        "first wait before a window whose LLM call failed is tried again (doubles, up to an "
        "hour)"))
    llm: LlmSettings = Field(default_factory=LlmSettings, description=(
        "the LLM client's settings (`HABITUS_LLM_*`)"))
