"""Parameters and results of `router.*`, `traces.*`, `advisor.*` and `icl.*`.

Everything is scoped to the caller's tenant; `user_id` narrows to one user where given.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from habitus.ids import CallerUserId

ModelName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                             max_length=256)]
PolicyName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                              max_length=64)]
Outcome = Literal["success", "failure", "partial", "unknown"]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SizedModel(_Params):
    name: ModelName = Field(description="The model.")
    parameter_count_b: float | None = Field(default=None, gt=0, description=(
        "Its size in billions of parameters; absent: parsed from the name or looked up."))


class SelectModel(_Params):
    query: str = Field(min_length=1, max_length=100_000, description="What is to be answered.")
    available_models: list[ModelName | SizedModel] = Field(
        default_factory=list, max_length=200, description="The models to choose from.")
    urgency: float | None = Field(default=None, ge=0, le=1, description=(
        "0 (can wait) to 1 (answer now); above 0.8 the smallest model answers."))
    policy: PolicyName | None = Field(default=None, description=(
        "heuristic, learned, sft, bandit or grpo; absent: the tenant's default."))
    default_model: ModelName | None = Field(default=None, description="Used without a signal.")
    fallback_model: ModelName | None = Field(default=None, description=(
        "Used when the default is not available."))
    user_id: CallerUserId | None = Field(default=None, description=(
        "Whose query it is (required with `record`)."))
    record: bool = Field(default=False, description=(
        "Publish the decision as `RouteDecided`, so its trace and reward can be joined to it."))
    decision_id: str | None = Field(default=None, min_length=1, max_length=128, description=(
        "Reproduce an earlier decision: a sampling policy (bandit, grpo) draws the same for "
        "the same id and the same learned state; absent: a new id."))


class RoutingContext(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query_length: int
    has_code: bool
    has_math: bool
    has_reasoning: bool
    urgency: float
    language: str


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="The model chosen (\"\" when none could be).")
    policy: str = Field(description="The policy that chose it.")
    query_class: str = Field(description="code, math, short, long or general.")
    reason: str = Field(description="Why, in words.")
    context: RoutingContext
    decision_id: str = Field(description=(
        "The decision; a sampling policy chooses the same again for the same id."))


class SetDefaultPolicy(_Params):
    policy: PolicyName = Field(description="The policy requests without one use.")


class DefaultPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str
    version: int


class UpdatePolicy(_Params):
    policy: PolicyName = Field(default="learned", description="The policy to recompute.")


class PolicyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str
    version: int = Field(description="Its version after the update.")
    changes: list[dict[str, Any]] = Field(description="What moved: class, old model, new.")


class TraceFilter(_Params):
    user_id: CallerUserId | None = Field(default=None, description="Only this user's traces.")
    agent: str | None = Field(default=None, max_length=128)
    model: str | None = Field(default=None, max_length=256)
    outcome: Outcome | None = None
    since: float | None = Field(default=None, ge=0, description="Started at or after.")
    until: float | None = Field(default=None, ge=0, description="Started before.")


class TraceList(TraceFilter):
    limit: int = Field(default=50, ge=1, le=500)
    after: str | None = Field(default=None, max_length=512, description=(
        "The cursor a previous page returned."))


class TraceRef(_Params):
    user_id: CallerUserId = Field(description="The trace's user.")
    trace_id: str = Field(min_length=1, max_length=128)


class TraceSearch(_Params):
    text: str = Field(min_length=1, max_length=1000, description="Words of the query or result.")
    user_id: CallerUserId | None = None
    limit: int = Field(default=20, ge=1, le=200)


class Insights(_Params):
    user_id: CallerUserId | None = Field(default=None, description="Only this user's traces.")
    limit: int = Field(default=20, ge=1, le=20)


class Result(BaseModel):
    """A free-form answer of the analyzer (its fields are documented per method)."""

    model_config = ConfigDict(extra="allow")
