"""Parameters and results of `memory.*`: tool-scoped rules.

A rule belongs to a user (`scope: user`, the default, `user_id` required) or to the whole
tenant (`scope: tenant`, no `user_id`: a platform's safety pipeline), and to a tool (`*` is
every tool). Tool names are compared trimmed and lower-case.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from habitus.events.domain import RulePriority, RuleScope, RuleSource
from habitus.ids import CallerUserId


def _tool(value: str) -> str:
    name = value.strip().lower()
    if not name:
        raise ValueError("must not be blank")
    return name


def _text(value: str) -> str:
    text = value.strip()
    if not text:
        raise ValueError("must not be blank")
    return text


ToolName = Annotated[str, StringConstraints(max_length=128), AfterValidator(_tool)]
RuleText = Annotated[str, StringConstraints(max_length=4000), AfterValidator(_text)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=64)]
RuleId = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                          pattern=r"^[A-Za-z0-9_.:-]+$")]
Priority = Literal["critical", "high", "normal"]

_TOOL = "The tool, trimmed and lower-case; `*` is every tool."
_USER = "The user; absent for a tenant-scoped rule."


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Scoped(_Params):
    user_id: CallerUserId | None = Field(default=None, description=_USER)
    scope: RuleScope = Field(default=RuleScope.USER, description=(
        "`user`: the user's own rule; `tenant`: a rule for every user of the tenant."))

    @model_validator(mode="after")
    def _owner(self) -> _Scoped:
        if self.scope == RuleScope.USER and self.user_id is None:
            raise ValueError("user_id: required for a user-scoped rule")
        if self.scope == RuleScope.TENANT and self.user_id is not None:
            raise ValueError("user_id: a tenant-scoped rule belongs to no user")
        return self


class RulePut(_Scoped):
    tool_name: ToolName = Field(description=_TOOL)
    rule: RuleText = Field(description="The guidance, as the prompt will carry it.")
    priority: Priority = Field(default="normal", description=(
        "critical and high are pinned into every prompt that may use the tool; normal is "
        "recalled on demand."))
    source: RuleSource = Field(default=RuleSource.PROGRAMMATIC, description="Where it came from.")
    tags: list[Tag] = Field(default_factory=list, max_length=32, description="Free labels.")
    id: RuleId | None = Field(default=None, description=(
        "The rule to replace; absent: derived from the tool and the normalised text, so "
        "putting the same rule twice updates it."))


class RuleRef(_Scoped):
    tool_name: ToolName = Field(description=_TOOL)
    id: RuleId = Field(description="The rule.")


class RuleQuery(_Params):
    user_id: CallerUserId | None = Field(default=None, description=(
        "The user: their rules and the tenant's; absent: the tenant's only."))
    tool_name: ToolName | None = Field(default=None, description="Only this tool's rules.")
    priority: Priority | None = Field(default=None, description="Only rules of this priority.")


class ToolRules(_Params):
    user_id: CallerUserId | None = Field(default=None, description=(
        "The user: their rules and the tenant's; absent: the tenant's only."))
    tool_name: ToolName = Field(description=_TOOL)


class RulesForPrompt(_Params):
    user_id: CallerUserId = Field(description="The user whose prompt it is.")
    tools: list[ToolName] | None = Field(default=None, max_length=200, description=(
        "The tools the prompt may use; absent: every tool."))


class Recall(_Params):
    user_id: CallerUserId = Field(description="The user.")
    tool_name: ToolName = Field(description=_TOOL)
    query: str | None = Field(default=None, max_length=2000, description=(
        "What the agent is about to do; absent: newest first."))
    limit: int = Field(default=5, ge=1, le=50, description="How many to return.")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Rule(_Result):
    id: str = Field(description="The rule.")
    tool_name: str = Field(description=_TOOL)
    rule: str = Field(description="The guidance.")
    priority: RulePriority = Field(description="critical, high or normal.")
    source: RuleSource = Field(description="Where it came from.")
    tags: list[str] = Field(description="Free labels.")
    scope: RuleScope = Field(description="user or tenant.")
    created_at: float = Field(description="First stored (epoch seconds).")
    updated_at: float = Field(description="Last changed (epoch seconds).")
    causation: str | None = Field(description="The turn or request it came from.")


class RuleList(_Result):
    rules: list[Rule] = Field(description="Critical first, then high, then normal; newest first.")


class Deleted(_Result):
    deleted: bool = Field(description="Whether there was such a rule.")


class PromptRules(_Result):
    rendered: str = Field(description=(
        "The `## Tool-scoped rules` block exactly as `prompt.context` shows it (\"\" if none)."))
    rules: list[Rule] = Field(description="The rules it shows, in its order.")


class RecallMatch(_Result):
    rule: Rule
    score: float | None = Field(description="Similarity to the query (absent without one).")


class RecallResult(_Result):
    matches: list[RecallMatch] = Field(description="Best match first.")
