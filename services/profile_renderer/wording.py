"""How the renderer words a facet for people: the vocabulary's phrasing, never a failed render.

`habitus.vocabulary` words a facet from its canonical value ("de" reads "German"). Values that
predate the canonical forms, or that came from a source that never had one, can make it raise
(`style/language=german` is no language tag): a projection that raised there would dead-letter
the user's `CacheRebuilt`, and with it every change to PROFILE.md, for the sake of one word. So
each phrase falls back to the value as stored, which is what the profile showed before.
"""

from __future__ import annotations

from habitus.vocabulary import confirmation_question, describe, value_text


def shown_value(facet_class: str, key: str, value: str) -> str:
    """The value as a person reads it ("German" for `style/language=de`), else as stored."""
    try:
        return value_text(facet_class, key, value)
    except ValueError:
        return value


def _plain_clause(facet_class: str, key: str, value: str) -> str:
    """A clause that needs no vocabulary: "your style language is german"."""
    return f"your {facet_class} {key.replace('_', ' ')} is {value}"


def clause(facet_class: str, key: str, value: str) -> str:
    """A second-person clause saying what the facet holds ("you prefer short answers")."""
    try:
        return describe(facet_class, key, value)
    except ValueError:
        return _plain_clause(facet_class, key, value)


def question(facet_class: str, key: str, value: str) -> str:
    """The question that confirms the facet ("Should I remember that you prefer ...?")."""
    try:
        return confirmation_question(facet_class, key, value)
    except ValueError:
        return f"Should I remember that {_plain_clause(facet_class, key, value)}?"
