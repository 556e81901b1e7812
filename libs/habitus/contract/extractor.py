"""Parameters and results of `extraction.*`: what the LLM extractor made of a user's material.

Reads show the rolling summaries, the windows waiting or done, and what validation refused
(the quarantine), so an operator can see why a preference was or was not learned. The one
command asks for windows to be extracted again with the current prompt version.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from habitus.ids import CallerUserId


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserParams(_Params):
    user_id: CallerUserId = Field(description="The user.")


class QuarantineQuery(_Params):
    user_id: CallerUserId = Field(description="The user.")
    limit: int = Field(default=50, ge=1, le=500, description="At most this many, newest first.")


class ReextractParams(_Params):
    user_id: CallerUserId | None = Field(default=None, description=(
        "The user; absent: every user of the tenant."))
    since: float = Field(ge=0, description=(
        "Windows closed at or after this time (epoch seconds) are extracted again."))
    source: str | None = Field(default=None, min_length=1, max_length=600, description=(
        "Only this source (`conversations`, `email`, `document:<source_id>`)."))


class SourceSummary(BaseModel):
    source: str = Field(description="The source.")
    summary: str = Field(description="Its rolling summary.")
    windows: int = Field(description="Windows of it extracted so far.")
    updated_at: float = Field(description="When the summary last changed (epoch seconds).")


class Status(BaseModel):
    enabled: bool = Field(description="Whether an LLM endpoint is configured.")
    reason: str | None = Field(default=None, description="Why not, when disabled.")
    prompt_version: str = Field(description="The current extraction prompt's version.")
    windows: dict[str, int] = Field(description=(
        "The user's windows by state: `open` (still filling), `ready` (closed, waiting for "
        "the LLM), `waiting` (a call failed or the budget ran out; retried later), `done`."))
    last_error: str | None = Field(default=None, description=(
        "Why the oldest waiting window is waiting."))
    sources: list[SourceSummary] = Field(description="The rolling summaries.")
    quarantined: dict[str, int] = Field(description="Refused facets and outputs, by reason.")


class QuarantinedItem(BaseModel):
    window_id: str = Field(description="The window the output was for.")
    source: str = Field(description="Its source.")
    prompt_version: str = Field(description="The prompt it answered.")
    index: int | None = Field(description="The facet's place in the output; null: all of it.")
    reason: str = Field(description="Why it was refused (a stable code).")
    detail: str = Field(description="The field at fault and what was wrong, in words.")
    raw: Any = Field(description="What the model returned for it.")
    created_at: float = Field(description="When (epoch seconds).")


class QuarantineList(BaseModel):
    items: list[QuarantinedItem] = Field(description="Newest first.")


class Reextraction(BaseModel):
    prompt_version: str = Field(description="The version the windows will be extracted with.")
    windows: int = Field(description="Windows queued again.")
