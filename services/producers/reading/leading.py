"""The role of a speaker who leads a team they name.

"I lead the data platform team" implies a role ("team lead") without saying it: the team is a
slot of its own (`slots.find`), and this reads what the words before it say of the speaker.
The reader keeps what it implies apart from what is said (one-off evidence, never a statement
that replaces a role the user gave). It is not a slot either: a slot's words are replaced by a
stand-in before the clause is encoded, and the verb is what tells the encoder the clause is
about the speaker's work.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.producers.reading.slots import Slot

#: the speaker leading or managing a team ("I lead the data platform team", "I manage our
#: mobile team"): right before the team's name. Not "run": "I run the analytics team" may
#: be said by whoever does its work
_LEADS_TEAM_RE = re.compile(
    r"\b(?:i|i'm|i\s+am)\s+(?:currently\s+|now\s+)?(?P<verb>lead|leading|head|heading|"
    r"manage|managing)\s+(?:the|our|my|a)\s+$", re.IGNORECASE)


def role_of_leading(clause: str, team: Slot) -> str | None:
    """The role a speaker who leads `team` holds ("I lead the payments team": a team lead,
    "I manage the mobile team": a manager), or None when the clause says no such thing."""
    m = _LEADS_TEAM_RE.search(clause[max(0, team.start - 40):team.start])
    if m is None:
        return None
    return "manager" if m.group("verb").startswith("manag") else "team lead"


def implied_role(clause: str, found: Sequence[Slot], filled: Sequence[tuple[str, str, str]]
                 ) -> tuple[str, str, str] | None:
    """The role of a speaker who leads or manages the team the clause names (`found`, as
    read into `filled`), when the clause says no role outright. Implied, not said: the reader
    keeps it as evidence to be scored (one-off), so it never replaces a role the user stated
    ("I'm Omar, SRE at Tidewater" ... "I lead the platform team" keeps `sre`)."""
    if ("identity", "role") in {f[:2] for f in filled}:
        return None
    for s in found:
        if s.kind == "team" and ("identity", "team", s.value) in filled:
            led = role_of_leading(clause, s)
            if led is not None:
                return ("identity", "role", led)
    return None
