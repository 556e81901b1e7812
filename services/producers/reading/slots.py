"""Values named in a clause, found through the vocabulary's gazetteers.

The encoder decides what a clause states; the value always comes from here, already in the
vocabulary's canonical form: a language's BCP 47 tag, a city's GeoNames name, an IANA zone, a
catalogue tool, a name as written. A value the gazetteers do not know is never guessed from the
words around it (no `tooling/bun-last-week`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from habitus.vocabulary import canonical_language, canonical_timezone, roles, tools
from habitus.vocabulary.keys import KEYS
from habitus.vocabulary.languages import is_language_tag, is_written_name, names_language
from habitus.vocabulary.places import City, find_city
from habitus.vocabulary.roles import canonical_role
from habitus.vocabulary.timezones import ABBREVIATION_PATTERN
from services.producers.reading.tool_words import (
    NOT_THE_TOOL_RE,
    TITLE_BEFORE_RE,
    in_tool_context,
    listed_after_a_tool,
)
from services.producers.reading.veto_things import VETO_THINGS

_I = re.IGNORECASE


@dataclass(frozen=True, slots=True)
class Slot:
    """A value found in a clause: `kind` is the key it can fill (or "tool", "veto")."""

    kind: str
    value: str
    start: int
    end: int


_CAP = r"(?-i:[A-ZÀ-ÖØ-Þ][\w'&.-]*)"
_NAME = rf"{_CAP}(?:\s+(?:(?:de|da|van|von|del|la|le|der)\s+)?{_CAP}){{0,3}}"
_ZONE_WORDS = frozenset("pacific eastern central mountain atlantic".split())
_NOT_A_NAME = frozenset("ok okay new right back out over just still here hi hello hey yes so"
                        .split())
_NAME_HERE = re.compile(
    rf"(?:^|[,;!]\s*)(?P<v>{_CAP})\s+(?:here|speaking)\b"
    rf"|(?:^|[,;]\s*)(?:it's|its|this\s+is)\s+(?P<its>{_CAP})(?=\s*(?:[,.;!]|$|,?\s+the\s))"
    rf"|(?:^|[,;]\s*)(?P<mine>{_NAME})\s+is\s+my\s+name\b"
    rf"|(?:^|\n)\s*(?:[\u2014\u2013]|--?)\s*(?P<sig>{_CAP})\s*$")
_ROLE_HERE = re.compile(r"^(?:an?\s+)?(?P<v>[\w-]+(?:\s+[\w-]+){0,3})\s+(?:here|speaking)\b", _I)
_NAME_CUES = re.compile(
    rf"(?:\b(?:my\s+(?:full\s+|first\s+|real\s+)?name(?:'s|\s+is)|name's|i'm|i\s+am)|"
    rf"(?:^|(?:hi|hey|hello|yo),?\s+)im|"
    rf"\bthis\s+is|"
    rf"\b(?:ich\s+heiße|ich\s+heisse|mein\s+name\s+ist|ich\s+bin|je\s+m'appelle|je\s+suis|"
    rf"mon\s+nom\s+est|mon\s+prénom\s+(?:est|c'est)|moi,?\s+c'est|me\s+llamo|mi\s+nombre\s+es|"
    rf"soy))"
    rf"\s+(?P<v>{_NAME})", _I)
_PREFERRED_CUES = re.compile(
    rf"\b(?:calls?\s+me(?:\s+by\s+my\s+(?:first\s+|given\s+)?name,?)?|i\s+go\s+by|"
    rf"(?:my\s+)?(?:preferred\s+name|nickname)\s+is|address\s+me\s+as|refer\s+to\s+me\s+as|"
    rf"nenn(?:t|en)?\s+mich|sag\s+einfach|appelle[- ]moi|appelez[- ]moi|llámame|llamame|"
    rf"dime|me\s+dicen|me\s+llaman)\s+"
    rf"(?:(?:just|simply|einfach|juste|simplemente|nur|bitte|please|gerne?)\s+)*"
    # a title is part of the name asked for ("address me as Dr. Chen")
    rf"(?P<v>(?:(?:Dr|Prof|Mr|Mrs|Ms|Mx|Herr|Frau)\.?\s+)?{_NAME})", _I)
#: the German order, the name before its verb: "du kannst mich Max nennen"
_PREFERRED_BEFORE_VERB = re.compile(
    rf"\b(?:kannst|darfst|könnt|dürft|können|dürfen)\s+mich\s+(?:(?:gerne?|ruhig|einfach)\s+)?"
    rf"(?P<v>{_NAME})\s+nennen\b", _I)
#: a team's or a department's usual name ("my team is payments", "I work in marketing")
_USUAL_TEAMS = (r"(?:payments|billing|platform|infra|infrastructure|growth|search|security|sre|"
                r"data|design|sales|marketing|support|mobile|frontend|backend|identity|checkout|"
                r"onboarding|risk|fraud|compliance|finance|legal|recruiting|devops|qa|research|"
                r"engineering|product|operations|ops|hr|people|analytics|partnerships)")
_EMPLOYER_CUES = re.compile(
    rf"\b(?:work(?:ing)?\s+(?:at|for)|employed\s+(?:at|by)|(?:i'm|i\s+am)\s+at|"
    rf"(?<!\w)(?:i|i've|i\s+have)\s+(?:just\s+|recently\s+)?joined|"
    rf"my\s+(?:employer|company)\s+is(?:\s+called)?|my\s+company'?s\s+called|"
    rf"(?:startup|company|firm|agency|studio)\s+called|"
    rf"(?:mon\s+entreprise|ma\s+boîte|ma\s+société)\s+s'appelle|"
    rf"(?:meine\s+firma|mein\s+arbeitgeber)\s+(?:heißt|ist)|"
    rf"mi\s+empresa\s+(?:se\s+llama|es)|arbeite\s+(?:bei|für)|bin\s+bei|travaille\s+(?:chez|pour)|"
    rf"suis\s+chez|bosse\s+(?:chez|pour)|trabajo\s+(?:en|para)|team\s+(?:at|for|bei|chez|en)|équipe\s+\w+\s+chez|"
    rf"(?:engineer|developer|designer|manager|scientist|analyst|architect|lead|founder|cto|ceo|"
    rf"consultant|researcher|intern|pm|sre|entwickler(?:in)?|ingenieur(?:in)?|développeur|"
    rf"développeuse|ingénieure?|desarrollador(?:a)?|diseñador(?:a)?|ingenier[oa])"
    rf"(?:\s+de\s+\w+)?\s+(?:at|@|chez|bei|en|para)|(?:i'm|i\s+am)\s+with|we\s+at|"
    rf"my\s+company,?|been\s+at|(?:team|payments|here)\s+at|"
    # "I work in marketing at Nike": the department, then where
    rf"work(?:ing)?\s+in\s+{_USUAL_TEAMS}\s+(?:at|for)|"
    rf"(?:l'équipe|el\s+equipo(?:\s+de)?|im)\s+[\w-]+\s+(?:de|del|bei|chez))"
    # an article before the name ("for the BBC", "bei der Deutschen Bahn"), in lower case: a
    # capitalised one is part of the name ("at The Guardian")
    rf"\s+(?:(?P<art>(?-i:the|der|die|dem|den|la|le|el))\s+)?(?P<v>{_NAME})", _I)
#: the cue's last word, when it can only introduce an organisation: "chez Orange", "bei Bosch",
#: "work for Apple" (a city's name after it is the company's: Orange is also a town)
_FOR_AN_ORGANISATION_RE = re.compile(r"\b(?:chez|bei|für|pour|for|by|para)\s+(?:\w+\s+)?$", _I)


def _employer(m: re.Match[str]) -> str:
    """The employer a cue names, in its nominative: after "der"/"dem" a German adjective
    ends in -en ("bei der Deutschen Bahn" is Deutsche Bahn)."""
    value = _name(m.group("v"))
    words = value.split()
    if m.group("art") in {"der", "dem"} and len(words) > 1 and words[0].endswith("en"):
        words[0] = words[0][:-1]
    return " ".join(words)
#: the vocabulary's pronoun pairs ("any" is said as "any pronouns")
_PAIRS = "|".join(re.escape(v) for v in KEYS["identity", "pronouns"].values if "/" in v)
#: the speaker's own pronouns: "my pronouns are they/them", "I use she/her", "I go by he/they",
#: "any pronouns", or in brackets after their own name ("I'm Alex (they/them)")
PRONOUNS_RE = re.compile(
    rf"\b(?:my\s+pronouns\s+(?:are|:)|pronouns\s*:|i\s+use|i\s+go\s+by)\s+"
    rf"(?:(?P<v>{_PAIRS})\b|(?P<any>any)\s+pronouns\b)"
    rf"|\b(?:i'm|i\s+am|my\s+name\s+is|call\s+me)\s+{_NAME}\s+\((?P<b>{_PAIRS})\)", _I)
#: the speaker's own address, said as such ("my email is jo@example.org"); "email me at ..."
#: asks for a channel and is read as one
EMAIL_RE = re.compile(
    r"\bmy\s+(?:(?:work|personal|private)\s+)?(?:e-?mail|email\s+address|address)\s+"
    r"(?:is|:)\s+(?P<v>[^@\s]+@[^@\s]+\.[a-z]{2,})\b", _I)
#: right after a role: where the speaker holds it ("a nurse at Mercy Hospital")
#: capitalised words after "at" that say when, not where ("a teacher at Christmas")
_WHEN_WORDS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april "
    "may june july august september october november december christmas easter "
    "thanksgiving weekends".split())
_AT_NAME_RE = re.compile(rf"\s+(?:at|@|bei|chez|en)\s+(?:(?:der|dem|den|the)\s+)?"
                         rf"(?P<v>{_NAME}(?:\s+&\s+{_NAME})?)", _I)
_WORD_END_RE = re.compile(r"[\w'-]+")
_TEAM_CUES = re.compile(
    r"\b(?:the|our|my)\s+(?P<v>[a-z][\w-]*(?:\s+[a-z][\w-]*)?)\s+team\b"
    r"|\b(?:im|in\s+the|in\s+unserem)\s+(?P<de>[^\W_]+)-?team\b"
    r"|\bl'équipe\s+(?P<fr>[\w-]+(?:\s+[\w-]+)?)"
    r"|\bel\s+equipo\s+de\s+(?P<es>[\w-]+(?:\s+[\w-]+)?)"
    # "my team is Payments", "our team is called Radar": a name (capitalised), or a team's
    # usual name ("my team is payments"; "my team is small" names none)
    rf"|\b(?:my|our)\s+team\s+is\s+(?:called\s+)?"
    rf"(?P<is>(?-i:[A-Z][\w-]*(?:\s+[A-Z][\w-]*)?)|{_USUAL_TEAMS})\b"
    # "I work in marketing", "working in sales": a department is the speaker's team
    rf"|\b(?:i\s+|i'm\s+|i\s+am\s+)?work(?:ing)?\s+in\s+(?P<in>{_USUAL_TEAMS})\b", _I)
_MEMBER_BEFORE_RE = re.compile(
    r"\b(?:on|in|of|with|join|joined|joining|lead|leading|run|running|manage|managing|"
    r"part\s+of|member\s+of)\s+$", _I)
_TEAM_STOP = frozenset("de del des du bei at von chez en".split())
#: common team names, in English
_TEAM_WORDS = {"paiements": "payments", "pagos": "payments", "zahlungen": "payments",
               "infraestructura": "infrastructure", "infrastruktur": "infrastructure",
               "plataforma": "platform", "plattform": "platform", "plateforme": "platform",
               "données": "data", "datos": "data", "daten": "data", "sécurité": "security",
               "seguridad": "security", "sicherheit": "security", "ventes": "sales",
               "ventas": "sales", "vertrieb": "sales", "soporte": "support",
               "kundenservice": "support", "produit": "product", "producto": "product"}
_TEAM_NOT = frozenset("a an the my our your this that whole entire same new other".split())
_ROLE_CUES = re.compile(
    r"\b(?:i'm|i\s+am|im|i\s+work\s+as|work(?:ing)?\s+as|as|my\s+(?:role|job|title)\s+is|"
    r"ich\s+bin|bin|arbeite\s+als|als|je\s+suis|je\s+travaille\s+comme|comme|soy|"
    r"trabajo\s+(?:como|de)|como)"
    r"\s+(?:an?\s+|the\s+|un\s+|une\s+|una?\s+)?(?!not\b|no\b|kein|pas\b)"
    r"(?P<v>[\w-]+(?:\s+[\w-]+){0,3})"
    r"|^(?!not\b|no\b|nicht\b|pas\b|kein)(?:an?\s+|une?\s+|una?\s+)?"
    r"(?P<bare>(?:[\w-]+\s+){0,2}(?:engineer|developer|dev|"
    r"designer|manager|scientist|analyst|architect|researcher|consultant|founder|intern|"
    r"translator|student|entwickler\w*|ingenieur\w*|développeu\w+|ingénieur\w*|"
    r"desarrollador\w*|diseñador\w*|ingenier[oa](?:\s+de\s+datos)?))"
    r"(?:\s+(?:at|@|chez|bei|en|in|para)\s|$)"
    # any role of the vocabulary, said as an apposition to the speaker's name ("I'm Ana, a
    # nurse at Mercy Hospital", "I'm Dr. Amara Okafor, a pediatrician in Lagos"): with its
    # article, and where it is held, the town it is held in, or nothing after
    rf"|^an?\s+(?P<held>(?:[\w-]+\s+){{0,2}}(?:{'|'.join(sorted(roles.HEADS))}|"
    r"\w{3,}(?:ologist|iatrist|ician|therapist)))"
    r"(?:\s+(?:at|@|in)\s|$)"
    # a title alone where a clause starts, then where it is held: the speaker's, beside their
    # name ("I'm Omar, SRE at Tidewater", "Dana here, Head of Product at Linear"); without
    # the place it may be anyone's ("sign it as Marco, Head of Operations")
    # (a title of the vocabulary in any of its languages: "Ich bin Jonas, Produktmanager bei
    # Zalando"), the place a name
    r"|^(?:the\s+)?(?P<titled>(?:head|vp|svp|evp|director|chief|vice\s+president)\s+of\s+"
    r"[\w-]+(?:\s+[\w-]+)?|[\w-]+(?:\s+[\w-]+){0,2})"
    r"(?=\s+(?:at|@|chez|bei|en)\s+(?:(?:der|dem|the)\s+)?(?-i:[A-Z]))",
    _I)
#: role words, in the vocabulary's English; the last word of a role must be one of these
ROLE_HEADS = roles.HEADS
#: a pair of language codes ("EN to PT", "DE>FR", "PT → EN"): its codes are no time zone
_LANGUAGE_PAIR_RE = re.compile(r"(?-i:\b[A-Z]{2})\s*(?:to|into|->|→|>|/|-)\s*$", _I)
_LANGUAGE_PAIR_AFTER_RE = re.compile(r"\s*(?:to|into|->|→|>|/|-)\s*(?-i:[A-Z]{2}\b)", _I)
_ZONE_RE = re.compile(
    rf"(?<![\w/])(?:(?:UTC|GMT)\s*[+\u2212-]\s*\d{{1,2}}(?::?00)?|(?-i:{ABBREVIATION_PATTERN})"
    r"|(?-i:[A-Z][a-z]+/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?)"
    r"|(?:pacific|eastern|central|mountain|uk|indian?)\s+(?:standard\s+|daylight\s+)?time"
    r"|hora\s+del\s+(?:este|pacífico)|hora\s+central|heure\s+de\s+l'est|"
    r"mitteleuropäische\s+zeit)"
    r"(?![\w/])", _I)
_WORD_RE = re.compile(r"[^\W\d_][\w'-]*")
#: the speaker introducing themselves by name and where they are from: "I'm Jan from Hamburg",
#: "Ich bin Jan aus Hamburg", "je suis Marie de Lyon". Said of a place it names where they are
#: (the city must be one; "I'm Jan from Acme" names none). "I am from Munich" alone is where
#: someone grew up as often as where they live, and stays unread.
_INTRO_FROM = (r"(?:i'm|i\s+am|ich\s+bin|je\s+suis|soy)\s+(?-i:[A-Z][\w'-]+)"
               r"(?:\s+(?-i:[A-Z][\w'-]+))?,?\s+(?:from|aus|de)")
#: a city counts only right after a word that places someone: "in Berlin", "à Nantes"
_PLACE_BEFORE_RE = re.compile(
    r"(?<!airport\s)(?<!station\s)(?<!hotel\s)(?<!flughafen\s)(?<!bahnhof\s)"
    r"(?<!aéroport\s)(?<!aeropuerto\s)(?<!born\s)(?<!geboren\s)(?<!nací\s)(?<!né\s)"
    r"\b(?:in|im|en|à|a|out\s+of|(?:moved|moving|relocated|relocating)\s+to|"
    r"(?:moved|moving|relocated|relocating)\s+from\s+[\w' -]{1,40}?\s+to|"
    r"work(?:ing)?\s+(?:remote(?:ly)?\s+)?from|(?:gezogen|umgezogen|zieh\w*)\s+nach|"
    + _INTRO_FROM + r")\s+$", _I)
#: a city in lower case ("j'habite à lyon") counts after a word of living there
_LIVE_BEFORE_RE = re.compile(
    r"\b(?:live|living|based|wohne|lebe|habite|vis|vivo|resido|moved\s+to)\s+(?:in|à|en|a)?\s*$",
    _I)
_CHANNELS = {
    "slack": "slack", "email": "email", "e-mail": "email", "mail": "email", "emails": "email",
    "telegram": "telegram", "sms": "sms", "text": "sms", "texts": "sms", "whatsapp": "whatsapp",
    "signal": "signal", "discord": "discord", "teams": "teams", "phone": "phone",
    "téléphone": "phone", "teléfono": "phone", "correo": "email", "courriel": "email",
    "handy": "phone", "anruf": "phone",
}
_CHANNEL_RE = re.compile(r"\b(" + "|".join(map(re.escape, sorted(_CHANNELS, key=len,
                                                                   reverse=True))) + r")\b", _I)
#: the word just before another ("British" before "English")
_WORD_BEFORE_RE = re.compile(r"([^\W\d_]+)\s+$")


def _name(text: str) -> str:
    """A name as written, without a trailing word that ends it ("Priya and" -> "Priya"), and
    without a city it is from: "soy Ana de Sevilla", "je suis Marie de Lyon" name Ana and
    Marie from a city (read as the location), where "Ana de Armas" is a name."""
    parts = text.split()
    while parts and parts[-1].lower() in {"and", "but", "from", "at", "in", "und", "et", "y"}:
        parts.pop()
    for i in range(1, len(parts) - 1):
        if parts[i].lower() in {"de", "d'"} and find_city(" ".join(parts[i + 1:]).strip(".'")):
            parts = parts[:i]
            break
    return " ".join(parts).strip(".'")


def _name_end(m: re.Match[str], group: str, value: str) -> int:
    """Where the name `value` ends in the match: a city it was said to be from, cut off by
    `_name`, is a place of its own ("soy Ana de Sevilla")."""
    at = m.group(group).find(value)
    return m.start(group) + at + len(value) if at >= 0 else m.end(group)


def _is_other_value(text: str) -> bool:
    """A capitalised word that is a language, a city, a tool or a role is no person's name."""
    low = text.lower()
    return (names_language(low) or tools.canonical_tool(low) is not None
            or low in roles.TRANSLATED or low.split()[-1] in ROLE_HEADS or "team" in low
            or canonical_role(low) is not None
            or canonical_timezone(text) is not None or low in _ZONE_WORDS)


def _employer_after_role(clause: str, slots: list[Slot]) -> None:
    """"a nurse at Mercy Hospital", "Lehrerin bei Schule Nord": a named place right after the
    speaker's role is where they work, whatever the role (the employer cues name only the
    roles of the software trade). Added when no employer was found already."""
    if any(s.kind == "employer" for s in slots):
        return
    for role in [s for s in slots if s.kind == "role"]:
        # the role as said may be in another language than its value ("Projektleiter" is a
        # project manager): the place may follow any of its words
        ends = [role.start + w.end() for w in _WORD_END_RE.finditer(clause[role.start:role.end])]
        m = next((found for end in ends if (found := _AT_NAME_RE.match(clause, end))), None)
        if m is None:
            continue
        value = _name(m.group("v"))
        if value and find_city(value) is None and canonical_language(value) is None and (
                not _is_other_value(value)) and value.lower() not in _WHEN_WORDS:
            slots.append(Slot("employer", value, m.start("v"), m.end("v")))
            return


def find(clause: str, sentence: str) -> list[Slot]:
    """Every value `clause` names; `sentence` (its whole sentence) resolves ambiguities."""
    slots: list[Slot] = []
    for cue in (_PREFERRED_CUES, _PREFERRED_BEFORE_VERB):
        for m in cue.finditer(clause):
            slots.append(Slot("preferred_name", _name(m.group("v")), m.start("v"),
                              m.end("v")))
    for m in _NAME_CUES.finditer(clause):
        value = _name(m.group("v"))
        if value and value.lower() not in _NOT_A_NAME and not _is_other_value(
                value.split()[0]) and not any(
                s.start <= m.start("v") < s.end for s in slots):
            slots.append(Slot("name", value, m.start("v"), _name_end(m, "v", value)))
    for m in _EMPLOYER_CUES.finditer(clause):
        value = _employer(m)
        # "trabajo en Ubuntu" works on a tool; "I work at Vercel" is employed there
        joined = _JOINED_RE.search(clause, m.start(), m.start("v")) is not None
        on_a_tool = (_ON_CUE_RE.search(clause, m.start(), m.start("v")) is not None
                     or joined) and tools.canonical_tool(value.lower()) is not None
        if joined and (value.lower() in _JOINED_NOT_EMPLOYERS
                       or value.split()[0].lower() in _JOINED_NOT_EMPLOYERS):
            continue  # "I joined Twitter", "I've joined Microsoft Teams": no employer
        a_city = find_city(value) is not None and _FOR_AN_ORGANISATION_RE.search(
            clause, m.start(), m.start("v")) is None
        # a language's name alone is none ("Deutsche Bahn" begins with one)
        a_language = " " not in value and canonical_language(value) is not None
        if value and not a_city and not a_language and not on_a_tool:
            slots.append(Slot("employer", value, m.start("v"), m.end("v")))
    for m in _TEAM_CUES.finditer(clause):
        group = next(g for g in ("v", "de", "fr", "es", "is", "in") if m.group(g))
        if group == "v" and not _MEMBER_BEFORE_RE.search(clause[max(0, m.start() - 25):m.start()]):
            continue  # "the payments team keeps breaking staging" is no team of the user's
        words = []
        for w in m.group(group).lower().split():
            if w in _TEAM_STOP:
                break  # "l'équipe paiements de Decathlon": the team ends at "de"
            if w not in _TEAM_NOT:
                words.append(_TEAM_WORDS.get(w, w))
        value = " ".join(words)
        if value and value not in {"team", "my", "our"}:
            slots.append(Slot("team", value, m.start(group), m.end(group)))
    for m in _ROLE_CUES.finditer(clause):
        group = next(g for g in ("v", "bare", "held", "titled") if m.group(g))
        role = _role(m.group(group))
        if role:
            slots.append(Slot("role", role, m.start(group), m.end(group)))
    for m in _NAME_HERE.finditer(clause):
        group = next(g for g in ("v", "its", "mine", "sig") if m.group(g))
        value = _name(m.group(group))
        if value and not _is_other_value(value) and value.lower() not in _NOT_A_NAME and (
                not any(s.kind in ("name", "preferred_name") for s in slots)):
            slots.append(Slot("name", value, m.start(group), _name_end(m, group, value)))
    for m in _ROLE_HERE.finditer(clause):
        role = _role(m.group("v"))
        if role and not any(s.kind == "role" for s in slots):
            slots.append(Slot("role", role, m.start("v"), m.end("v")))
    _employer_after_role(clause, slots)
    for m in PRONOUNS_RE.finditer(clause):
        group = next(g for g in ("v", "any", "b") if m.group(g))
        slots.append(Slot("pronouns", m.group(group).lower(), m.start(group), m.end(group)))
    for m in EMAIL_RE.finditer(clause):
        slots.append(Slot("email", m.group("v").lower(), m.start("v"), m.end("v")))
    if not any(s.kind == "pronouns" for s in slots) and "(" in sentence:
        # "I'm Alex (they/them)": the brackets are a clause of their own; the pronouns are
        # the speaker's, so they go with the clause that names them
        whose = clause.strip(" \x00")
        for m in PRONOUNS_RE.finditer(sentence):
            if m.group("b") and whose and whose in sentence[m.start():m.start("b")]:
                slots.append(Slot("pronouns", m.group("b").lower(), len(clause), len(clause)))
    zones = list(_ZONE_RE.finditer(clause))
    cities = _cities(clause)
    near = None
    for _, _, city in cities:
        near = city.timezone
    if near is None:
        for _, _, city in _cities(sentence):
            near = city.timezone
    for m in zones:
        if _LANGUAGE_PAIR_RE.search(clause, 0, m.start()) or _LANGUAGE_PAIR_AFTER_RE.match(
                clause, m.end()):
            continue  # "EN to PT": a translator's languages, not Pacific Time
        zone = canonical_timezone(m.group(), near=near)
        if zone is not None:
            slots.append(Slot("timezone", zone, m.start(), m.end()))
    if not zones:
        for m in _CITY_TIME_RE.finditer(clause):  # "use Lisbon time": that city's zone
            timed = find_city(m.group("v"))
            if timed is not None and timed.timezone:
                slots.append(Slot("timezone", timed.timezone, m.start(), m.end()))
    taken = [(s.start, s.end) for s in slots
             if s.kind in {"name", "preferred_name", "employer", "timezone"}]
    for start, end, city in cities:
        if not any(a <= start < b for a, b in taken) and _PLACE_BEFORE_RE.search(
                clause[max(0, start - 30):start]):
            slots.append(Slot("location", city.name, start, end))
    for m in _WORD_RE.finditer(clause):
        word = m.group()
        if len(word) < 4 or not is_written_name(word):
            continue  # "Bengaluru" is no Bengali, "more" no Mossi
        tag = canonical_language(word)
        if tag is not None and tools.canonical_tool(word.lower()) is None:
            start = m.start()
            before = _WORD_BEFORE_RE.search(clause[:start])
            regional = canonical_language(f"{before.group(1)} {word}") if before else None
            if before and regional and regional.startswith(f"{tag}-") and (
                    is_language_tag(regional)):  # "British English" is en-GB
                tag, start = regional, before.start(1)
            slots.append(Slot("language", tag, start, m.end()))
    for start, end, written, name in tools.mentions(clause):
        sentence_start = start == 0 or clause[:start].strip(" \x00") == ""
        if name in tools.AMBIGUOUS and (written == name or (
                sentence_start and written.lower() == name)) and not in_tool_context(
                    clause, start) and not (written != name and sentence_start
                                            and listed_after_a_tool(clause, sentence)):
            continue  # "go ahead", "Go deeper on ...": a word, not the language
        if NOT_THE_TOOL_RE.match(clause[end:]):
            continue  # "the vim extension", "jest is outdated"
        if TITLE_BEFORE_RE.search(clause[max(0, start - 8):start]):
            continue  # "Mr Jenkins": a person
        slots.append(Slot("tool", name, start, end))
    for m in _CHANNEL_RE.finditer(clause):
        if _PLAIN_BEFORE_RE.search(clause, 0, m.start()):
            continue  # "plain text" is a format, "walls of text" a length: no text message
        slots.append(Slot("channel", _CHANNELS[m.group(1).lower()], m.start(), m.end()))
    for pattern, key in VETO_THINGS:
        for m in pattern.finditer(clause):
            slots.append(Slot("veto", key, m.start(), m.end()))
    return sorted(slots, key=lambda s: (s.start, s.kind))


_PLACE_WORD_RE = re.compile(
    r"\b(?:in|im|en|à|a|out\s+of|moved\s+to|moving\s+to|relocated\s+to|relocating\s+to|"
    r"(?:moved|moving|relocated|relocating)\s+from\s+[\w' -]{1,40}?\s+to|"
    r"work(?:ing)?\s+(?:remotely\s+)?from|nach|" + _INTRO_FROM + r")\s+", _I)


def _cities(text: str) -> list[tuple[int, int, City]]:
    """Cities named right after a word that places someone ("in Berlin", "à Nantes"): a city
    anywhere else is never a location facet, so only those places are looked up (one regex
    over the clause, not a gazetteer lookup per word)."""
    out: list[tuple[int, int, City]] = []
    for place in _PLACE_WORD_RE.finditer(text):
        words = list(_WORD_RE.finditer(text, place.end(), min(len(text), place.end() + 60)))
        if not words or words[0].start() != place.end():
            continue
        for n in (3, 2, 1):  # longest name first: "Mexico City", "New York"
            if n > len(words):
                continue
            start, end = words[0].start(), words[n - 1].end()
            span = text[start:end]
            if n > 1 and not (words[0].group()[0].isupper()
                              and words[n - 1].group()[0].isupper()):
                continue  # "Mexico City", "Ciudad de México": capitalised at both ends
            city = find_city(span) or (
                find_city(span.title()) if _LIVE_BEFORE_RE.search(text[max(0, start - 30):start])
                else None)
            if city is not None and (span[0].isupper() or n == 1):
                out.append((start, end, city))
                break
    return out


def _role(text: str) -> str:
    """The longest start of `text` that is a role, in the vocabulary's canonical form
    ("Backend-Entwickler bei SAP" -> "backend developer"); "" when none."""
    words = text.split()
    while words and words[0].lower() in {"the", "a", "an", "un", "une", "el", "la", "der"}:
        words = words[1:]
    for n in range(min(len(words), 5), 0, -1):
        role = canonical_role(" ".join(words[:n]))
        if role:
            return role
    return ""




#: a city's time ("use Lisbon time", "New York time"): the city's zone
_CITY_TIME_RE = re.compile(r"(?P<v>\b[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,2})\s+time\b")
#: an employer cue that also means "working on" (Spanish "trabajo en")
_ON_CUE_RE = re.compile(r"\ben\s+$", _I)
#: "I joined Stripe": an employer, unless what was joined is a tool (a workspace, a server)
#: or a platform, a network or a club people join as members
_JOINED_RE = re.compile(r"\bjoined\s+$", _I)
_JOINED_NOT_EMPLOYERS = frozenset("""twitter x linkedin facebook instagram tiktok reddit
    mastodon bluesky threads discord slack teams zoom github gitlab meetup toastmasters strava
    duolingo patreon substack medium notion figma whatsapp telegram signal youtube twitch
    pinterest snapchat clubhouse hackernews stackoverflow kaggle coursera udemy""".split()) | {
    "microsoft teams", "google meet", "google groups", "google classroom", "hacker news",
    "stack overflow"}
#: "text" as what answers are made of, not a text message: "plain text", "walls of text",
#: "blocks of text"
_PLAIN_BEFORE_RE = re.compile(r"\b(?:plain|(?:walls?|blocks?|lots|pages?|chunks?|paragraphs?)"
                              r"\s+of)\s+$", _I)



def could_hold(clause: str) -> bool:
    """Whether a clause without a speaker's word could still name a value that anchors it
    (a capitalised name or place, a language, a channel): the cheap test that keeps `find`,
    a dozen patterns, off most of the clauses of a chat."""
    if any(ch.isupper() for ch in clause[1:]) or "@" in clause:
        return True
    if _HERE_START_RE.match(clause):
        return True  # "Maria here", "Dana speaking": a name capitalised only where it starts
    for m in _WORD_RE.finditer(clause):
        word = m.group().lower()
        if word in _CHANNELS or (len(word) >= 4 and is_written_name(word)):
            return True
    if _TOOL_FOR_START_RE.match(clause) and tools.mentions(clause):
        return True  # "redis for caching"
    return _PLACE_WORD_RE.search(clause) is not None and _LIVE_BEFORE_RE.search(clause) is not None


_HERE_START_RE = re.compile(r"^[\w'-]+\s+(?:here|speaking)\b", _I)
_TOOL_FOR_START_RE = re.compile(r"^[\w.#+-]+(?:\s+[\w.#+-]+)?\s+(?:for|für|pour|para)\s", _I)
