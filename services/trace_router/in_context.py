"""The in-context section `prompt.context` carries for a request: worked examples and skills
of the request's query class, from the user's own good traces, within a character budget.

Pure: the service hands in the examples (with an excerpt of each one's answer) and skills it
found for the class. Examples go first, best first; each is one block (the request, the tools it
called, the answer's beginning); then the skills, most seen first. A block that would pass the
budget is left out whole, and the next ones are still tried (a shorter one may fit), so the
section never ends in half a sentence and never passes `budget_chars`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from services.trace_router.insights import Example, Skill

#: the longest excerpt of an example's request and of its answer
QUERY_CHARS: Final = 300
ANSWER_CHARS: Final = 400
#: skills shown at most
MAX_SKILLS: Final = 3
#: the budget when neither the request nor the tenant sets one
DEFAULT_BUDGET: Final = 2000


@dataclass(frozen=True, slots=True)
class Section:
    text: str
    examples: tuple[str, ...]
    skills: tuple[str, ...]


def _excerpt(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def example_block(example: Example, answer: str) -> str:
    tools = ", ".join(example.tool_sequence) or "none"
    lines = [f"- Request: {_excerpt(example.query, QUERY_CHARS)}", f"  Tools, in order: {tools}"]
    if answer.strip():
        lines.append(f"  Answer began: {_excerpt(answer, ANSWER_CHARS)}")
    return "\n".join(lines)


def skill_line(skill: Skill) -> str:
    return f"- {skill.name} (worked {skill.count} times)"


def section(query_class: str, examples: Sequence[tuple[Example, str]],
            skills: Sequence[Skill], budget_chars: int) -> Section:
    """The section text within `budget_chars` (empty when nothing fits or applies)."""
    parts: list[str] = []
    used_examples: list[str] = []
    used_skills: list[str] = []
    size = 0

    def fits(block: str) -> bool:
        nonlocal size
        extra = len(block) + (1 if parts else 0)
        if size + extra > budget_chars:
            return False
        parts.append(block)
        size += extra
        return True

    if examples and fits(f"Worked examples of similar {query_class} requests that went well:"):
        header_at = len(parts) - 1
        for example, answer in examples:
            if fits(example_block(example, answer)):
                used_examples.append(example.trace_id)
        if not used_examples:
            size -= len(parts.pop(header_at)) + (1 if parts else 0)
    if skills:
        before = len(parts)
        if fits(f"Tool sequences that worked for {query_class} requests:"):
            for skill in list(skills)[:MAX_SKILLS]:
                if fits(skill_line(skill)):
                    used_skills.append(skill.name)
            if not used_skills:
                parts.pop(before)
    return Section("\n".join(parts), tuple(used_examples), tuple(used_skills))
