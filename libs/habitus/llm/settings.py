"""Settings of the shared LLM client, read from `HABITUS_LLM_*`.

Unset is a valid state: a deployment without a model runs every service, and the features that
need one report themselves off (`disabled_reason`) instead of failing at start.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class LlmSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_LLM_", extra="ignore", frozen=True)

    base_url: str | None = Field(default=None, description=(
        "an OpenAI-compatible endpoint (`.../v1`); unset: the LLM features are off"))
    model: str | None = Field(default=None, description="the model asked at that endpoint")
    api_key: str | None = Field(default=None, description=(
        "sent as the bearer token; servers without auth ignore it"))
    timeout_seconds: float = Field(default=30.0, gt=0, description=(
        "how long one attempt of an LLM call may take"))
    max_retries: int = Field(default=3, ge=0, description=(
        "retries of an LLM call after its first attempt, on 429, 5xx, timeout or a lost "
        "connection"))
    backoff_seconds: float = Field(default=1.0, ge=0, description=(
        "wait before the first LLM retry; doubles each retry, with full jitter"))
    backoff_max_seconds: float = Field(default=30.0, ge=0, description=(
        "longest wait between LLM retries; a server asking (Retry-After) for longer is given up "
        "on"))
    structured_output: Literal["auto", "json_schema", "fenced"] = Field(
        default="auto", description=(
            "`json_schema` (the server enforces the schema), `fenced` (a fenced JSON block in the "
            "answer) or `auto` (json_schema, falling back to fenced if the server refuses it)"))
    max_output_tokens: int = Field(default=1024, ge=1, description=(
        "most tokens the model may answer an LLM call with"))
    temperature: float = Field(default=0.0, ge=0, description="sampling temperature of LLM calls")
    daily_calls_per_tenant: int = Field(default=2000, ge=0, description=(
        "LLM calls a tenant may make per UTC day; 0: no limit"))
    daily_tokens_per_tenant: int = Field(default=2_000_000, ge=0, description=(
        "LLM tokens (prompt and answer) a tenant may use per UTC day; 0: no limit"))

    @field_validator("base_url", "model", "api_key", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        # Compose and k8s render an unset variable as an empty string.
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def enabled(self) -> bool:
        return self.base_url is not None and self.model is not None

    def disabled_reason(self) -> str | None:
        """Why the LLM features are off (for logs and /readyz), or None when they are on."""
        if self.base_url is None:
            return "HABITUS_LLM_BASE_URL is unset"
        if self.model is None:
            return "HABITUS_LLM_MODEL is unset"
        return None
