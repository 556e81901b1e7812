"""Trace-router settings (`HABITUS_ROUTER_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RouterSettings(BaseSettings):
    """The router's knobs.

    The default policy is `learned`: a tenant that never chose a policy is routed by its own
    traces once a query class has `min_samples` of them, and by the heuristic (which `learned`
    falls back to, class by class) until then. Recording traces is all it takes; the service
    relearns by itself `relearn_seconds` after they stop arriving.
    """

    model_config = SettingsConfigDict(env_prefix="HABITUS_ROUTER_", extra="ignore",
                                      frozen=True)

    default_policy: str = Field(default="learned", description=(
        "the routing policy of a tenant that has not chosen one"))
    min_samples: int = Field(default=5, ge=1, description=(
        "traces a query class needs before the learned policy trusts its statistics"))
    relearn_seconds: float = Field(default=5.0, gt=0, description=(
        "after new traces, how long to wait for more before the learned policies are "
        "recomputed (debounce)"))
