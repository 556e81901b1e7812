"""Whether a value found in a clause is said away rather than stated: negated ("not npm",
"instead of yarn"), the loser of a comparison ("lieber eine SMS als eine Mail", "je préfère
TypeScript à JavaScript") or replaced ("from npm to pnpm"). What a tool was dropped *for* is
stated ("we abandoned Angular for React")."""

from __future__ import annotations

import re

from habitus.vocabulary import tools
from services.producers.reading.slots import Slot

_NEGATED_RE = re.compile(
    r"(?:\bnot|\bno(?:\s+longer)?|\bnever|\bnor|n't|\bdont|instead\s+of|rather\s+than|\bthan|"
    r"over|\bnicht|"
    r"migrating(?:\s+away)?\s+from|migrating\s+(?:a|an|our|the)|moving\s+away\s+from|"
    r"\bkein\w*|statt|no\s+need\s+for|moved\s+off|got\s+rid\s+of|ditched|dropped|"
    r"abandoned|gave\s+up(?:\s+on)?|phased\s+out|"
    r"\bpas|\bplutôt\s+que|au\s+lieu\s+de|\bni|en\s+vez\s+de|en\s+lugar\s+de|\bsin)\s+"
    r"(?:[\w']+\s+){0,2}$", re.IGNORECASE)


_REPLACED_RE = re.compile(r"^\s+(?:to|for|with|auf|zu|durch|à|a|par|por|pour|vers|nach)\s+\S",
                          re.IGNORECASE)
_FROM_RE = re.compile(r"\b(?:from|von|de|desde)\s+$", re.IGNORECASE)


_COMPARED_RE = re.compile(r"\b(?:lieber|eher|besser|mehr)\b.*\bals\s+(?:eine?[nm]?\s+)?$"
                          # "je préfère TypeScript à JavaScript", "prefiero Vue a React"
                          r"|\bpréf[eè]r\w*\s+\S.*\s(?:à|au|aux)\s+$"
                          r"|\bprefier\w*\s+\S.*\s(?:a|al)\s+$",
                          re.IGNORECASE)


#: what a dropped tool was dropped for is kept: "we abandoned Angular for React", "ditched
#: Jenkins in favour of GitHub Actions"
_DROPPED_FOR_RE = re.compile(
    r"\b(?:ditched|dropped|abandoned|gave\s+up(?:\s+on)?|phased\s+out|got\s+rid\s+of|"
    r"moved\s+off)\s+(?P<dropped>[\w.#+-]+(?:\s+[\w.#+-]+)?)\s+(?:for|in\s+favou?r\s+of)\s+$",
    re.IGNORECASE)


def negated(clause: str, slot: Slot) -> bool:
    """Negated ("not npm", "instead of yarn"), the loser of a comparison ("lieber eine SMS
    als eine Mail") or replaced ("from npm to pnpm"); not what a tool was dropped for."""
    before = clause[max(0, slot.start - 40):slot.start]
    dropped = _DROPPED_FOR_RE.search(before)
    # a tool dropped for another; "we dropped support for Python 2" drops no tool
    if dropped is not None and tools.mentions(dropped.group("dropped")):
        return False
    before = before[-30:]
    if _NEGATED_RE.search(before) is not None or _COMPARED_RE.search(clause[:slot.start]):
        return True
    return _FROM_RE.search(before) is not None and _REPLACED_RE.match(clause[slot.end:]) is not None
