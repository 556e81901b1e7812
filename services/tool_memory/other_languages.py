"""Spanish, German and French prohibitions: the edicts of `capture` in the other languages the
statement reader reads ("Nunca mandes correos a Sarah", "Schick Sarah niemals E-Mails",
"N'envoie jamais d'e-mails à Sarah").

As narrow as the English ones, since an invented rule pins a wrong constraint above every later
instruction: an imperative that opens the sentence (after filler), never a sentence whose
subject is a person ("Ich benutze nie sudo"), nor reassurance ("No te preocupes", "Ne
t'inquiète pas"). Spanish "no" counts only before the verbs of a tool's work ("no mandes",
"no uses"): before anything else it is English as often ("No changes needed.").
"""

from __future__ import annotations

import re
from collections.abc import Callable

_ES_NO_VERBS = (
    r"mandes|env[ií]es|reenv[ií]es|uses|utilices|escribas|borres|elimines|abras|ejecutes|"
    r"corras|llames|compartas|publiques|agendes|programes|navegues|instales|modifiques|"
    r"cambies|subas|descargues|respondas|contestes|reserves|pongas|hagas|toques|metas|"
    r"copies|invites|mensajees"
)
_ES_CLITICS = r"(?:(?:me|le|les|nos|lo|la|los|las|se)\s+)*"
_GATE_RE = re.compile(
    r"\b(?:nunca|jam[aá]s|deja\s+de|nie|niemals|nicht|kein\w*|ne|n'|arr[eê]te\w*)\b"
    rf"|\bno\s+{_ES_CLITICS}(?:{_ES_NO_VERBS})\b")
_FOREIGN_LEAD_INS = (
    r"por\s+favor|porfa|y|tambi[eé]n|ojo|importante|recuerda|a\s+partir\s+de\s+ahora|"
    r"de\s+ahora\s+en\s+adelante|en\s+el\s+futuro|"
    r"bitte|und|auch|also|wichtig|ab\s+jetzt|ab\s+sofort|k[uü]nftig|in\s+zukunft|"
    r"s'il\s+te\s+pla[iî]t|s'il\s+vous\s+pla[iî]t|stp|svp|et|aussi|important|"
    r"d[eé]sormais|[aà]\s+partir\s+de\s+maintenant|dor[eé]navant|[aà]\s+l'avenir"
)
_LEAD = rf"(?:(?:{_FOREIGN_LEAD_INS})\b[\s,:\-\u2013\u2014]+)*+"
_SPANISH_RE = re.compile(
    # "No mandes correos a Sarah", "Nunca uses sudo", "Jamás le escribas por Slack": the
    # negative imperative is the second person of the present subjunctive (-es/-as)
    rf"{_LEAD}(?:no\s+{_ES_CLITICS}(?P<es_no>{_ES_NO_VERBS})"
    rf"|(?:nunca|jam[aá]s)\s+{_ES_CLITICS}(?P<es>[^\W\d_]+(?:es|as|éis|áis)))\b"
    # "Deja de usar el navegador"
    r"|" + _LEAD + r"deja\s+de\s+(?P<es_stop>[^\W\d_]+(?:ar|er|ir))\b",
    re.IGNORECASE,
)
#: second persons after "no" that state something of the user ("no sabes", "no puedes") or
#: reassure ("no te preocupes", "no olvides", "no dudes"): no order about a tool
_SPANISH_NOT_AN_ORDER = frozenset(
    """sabes puedes tienes quieres entiendes crees piensas necesitas debes vas estás estas
    eres das ves oyes preocupes olvides dudes molestes asustes enfades vayas digas seas
    exageres mientas llores rindas""".split()
)
_GERMAN_RE = re.compile(
    # "Nie wieder E-Mails an Sarah schicken.", "Niemals sudo benutzen": an infinitive order
    rf"{_LEAD}(?:nie|niemals)\b(?:\s+wieder\b)?(?P<de_inf>.*\s[^\W\d_]+en)[\s.!]*$"
    # "Schick Sarah nie wieder E-Mails", "Benutze niemals sudo", "Sende keine Mails an Sarah"
    r"|" + _LEAD + r"(?P<de_verb>schick|schicke|send|sende|benutz|benutze|verwend|verwende|"
    r"nutz|nutze|schreib|schreibe|ruf|lösch|lösche|öffne|starte|führ|führe|lade|mail|maile)"
    r"\b(?P<de_rest>.*)$"
    # "Keine E-Mails an Sarah" (with a tool's noun: "keine Ahnung" orders nothing)
    r"|" + _LEAD + r"(?P<de_none>kein|keine|keinen)\s+(?P<de_what>.*)$",
    re.IGNORECASE,
)
_GERMAN_NEGATION_RE = re.compile(r"\b(?:nie|niemals|nicht|kein|keine|keinen|keinesfalls)\b",
                                 re.IGNORECASE)
_FRENCH_RE = re.compile(
    # "N'envoie jamais d'e-mails à Sarah", "Ne m'écris plus sur Slack", "N'utilise pas sudo"
    rf"{_LEAD}(?:ne\s+|n')(?:(?:me|m'|lui|leur|nous|le|la|les|l')\s*)?"
    r"(?P<fr>[^\W\d_]+)\s+(?:jamais|pas|plus)\b"
    # "Ne jamais utiliser sudo", "N'utilisez jamais le navigateur" (the above), "Arrête
    # d'utiliser le navigateur"
    r"|" + _LEAD + r"ne\s+(?:jamais|plus)\s+(?P<fr_inf>[^\W\d_]+(?:er|ir|re))\b"
    r"|" + _LEAD + r"arr[eê]te[zs]?\s+(?:de\s+|d')(?P<fr_stop>[^\W\d_]+(?:er|ir|re))\b",
    re.IGNORECASE,
)
#: after "ne": what reassures or speaks of the user ("ne t'inquiète pas", "n'oublie pas",
#: "n'hésite pas", "je ne sais pas" opens with "je" and never matches)
_FRENCH_NOT_AN_ORDER = frozenset(
    """t'inquiète inquiète inquiétez oublie oubliez hésite hésitez t'en vous sais sait
    est es suis sont peux peut veux veut""".split()
)


def is_prohibition(sentence: str, names_a_tool: Callable[[str], bool]) -> bool:
    """Whether one cleaned sentence (ASCII apostrophes) is a Spanish, German or French
    prohibition; `names_a_tool`: whether a text names a kind of tool ("E-Mails")."""
    if sentence.endswith("?"):
        return False
    m = _SPANISH_RE.match(sentence)
    if m is not None:
        return (m.group("es") or "").lower() not in _SPANISH_NOT_AN_ORDER
    m = _GERMAN_RE.match(sentence)
    if m is not None:
        if m.group("de_verb") is not None:
            return _GERMAN_NEGATION_RE.search(m.group("de_rest")) is not None
        if m.group("de_none") is not None:
            return names_a_tool(m.group("de_what"))
        return True
    m = _FRENCH_RE.match(sentence)
    if m is not None:
        verb = (m.group("fr") or "").lower()
        return verb not in _FRENCH_NOT_AN_ORDER
    return False


def may_prohibit(low: str) -> bool:
    """Cheap test that `low` (lower-cased) may hold one of these prohibitions."""
    return _GATE_RE.search(low) is not None

