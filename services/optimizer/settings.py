"""Optimizer settings (`HABITUS_OPTIMIZE_*`), with the LLM client's (`HABITUS_LLM_*`) inside.

The router's default policy and sample threshold are read from the router's own variables
(`HABITUS_ROUTER_DEFAULT_POLICY`, `HABITUS_ROUTER_MIN_SAMPLES`): an estimate of "the tenant's
routing with these settings changed" must start from the routing the tenant really has.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from habitus.contract.configuration import POLICY_NAMES
from habitus.llm import LlmSettings


class OptimizerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_OPTIMIZE_", extra="ignore",
                                      frozen=True)

    min_support: int = Field(default=20, ge=1, description=(
        "recorded decisions that must agree with a configuration before the counterfactual "
        "evaluator claims an estimate for it"))
    poll_seconds: float = Field(default=2.0, gt=0, description=(
        "how often an idle optimizer looks for runs to work on"))
    concurrent_runs: int = Field(default=2, ge=1, le=32, description=(
        "runs one optimizer process works on at once (each run is worked on by one replica)"))
    router_default_policy: str = Field(
        default="learned", validation_alias=AliasChoices("HABITUS_ROUTER_DEFAULT_POLICY"),
        description="the router's policy for tenants that chose none (the router's setting)")
    router_min_samples: int = Field(
        default=5, ge=1, validation_alias=AliasChoices("HABITUS_ROUTER_MIN_SAMPLES"),
        description="the router's sample threshold (the router's setting)")
    llm: LlmSettings = Field(default_factory=LlmSettings, description=(
        "the LLM client's settings (`HABITUS_LLM_*`), for the llm proposer and the replay "
        "evaluator"))

    def model_post_init(self, __context: object) -> None:
        if self.router_default_policy not in POLICY_NAMES:
            raise ValueError(f"HABITUS_ROUTER_DEFAULT_POLICY: {self.router_default_policy!r} "
                             f"is not one of {', '.join(POLICY_NAMES)}")
