"""Trace-router settings (`HABITUS_ROUTER_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RouterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_ROUTER_", extra="ignore",
                                      frozen=True)

    default_policy: str = Field(default="heuristic", description=(
        "the routing policy of a tenant that has not chosen one"))
    min_samples: int = Field(default=5, ge=1, description=(
        "traces a query class needs before the learned policy trusts its statistics"))
    relearn_seconds: float = Field(default=5.0, gt=0, description=(
        "after new traces, how long to wait for more before the learned policies are "
        "recomputed (debounce)"))
