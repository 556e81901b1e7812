"""`prompt.context` as pure functions: the system-prompt sections for a user's next turn.

The service gathers the inputs (active facets, the PROFILE.md notes without their managed
blocks, the tool rules of the user and of the whole tenant, the agent's tools and, when the
caller asks for them, the facets not yet confirmed) and caches the result; everything here is a
function of those inputs alone, so a cached answer and a freshly computed one are the same bytes.

Each fact has exactly one home: facets live in `user_profile` (the managed blocks of PROFILE.md
say the same thing, which is why the notes arrive without them), the user's own text in
`user_files`, and tool rules in `tool_rules`. A fact repeated across sections costs budget and,
once the two copies drift apart, leaves the model to guess which one holds.

Facets the evidence points to but not yet surely never reach `user_profile`: a model told a
guess as a fact acts on it. A caller that can ask the user opts in to `unconfirmed`, a section
apart that says so, with the one question that would settle each.

Under a budget, the sections give way in order of how much harm losing them does: the
unconfirmed facets first (they are guesses), then the free-form notes, then the weakest learned
facets, then the recall hint; the tool rules never, since they are the user's hard constraints
("never email Sarah") and are small.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from habitus.prompt import (
    SET_BY_USER_MARK,
    ProfileFacet,
    ProvisionalFacet,
    ToolRule,
    render_tool_rules,
    single_line,
)
from services.profile_renderer.wording import clause, question

SECTION_ORDER = ("user_profile", "unconfirmed", "user_files", "memory_access", "tool_rules")
MAX_PROFILE_ENTRIES = 25
MAX_UNCONFIRMED_ENTRIES = 10
NOTES_MAX_CHARS = 2000

GOAL_CLASS = "goal"
PROFILE_HEADING = "## User Profile (Learned)"
PROFILE_OVERRIDE_LINE = (
    "These preferences were learned from earlier conversations and may be out of date; whatever"
    " the user asks for in the current conversation takes precedence over them."
)
UNCONFIRMED_HEADING = "## Not yet confirmed"
UNCONFIRMED_INSTRUCTION = (
    "These may be true of the user but are not confirmed. Do not act on them; if one matters to"
    " the answer, ask the question given once, and take the user's yes or no as the answer."
)
FILES_HEADING = "## User Files\n\n### PROFILE.md"
MEMORY_TOOLS = ("memory_recall", "memory_search")
MEMORY_HEADING = "## Memory access"
MEMORY_INSTRUCTION = (
    "Only standing preferences are written into this prompt; much more about this user is kept"
    " in memory. When a request touches a named person, an earlier thread or project, a decision"
    " made before, or a topic that keeps coming back, call `{tool}` first and ground the answer"
    " in what it returns instead of guessing. Skip the lookup for purely procedural requests,"
    " where past context cannot change the answer."
)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Section:
    """One named part of the prompt material; `content` ends with a newline."""

    name: str
    content: str


@dataclass(frozen=True)
class PromptContext:
    """The sections that survived (in `SECTION_ORDER`) and their text, joined by blank lines."""

    sections: tuple[Section, ...]
    text: str


# -- user_profile ------------------------------------------------------------------------------


def _strength(facet: ProfileFacet) -> float:
    if facet.stability is None:
        return math.inf
    # NaN would make the sort order depend on input order; treat it as no stability at all.
    return -math.inf if math.isnan(facet.stability) else facet.stability


_Keyed = TypeVar("_Keyed", ProfileFacet, ProvisionalFacet)


def _first_per_key(ordered: Sequence[_Keyed], limit: int) -> list[_Keyed]:
    """The first facet of each (class, key) in `ordered` that has a value, at most `limit`."""
    kept: list[_Keyed] = []
    seen: set[tuple[str, str]] = set()
    for facet in ordered:
        if (facet.facet_class, facet.key) in seen or not single_line(facet.value):
            continue
        seen.add((facet.facet_class, facet.key))
        kept.append(facet)
        if len(kept) == limit:
            break
    return kept


def ranked_facets(facets: Sequence[ProfileFacet]) -> list[ProfileFacet]:
    """The facets the profile shows, strongest first, one per (class, key), at most 25.

    Facets the user set come first (they asked for them), then stability descending, then class
    and key for a stable order; value breaks the last tie so that a duplicated (class, key)
    keeps the same one whatever the input order. Blank values are skipped: a bullet with
    nothing after the colon tells the model nothing.
    """
    ordered = sorted(
        facets,
        key=lambda f: (not f.set_by_user, -_strength(f), f.facet_class, f.key, f.value),
    )
    return _first_per_key(ordered, MAX_PROFILE_ENTRIES)


def _facet_line(facet: ProfileFacet) -> str:
    value = single_line(facet.value)
    mark = SET_BY_USER_MARK if facet.set_by_user else ""
    if facet.facet_class == GOAL_CLASS:
        return f"- {value}{mark}\n"
    return f"- **{single_line(facet.facet_class)}/{single_line(facet.key)}**: {value}{mark}\n"


def _render_profile(ranked: Sequence[ProfileFacet]) -> str:
    if not ranked:
        return ""
    bullets = "".join(_facet_line(facet) for facet in ranked)
    return f"{PROFILE_HEADING}\n\n{bullets}\n{PROFILE_OVERRIDE_LINE}\n"


def user_profile_section(facets: Sequence[ProfileFacet]) -> str:
    """The learned profile: one bullet per facet (goals as the value alone), "" when empty."""
    return _render_profile(ranked_facets(facets))


# -- unconfirmed -------------------------------------------------------------------------------


def _unsure_strength(facet: ProvisionalFacet) -> float:
    return -math.inf if math.isnan(facet.stability) else facet.stability


def ranked_unconfirmed(facets: Sequence[ProvisionalFacet]) -> list[ProvisionalFacet]:
    """The not-yet-confirmed facets a prompt may ask about: strongest first, one per (class,
    key), no blank values, at most `MAX_UNCONFIRMED_ENTRIES` (each is a question the model may
    put to the user; a long list of them is a questionnaire, not a conversation)."""
    ordered = sorted(
        facets, key=lambda f: (-_unsure_strength(f), f.facet_class, f.key, f.value))
    return _first_per_key(ordered, MAX_UNCONFIRMED_ENTRIES)


def _unconfirmed_line(facet: ProvisionalFacet) -> str:
    # The clause and the question carry the value, which is untrusted: one line each.
    cls, key, value = facet.facet_class, facet.key, single_line(facet.value)
    return f'- {single_line(clause(cls, key, value))} \u2014 ask: ' \
           f'"{single_line(question(cls, key, value))}"\n'


def _render_unconfirmed(ranked: Sequence[ProvisionalFacet]) -> str:
    if not ranked:
        return ""
    bullets = "".join(_unconfirmed_line(facet) for facet in ranked)
    return f"{UNCONFIRMED_HEADING}\n\n{UNCONFIRMED_INSTRUCTION}\n\n{bullets}"


def unconfirmed_section(facets: Sequence[ProvisionalFacet]) -> str:
    """The facets not yet confirmed, each with the question that settles it; "" when none."""
    return _render_unconfirmed(ranked_unconfirmed(facets))


# -- user_files --------------------------------------------------------------------------------


def _close_fences(body: str) -> str:
    # An unclosed code fence (the user's own, or one a truncation cut in half) would turn every
    # later section, the tool rules included, into a code block. Close it inside this section.
    opener: str | None = None
    for line in body.split("\n"):
        match = _FENCE.match(line)
        if match is None:
            continue
        fence = match.group(1)
        if opener is None:
            opener = fence
        elif fence[0] == opener[0] and len(fence) >= len(opener) and not line.strip()[len(fence) :]:
            opener = None
    return body if opener is None else f"{body}\n{opener}"


def _clean_notes(notes: str) -> str:
    return notes.replace("\r\n", "\n").replace("\r", "\n").strip("\n").rstrip()


def user_files_section(notes: str, max_chars: int = NOTES_MAX_CHARS) -> str:
    """The user's own PROFILE.md notes, at most `max_chars` of them; "" when they are blank.

    Past the cap the notes are cut and a note says so, with their full length, so the model
    knows it saw only part of them.
    """
    body = _clean_notes(notes)
    if not body:
        return ""
    full = len(body)
    limit = max(0, max_chars)
    if full <= limit:
        return f"{FILES_HEADING}\n\n{_close_fences(body)}\n"
    kept = body[:limit].rstrip()
    shown = f"{_close_fences(kept)}\n\n" if kept else ""
    note = f"*[Notes truncated: showing the first {len(kept)} of {full} characters.]*"
    return f"{FILES_HEADING}\n\n{shown}{note}\n"


# -- memory_access and tool_rules --------------------------------------------------------------


def memory_access_section(tools: Iterable[str] | None) -> str:
    """The hint to recall people, threads and past decisions, only if the agent can recall.

    The instruction names the recall tool the agent actually has (`memory_recall` if present,
    else `memory_search`): telling a model to call a tool it lacks wastes a turn.
    """
    if tools is None:
        return ""
    available = {tool.strip() for tool in tools}
    for tool in MEMORY_TOOLS:
        if tool in available:
            return f"{MEMORY_HEADING}\n\n{MEMORY_INSTRUCTION.format(tool=tool)}\n"
    return ""


def tool_rules_section(rules: Iterable[ToolRule], tools: Iterable[str] | None) -> str:
    """The critical and high tool rules for `tools` (at most `habitus.prompt.MAX_PROMPT_RULES`,
    `*` rules for every tool); the shared selection and format of `habitus.prompt`."""
    return render_tool_rules(rules, tools)


# -- the whole context -------------------------------------------------------------------------


def _assemble(contents: dict[str, str]) -> PromptContext:
    sections = tuple(Section(name, contents[name]) for name in SECTION_ORDER if contents.get(name))
    return PromptContext(sections, "\n".join(section.content for section in sections))


def _text_len(contents: dict[str, str]) -> int:
    present = [content for content in contents.values() if content]
    return sum(map(len, present)) + max(0, len(present) - 1)


def _best_fit(render: Callable[[int], str], top: int, fits: Callable[[str], bool]) -> str:
    """The largest of render(0) .. render(top) that fits, "" when even render(0) does not.

    Lengths grow with n except for small wobbles (whitespace stripped at a cut, one digit more
    in a truncation note), so the binary search assumes they grow and its answer is checked,
    then walked down if a wobble fooled it.
    """
    lo, hi = -1, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(render(mid)):
            lo = mid
        else:
            hi = mid - 1
    while lo >= 0 and not fits(render(lo)):
        lo -= 1
    return "" if lo < 0 else render(lo)


def build_context(
    *,
    facets: Sequence[ProfileFacet],
    notes: str,
    rules: Iterable[ToolRule],
    tools: Iterable[str] | None,
    budget_chars: int | None = None,
    unconfirmed: Sequence[ProvisionalFacet] = (),
) -> PromptContext:
    """The sections for the next turn, in `SECTION_ORDER`, empty ones left out.

    `unconfirmed` are the facets not yet confirmed, given only when the caller asked for them
    (the section is opt-in); without them the text is exactly what it was without the option.

    With `budget_chars`, sections are cut until the text fits: the unconfirmed facets (weakest
    first, then the whole section), the notes (shortened, then dropped), then the learned
    profile (weakest facets first, then the whole section), then the memory hint. The tool
    rules are never cut, so the text can exceed a budget they alone exceed.
    """
    tool_names = None if tools is None else tuple(tools)
    ranked = ranked_facets(facets)
    unsure = ranked_unconfirmed(unconfirmed)
    contents = {
        "user_profile": _render_profile(ranked),
        "unconfirmed": _render_unconfirmed(unsure),
        "user_files": user_files_section(notes),
        "memory_access": memory_access_section(tool_names),
        "tool_rules": tool_rules_section(rules, tool_names),
    }
    if budget_chars is None or _text_len(contents) <= budget_chars:
        return _assemble(contents)

    def fits(name: str) -> Callable[[str], bool]:
        return lambda content: _text_len({**contents, name: content}) <= budget_chars

    if unsure:
        # render(n) keeps the n + 1 strongest; all of them did not fit.
        contents["unconfirmed"] = _best_fit(
            lambda n: _render_unconfirmed(unsure[: n + 1]), len(unsure) - 2, fits("unconfirmed")
        )
    if _text_len(contents) > budget_chars and contents["user_files"]:
        # The notes shown now are at most NOTES_MAX_CHARS long and do not fit: try shorter cuts.
        top = min(len(_clean_notes(notes)), NOTES_MAX_CHARS) - 1
        contents["user_files"] = _best_fit(
            lambda n: user_files_section(notes, n), top, fits("user_files")
        )
    if _text_len(contents) > budget_chars and ranked:
        # render(n) keeps the n + 1 strongest facets; all of them did not fit.
        contents["user_profile"] = _best_fit(
            lambda n: _render_profile(ranked[: n + 1]), len(ranked) - 2, fits("user_profile")
        )
    if _text_len(contents) > budget_chars:
        contents["memory_access"] = ""
    return _assemble(contents)
