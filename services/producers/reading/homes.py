"""Where the speaker lives, among the places a clause names: a stay, a move still to come, the
place of someone else of theirs, or where they work beside where they live is not it.

The reader finds every place (services.producers.reading.slots); these say which of them is
no home, so that a location facet holds the one place the speaker lives in.
"""

from __future__ import annotations

import re

from services.producers.reading.slots import Slot

_I = re.IGNORECASE

#: a stay, not where the speaker lives ("I'm in London this week", "in Rome for a conference");
#: the place is still found (the bank's examples are read with their values replaced alike)
FOR_A_WHILE_RE = re.compile(
    r"\s*(?:this\s+(?:week|weekend|month)|today|tonight|tomorrow|next\s+week|for\s+(?:a\s+few\s+"
    r"days|a\s+week|the\s+(?:week|weekend|day)|a\s+(?:conference|wedding|meeting|trip))|"
    r"on\s+(?:vacation|holiday|a\s+trip|business)|until\b|till\b|diese\s+woche|heute|"
    r"cette\s+semaine|aujourd'hui|esta\s+semana|hoy)\b", _I)
#: a place said of someone or something else of the speaker's: "our team is in Bangalore",
#: "my parents live in Lyon", "unser Büro ist in Wien" (where the speaker is, is said apart)
OTHERS_PLACE_RE = re.compile(
    r"\b(?:team|office|company|client|customers?|boss|manager|colleagues?|family|parents?|"
    r"wife|husband|partner|sister|brother|kids|headquarters|hq|büro|firma|eltern|bureau|"
    r"entreprise|parents|oficina|empresa|padres)\s+(?:is|are|lives?|sits?|ist|sind|wohn\w*|"
    r"est|sont|vit|vivent|está|están|vive\w*)\s+(?:\w+\s+){0,2}$", _I)
#: a move still to come: where the speaker will live is not where they live ("I'm moving to
#: Lisbon next month", "Je déménage à Lyon en mars", "Nächsten Monat ziehe ich nach Köln")
NOT_YET_RE = re.compile(
    r"\b(?:(?:i'm|i\s+am|we're|we\s+are)\s+(?:moving|relocating)|will\s+(?:move|be\s+moving|"
    r"relocate|live)|going\s+to\s+(?:move|relocate|live)|plan(?:ning)?\s+to\s+(?:move|relocate)|"
    r"next\s+(?:month|year|spring|summer|autumn|fall|winter)|ziehe\w*\s+(?:\w+\s+){0,3}"
    r"(?:nach|um)|werde\s+(?:\w+\s+){0,3}(?:wohnen|leben|ziehen)|nächste[nr]?\s+"
    r"(?:woche|monat|jahr)|déménag(?:e|eons|er|erai|erons)\b|vais\s+(?:m'installer|déménager|habiter|vivre)|"
    r"la\s+semaine\s+prochaine|le\s+mois\s+prochain|l'année\s+prochaine|me\s+mudo|"
    r"me\s+voy\s+a\s+mudar|voy\s+a\s+vivir|el\s+(?:mes|año)\s+que\s+viene|"
    r"la\s+semana\s+que\s+viene|el\s+próximo\s+(?:mes|año))\b", _I)


def not_where_they_live(clause: str, place: Slot) -> bool:
    """Whether the city `place` names in `clause` is not where the speaker lives: a stay ("in
    London this week"), a move still to come, or the place of their team, office or family."""
    return (FOR_A_WHILE_RE.match(clause[place.end:]) is not None
            or NOT_YET_RE.search(clause) is not None
            or OTHERS_PLACE_RE.search(clause[max(0, place.start - 40):place.start]) is not None)


#: the place the speaker works in, right before it ("je travaille à Genève")
_WORKS_IN_RE = re.compile(
    r"\b(?:work|works|working|travaille|bosse|arbeite|trabajo)\s+(?:(?:mostly|usually|remotely|"
    r"meistens|surtout|sobre\s+todo)\s+)?(?:in|at|à|a|en|im)\s+$", _I)
#: where the speaker says they live, a place named ("J'habite à Lyon", "I'm based in Leeds")
_LIVES_IN_RE = re.compile(r"\b(?:live|lives|living|based|habite|wohne|lebe|vivo|resido)\s+"
                          r"(?:in|à|a|en|im|near|bei|près\s+de|cerca\s+de)\s+(?-i:[A-ZÀ-Þ])", _I)


def works_there_lives_elsewhere(clause: str, place: Slot, sentence: str) -> bool:
    """Whether `place` is where the speaker works while another clause of the sentence says
    where they live ("J'habite à Lyon mais je travaille à Genève"): a key holds one place, and
    the workplace, said last, would replace the home. "I live and work in Berlin" is one
    clause, and Berlin stays."""
    return (_WORKS_IN_RE.search(clause[max(0, place.start - 40):place.start]) is not None
            and _LIVES_IN_RE.search(sentence) is not None and _LIVES_IN_RE.search(clause) is None)


def not_their_home(clause: str, place: Slot, sentence: str) -> bool:
    """Whether the city `place` names is not where the speaker lives, for any of the reasons
    above."""
    return (not_where_they_live(clause, place)
            or works_there_lives_elsewhere(clause, place, sentence))
