"""Tools named in a text: the trie-shaped pattern finds exactly what a flat alternation of every
alias, longest first, finds (the simple form, kept here as the reference)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from habitus.vocabulary import tools

#: the flat form: every alias in one alternation, longest first
FLAT = re.compile(
    r"(?<![\w.#+-])("
    + "|".join(re.escape(a) for a in sorted(tools._ALIASES, key=len, reverse=True))
    + r")(?![\w#+']|\.\w)", re.IGNORECASE)
ALIASES = sorted(tools._ALIASES)
FILLER = ["", " ", "  ", ", ", ".", "-", "#", "+", "'", "x", "s", "js", ".io", " and ", " on ",
          " code", "Ruby on", "\n", "é", "(", ")"]


def flat(text: str) -> list[tuple[int, int, str, str]]:
    return [(m.start(), m.end(), m.group(1), tools._ALIASES[m.group(1).lower()])
            for m in FLAT.finditer(text)]


def test_longest_alias_wins_and_a_boundary_is_needed() -> None:
    text = "Ruby on Rails, then plain ruby; VS Code or code; C++ and C#; golang not gopher"
    assert [m[3] for m in tools.mentions(text)] == [
        "rails", "ruby", "vscode", "c++", "c#", "go"]
    assert tools.mentions(text) == flat(text)


def test_realistic_sentences_agree_with_the_flat_form() -> None:
    for text in (
        "We moved the whole backend from Flask to FastAPI and I'm on VS Code with Ruff now.",
        "Never suggest lodash; use pnpm, not npm, and Postgres over MySQL.",
        "I deploy with Docker on AWS, the front end is Next.js, tests run in pytest.",
        "thanks, that works", "ok", "Wir nutzen Kubernetes und Terraform.",
    ):
        assert tools.mentions(text) == flat(text), text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(ALIASES), st.sampled_from(FILLER)), max_size=12),
       st.booleans())
def test_any_text_of_aliases_and_fillers_agrees_with_the_flat_form(parts: list[str],
                                                                 upper: bool) -> None:
    text = "".join(parts)
    text = text.upper() if upper else text
    assert tools.mentions(text) == flat(text)
