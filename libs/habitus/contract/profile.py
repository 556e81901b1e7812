"""Parameters and results of `profile.*` and `prompt.context` (the profile renderer)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from habitus.ids import CallerUserId

UserId = CallerUserId
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=128, strip_whitespace=True,
                                           to_lower=True)]

_USER = "The user, within the caller's tenant."


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: UserId = Field(description=_USER)


class GetProfile(_Params):
    pass


class SaveNotes(_Params):
    markdown: str = Field(max_length=1_000_000,
                          description="The whole PROFILE.md as edited: the notes outside the "
                                      "managed blocks are taken, and the \"Not yet sure\" "
                                      "lines moved out of their block are confirmed, those "
                                      "deleted forgotten; other edits of managed blocks are "
                                      "ignored.")
    base_version: int = Field(ge=0, description="The version the edit was made on; a save on a "
                                                "stale version is a conflict (409).")


class PromptContextParams(_Params):
    tools: list[ToolName] | None = Field(
        default=None, max_length=512,
        description="The tools the next turn may call: their rules are included; absent: all.")
    budget_chars: int | None = Field(default=None, ge=0, le=1_000_000,
                                     description="The most characters of text to return.")
    request: str | None = Field(
        default=None, min_length=1, max_length=20_000,
        description="The user's current request: with it, the approved habits that apply to "
                    "it (at most 3) are added as a `habits` section, and `steered_by` names "
                    "them. Absent: no habits section.")
    context: list[Annotated[str, StringConstraints(max_length=20_000)]] = Field(
        default_factory=list, max_length=16,
        description="Earlier turns, oldest first, that may resolve a reference in `request`.")
    examples: int | None = Field(
        default=None, ge=0, le=10,
        description="With `request`: worked examples of the request's query class from the "
                    "user's own good traces, as an `examples` section. Absent: the tenant's "
                    "configuration (`prompt.examples`, none unless set).")
    skills: bool | None = Field(
        default=None,
        description="With `request`: the tool sequences that worked for the request's query "
                    "class, in the `examples` section. Absent: the tenant's `prompt.skills`.")
    unconfirmed: bool = Field(
        default=False,
        description="Add an `unconfirmed` section: the facets the evidence points to but not "
                    "yet surely, each with the question that would confirm it, and the "
                    "instruction not to act on them. For agents that can ask the user; off: "
                    "the context holds only what is known.")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Profile(_Result):
    user_id: str = Field(description=_USER)
    version: int = Field(ge=0, description="The document version; 0: none saved yet, this is "
                                           "what would be rendered now.")
    markdown: str = Field(description="The PROFILE.md text.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the markdown.")


class SettledFacet(_Result):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    class_: str = Field(alias="class", description="The facet class.")
    key: str = Field(description="The facet key.")
    value: str = Field(description="The value it held as not yet sure.")


class NotesSaved(_Result):
    user_id: str = Field(description=_USER)
    version: int = Field(ge=0, description="The version holding the saved notes.")
    ignored_blocks: list[str] = Field(description="Managed blocks the edit changed; Habitus "
                                                  "owns them, so those changes were dropped.")
    confirmed: list[SettledFacet] = Field(
        default_factory=list,
        description="\"Not yet sure\" facets whose line the edit moved out of the block: "
                    "set to that value, as `learning.update_facet` would.")
    forgotten: list[SettledFacet] = Field(
        default_factory=list,
        description="\"Not yet sure\" facets whose line the edit deleted: forgotten, as "
                    "`learning.forget_facet` would.")


class Section(_Result):
    name: str = Field(description="The section (facets, notes, tool rules, ...).")
    content: str = Field(description="Its text.")


class PromptContext(_Result):
    user_id: str = Field(description=_USER)
    version: int = Field(ge=0, description="The PROFILE.md version the notes came from.")
    sections: list[Section] = Field(description="The context, section by section.")
    text: str = Field(description="The sections joined, ready for a system prompt.")
    steered_by: list[str] = Field(
        default_factory=list,
        description="The `When:` lines of the habits in the `habits` section, so the agent "
                    "can show \"Steered by habit\" (empty without a habits section).")
