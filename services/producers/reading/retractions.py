"""What a user takes back in so many words, read as denials of the values it names.

"Forget what I said about tables", "scratch pnpm", "never mind the formal tone", "Vergiss,
was ich über Tabellen gesagt habe", "Oublie ce que j'ai dit sur les tableaux", "I said Python
earlier, but we use Go": the clause names something the user stated before and no longer
means. Each value it names becomes a denial (`Stance.DENIED`), which drops that value's
evidence the way a "no" to a confirmation question does; a value stated after it in the same
message ("..., bullets are better") is read as usual. Without this, a preference said once and
taken back stayed in every prompt.

Two frames, read differently:

* **Pointing at what the user said** ("what I said about X", "my earlier request for X", "was
  ich über X gesagt habe", "ce que j'ai dit sur X", "lo que dije sobre X", "I said X earlier,
  but ..."): everything X names is taken back, bans included ("forget what I said about
  headers" lifts the ban), and a key named without a value takes back each of its values
  ("forget what I said about emojis").
* **Naming the thing alone** ("forget the tables", "never mind the formal tone", "scratch
  pnpm"): these also mean "leave it out", so only what leaving out agrees with is taken back:
  a layout, a tone, a language, a tool, a channel. A ban or a skip is not ("forget the
  pleasantries" asks for no pleasantries; "forget the headers" for none). "Ignore" and
  "disregard" count only with the pointing frame: alone they are about the message at hand
  ("ignore the typos", "disregard the attachment").

Either way X must be the value and nothing more: "ignore the German text below" is about a
text, "forget the Berlin trip" about a trip, "forget the formal tone for this email" about this
answer, and "forget that, tables please" points at the answer before; none takes anything back.
"I said X" takes X back only with a correction in so many words ("I meant", "wrong", "forget
that") or a move to what holds now ("..., but we use Go"): insisting ("I told you before: no
emojis!") and complaining ("I said English, but you answered in German") take nothing back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from habitus.vocabulary import check
from habitus.vocabulary.keys import BANNED, KEYS
from services.producers.reading import by_words, gates, slots, tool_values

Triple = tuple[str, str, str]

_I = re.IGNORECASE
_LEAD = r"^(?:(?:ok|okay|so|and|actually|hmm|also|wait|oh|sorry|please|bitte|no)[\s,]+)*"
#: verbs that take something back by themselves ("forget the tables")
_FORGET = (r"(?:forget(?:\s+about)?|scratch|never\s+mind(?:\s+about)?|vergiss|vergessen\s+sie|"
           r"oublie|oubliez|olvida|olvide|olvídate\s+de|olvidate\s+de|olvídese\s+de)")
#: verbs that take something back only when pointed at what the user said
_IGNORE = r"(?:ignore[zr]?|disregard|drop|ignorier\w*|ignora)"
#: pointing at what the user said: the thing follows
_SAID = (
    r"(?:what|everything|anything|all|the\s+(?:thing|bit|part)s?)\s+(?:that\s+)?i(?:'ve|\s+have)?"
    r"\s+(?:(?:just|earlier|previously|first)\s+)?(?:said|told\s+you|mentioned|asked\s+for|"
    r"wrote|wanted|requested|asked)(?:\s+(?:you\s+)?(?:earlier|before|previously|just\s+now|"
    r"above|at\s+first))?\s+(?:about|regarding|re|on|concerning|for|with)\s+"
    r"|(?:my|the)\s+(?:(?:earlier|previous|last|old|original|first|other)\s+)?(?:request|"
    r"preference|instruction|comment|note|rule|ask|message|point|wish)e?s?\s+(?:about|for|"
    r"regarding|on|re|concerning)\s+"
    r"|was\s+ich\s+(?:(?:vorhin|eben|gerade|vorher|zuerst)\s+)?(?:über|zu|wegen|bezüglich)\s+"
    r"|(?:meine\s+)?(?:bitte|anweisung|vorgabe)\s+(?:zu|wegen|bezüglich|mit)\s+"
    r"|ce\s+que\s+(?:je\s+t'ai|j'ai)\s+dit\s+(?:sur|à\s+propos\s+d(?:es|u|e\s+la|e\s+l'|e)|"
    r"au\s+sujet\s+d(?:es|u|e\s+la|e)|concernant|pour)\s*"
    r"|lo\s+que\s+(?:te\s+)?(?:dije|pedí)\s+(?:sobre|de|acerca\s+de|respecto\s+a)\s+")
_POINTING_RE: Final = re.compile(
    _LEAD + rf"(?:{_FORGET}|{_IGNORE})(?:\s+(?:sie|es))?[\s,:]+(?:{_SAID})(?P<thing>.+)$", _I)
_NAMING_RE: Final = re.compile(_LEAD + rf"{_FORGET}[\s,:]+(?P<thing>.+)$", _I)
#: "I said X earlier" (a retraction when the sentence moves off it: gates.retraction decides)
_I_SAID_RE: Final = re.compile(
    _LEAD + r"i\s+(?:said|told\s+you)\s+(?:that\s+)?(?:(?:i|we)\s+(?:wanted|want|used|use|"
    r"preferred|prefer|liked|like)\s+)?(?P<thing>.+)$", _I)
#: what makes "I said X" a taking back rather than insisting or complaining: a correction in
#: so many words, or the speaker moving on to what holds now ("..., but we use Go")
_CORRECTED_RE: Final = re.compile(
    r"\b(?:i\s+meant|i\s+mean|meant\s+to\s+say|wrong|mistake|typo|scratch\s+that|"
    r"forget\s+(?:that|it)|ignore\s+that|changed\s+my\s+mind|no\s+longer|anymore|my\s+bad)\b"
    r"|\b(?:but|aber|mais|pero)\s+(?:now\s+|actually\s+)?(?:i|we|i'm|we're|i'd|ich|wir|je|"
    r"nous|on)\b", _I)
#: "I said X, but you ...": a complaint about the answers, which insists on X
_COMPLAINT_RE: Final = re.compile(
    r"\byou\s+(?:keep|kept|still|answered|used|wrote|replied|did|didn't|don't|never|always|"
    r"ignored|forgot|went|are\s+still|'re\s+still)\b", _I)
#: a thing taken back for the moment only: "forget the formal tone for this email"
_FOR_NOW_RE: Final = re.compile(
    r"\b(?:for|in)\s+(?:this|that|the\s+next)\b|\bthis\s+time\b|\bfor\s+now\b|\btoday\b|"
    r"\bright\s+now\b|\bdiesmal\b|\bpour\s+(?:ce|cette)\b|\bpara\s+(?:este|esta)\b", _I)
#: a German pointing frame ends in its verb: "... über Tabellen gesagt habe"
_GERMAN_END_RE: Final = re.compile(
    r"\s+(?:gesagt|geschrieben|erwähnt|gewünscht|gemeint)(?:\s+(?:habe|hab|hatte))?$", _I)

#: words a thing may hold besides its value: articles, "thing", "earlier", "please", the verbs
#: of wanting ("what I said about wanting tables") and the words a style value is said with
_FILLER: Final = frozenset("""
the a an my your our those these some any all of about with for in on to
thing things bit part parts stuff idea request requests preference preferences rule rules
business whole entire
earlier before previously then please again after anymore too also just really though
wanting using preferring having getting keeping want use prefer like wanted used liked
answers answer responses response replies reply messages message style tone format formatting
language length points point everything always
die der das den dem des ein eine einen meine meinen mein mit von vorhin eben bitte doch mal
sache ding
les le la l' des du de un une mes mon ma ton ta tes truc chose
las los el la lo un una mis tu tus cosa tema
""".split())
_WORD_RE: Final = re.compile(r"[\w'/+#.-]+")
#: values that are themselves a leaving out: naming the thing alone asks for them
_LEAVING_OUT: Final = frozenset({("style", "preamble", "skip"), ("style", "emoji", "none")})


def denials(clause: str, sentence: str, message_tools: Iterable[str], *, bans: bool
            ) -> tuple[tuple[Triple, ...], bool]:
    """What a clause the reader found to be a retraction takes back, and whether the whole
    sentence was read for it ("Vergiss, was ich über Tabellen gesagt habe": the verb is a
    clause of its own, so the sentence's other clauses say nothing more). A clause with a ban
    takes back only what it quotes of the speaker's own words ("I said no tables, forget
    that"); otherwise its ban is read as one."""
    found: tuple[Triple, ...] = ()
    if not bans or gates.quotes_own_words(clause):
        found = tuple(taken_back(clause, sentence, message_tools))
    if not found and not bans and sentence.startswith(clause):
        found = tuple(taken_back(sentence, sentence, message_tools, pointing_only=True))
        return found, bool(found)
    return found, False


def taken_back(clause: str, sentence: str, message_tools: Iterable[str] = (), *,
               pointing_only: bool = False) -> list[Triple]:
    """The (class, key, value) triples a retraction clause takes back, none when it names no
    value or names something besides one. `clause` is a clause the reader found to be a
    retraction (`gates.retraction`); `pointing_only` reads only a frame that points at what
    the user said (for a whole sentence whose verb was a clause of its own)."""
    core = clause.strip(" \x00.!?,;:")
    pointing = _POINTING_RE.match(core)
    if pointing is None and not pointing_only:
        said = _I_SAID_RE.match(core)
        if said is not None and _CORRECTED_RE.search(sentence) and not (
                _COMPLAINT_RE.search(sentence)):
            pointing = said
    if pointing is not None:
        thing = _GERMAN_END_RE.sub("", pointing.group("thing"))
        return _named(thing, sentence, message_tools, pointing=True)
    naming = None if pointing_only else _NAMING_RE.match(core)
    if naming is not None:
        return _named(naming.group("thing"), sentence, message_tools, pointing=False)
    return []


def _named(thing: str, sentence: str, message_tools: Iterable[str], *, pointing: bool
           ) -> list[Triple]:
    thing = thing.strip(" \x00.!?,;:")
    if _FOR_NOW_RE.search(thing):
        return []  # "forget the formal tone for this email": this answer, not for good
    found = [s for s in slots.find(thing, sentence)
             if s.kind in ("language", "tool", "channel", "veto")]
    out: list[Triple] = []
    for s in found:
        out += _slot_triples(s, sentence, message_tools)
    styled = by_words.style(thing)
    layout = by_words.layout(thing)
    if layout is not None:
        styled = [*styled, ("style", "format", layout), ("veto", f"format={layout}", BANNED)]
    out += styled
    keys = {t[1] for t in styled if t[0] == "style"}
    if pointing and not out:
        # a key named without a value: every value of it ("what I said about emojis")
        keys = set(_keys_named(thing))
        out += [("style", key, value) for key in sorted(keys)
                for value in KEYS[("style", key)].values]
    # the words of what was found, and the fillers, are all the thing may hold (one more
    # word when pointed at: "what I said about tables in reports")
    spans = [(s.start, s.end) for s in found] + [
        m.span() for key in keys for m in gates.STYLE_CUES[key].finditer(thing)]
    rest = [w for m in _WORD_RE.finditer(thing)
            if not any(a <= m.start() < b for a, b in spans)
            and (w := m.group().lower().strip(".")) not in _FILLER]
    if not out or len(rest) > (1 if pointing else 0):
        return []
    if not pointing:
        out = [t for t in out if t[2] != BANNED and t not in _LEAVING_OUT]
    return [t for t in dict.fromkeys(out) if check(*t) is None]


def _slot_triples(slot: slots.Slot, sentence: str, message_tools: Iterable[str]
                  ) -> list[Triple]:
    if slot.kind == "language":
        return [("style", "language", slot.value)]
    if slot.kind == "channel":
        return [("channel", "primary", slot.value)]
    if slot.kind == "veto":
        return [("veto", slot.value, BANNED)]
    category = tool_values.key_of(slot.value, set(message_tools), sentence)
    return [("tooling", category, slot.value)] if category is not None else []


def _keys_named(thing: str) -> list[str]:
    """The enumerated style keys whose words the thing holds ("emojis", "the length")."""
    return [key for key, cue in gates.STYLE_CUES.items()
            if ("style", key) in KEYS and KEYS[("style", key)].values and cue.search(thing)]
