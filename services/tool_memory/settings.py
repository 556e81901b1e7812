"""Tool-memory settings (`HABITUS_TOOL_MEMORY_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ToolMemorySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_TOOL_MEMORY_", extra="ignore",
                                      frozen=True)

    capture: bool = Field(default=True, description=(
        "turn users' edicts (\"never email Sarah\") and repeated tool failures into rules "
        "(`0` turns capture off; rules put through `memory.*` still apply)"))
    semantic_recall: bool = Field(default=True, description=(
        "rank `memory.tool_rules_recall` by sentence-embedding similarity (a local "
        "multilingual model); off: by shared words"))
