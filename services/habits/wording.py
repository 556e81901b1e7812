"""How a habit reads to a person: `When: ...` / `Do: ...` lines.

Conditions are usually written as a person says them ("When I ask for a status report"), so
the line drops a leading "When" rather than showing "When: When I ask ...".
"""

from __future__ import annotations


def _without(prefix: str, text: str) -> str:
    text = " ".join(text.split())
    if text[:len(prefix) + 1].lower() == prefix + " " and len(text) > len(prefix) + 1:
        return text[len(prefix) + 1:]
    return text


def when_line(condition: str) -> str:
    return f"When: {_without('when', condition)}"


def do_line(behavior: str, polarity: int) -> str:
    if polarity < 0:
        return f"Do: avoid {_without('do', behavior)}"
    return f"Do: {_without('do', behavior)}"
