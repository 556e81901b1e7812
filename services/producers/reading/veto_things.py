"""The ways of answering a veto may ban, as the words that name them in the four languages the
reader reads: each pattern with the `<kind>=<thing>` key of the vocabulary it names
(habitus.vocabulary.keys.VETO_THINGS). The reader finds them as a clause's veto slots
(services.producers.reading.slots); a veto still needs a ban word beside the thing.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE

VETO_THINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bnested\s+(?:bullets?|lists?)|verschachtelte|listes?\s+imbriquées|"
                r"listas?\s+anidadas", _I), "format=nested-bullets"),
    (re.compile(r"\bheadings?\b|\bheaders?\b|überschriften|titres|encabezados", _I),
     "format=headings"),
    (re.compile(r"\bnumbered\s+lists?\b|nummerierte\w*\s+listen|listes?\s+numérotées|"
                r"listas?\s+numeradas", _I), "format=numbered-lists"),
    (re.compile(r"\btables?\b|\btabellen?\b|\btableaux?\b|\btablas?\b", _I),
     "format=tables"),
    (re.compile(r"\bcode\s*blocks?\b|\bcodeblöcke\w*|\bblocs?\s+de\s+code\b|"
                r"\bbloques?\s+de\s+código\b", _I), "format=code-blocks"),
    (re.compile(r"\bdisclaimers?\b|haftungsausschl|avertissements|descargos", _I),
     "content=disclaimers"),
    (re.compile(r"\bapolog\w*|\bsorry\b|entschuldig\w*|excuse[rsz]?\b|disculpa\w*|perdón", _I),
     "content=apologies"),
    # not the adjective of another thing banned ("markdown headers" bans the headings only)
    (re.compile(r"\bmarkdown\b(?!\s+(?:headings?|headers?|tables?|numbered\s+lists?|"
                r"code\s*blocks?)\b)", _I), "format=markdown"),
    (re.compile(r"\bfiller\b|\bfluff\b", _I), "content=filler"),
    # the question an assistant closes on ("stop ending every message with a question")
    (re.compile(r"\bfollow[- ]?up\s+questions?\b|\b(?:end|ending|close|closing|finish|"
                r"finishing)\s+(?:every|each|all|your)\s+(?:\w+\s+)?(?:with|on)\s+a\s+"
                r"question\b|\basking\s+(?:me\s+)?(?:if|whether)\s+i\s+(?:need|want)\s+"
                r"anything\s+else\b|rückfragen\w*|questions?\s+de\s+suivi|"
                r"preguntas?\s+de\s+seguimiento", _I), "content=follow-up-questions"),
    (re.compile(r"\bcaveats?\b", _I), "content=caveats"),
    # acronyms are jargon to whoever does not know them ("avoid acronyms, I'm not technical")
    (re.compile(r"\bjargon\b|\bbuzzwords?\b|fachjargon|fachchinesisch|jerga|tecnicismos|"
                r"\bacronyms?\b|\babkürzungen\b|\bsigles\b|\bsiglas\b", _I),
     "content=jargon"),
)
