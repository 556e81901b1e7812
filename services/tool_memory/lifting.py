"""What the user says to lift a rule they made: "You can email Sarah again", "Forget what I said
about emailing Sarah", "Scratch the rule about sudo", "Du darfst Sarah wieder mailen", "Tu
peux de nouveau écrire à Sarah", "Ya puedes volver a escribir a Sarah".

A rule the user made in words ("Never email Sarah") is pinned into every prompt that may use
its tool; without this, words could never take it back, only `memory.tool_rule_delete`. A
lift names what the rule was about, not its tool, so it is matched on words: it removes the
user's own captured edicts whose text holds every word the lift names (in some form: "emailing"
finds "email", "mailen" finds "Mails", "écrire" finds "écris"), and nothing when no rule holds
them all ("you can email Tom again" leaves "Never email Sarah").

Built to miss, like the edicts: an invented lift would drop a rule the user relies on. So a
lift must say that a ban is over, in so many words: "again" ("you can email Sarah" alone may
answer a question about ability), or a frame pointing at the rule or at what the user said
("forget what I said about ...", "scratch the rule about ..."). A question, a condition
("you can email Sarah again once the contract is signed") or a word that keeps a limit
("only", "except", "but not") lifts nothing. Generic verbs ("use", "run", "send") are not
words a rule must hold: "feel free to use sudo again" finds "Don't run shell commands with
sudo". A way of reaching someone is ("you can write to Sarah again" does not lift "Never call
Sarah").

Pure and cheap: most messages fail a substring gate first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_I = re.IGNORECASE
_LEAD = r"^(?:(?:ok|okay|so|and|actually|also|oh|well|alright|please|update|fyi)[\s,:]+)*"
#: pointing at the rule or at what the user said: the rest is what it was about
_POINTING_RE: Final = re.compile(
    _LEAD + r"(?:forget|scratch|ignore|drop|disregard|delete|remove|cancel|lift|never\s+mind)"
    r"\s+(?:(?:what|everything)\s+i\s+(?:said|told\s+you|wrote)|my\s+(?:earlier\s+|old\s+)?"
    r"(?:rule|request|instruction|ban)|the\s+(?:rule|ban))\s+(?:about|on|for|against|"
    r"regarding|re)\s+(?P<what>.+)$", _I)
#: a permission given back: "you can ... again", "it's fine to ... again"
_AGAIN_RE: Final = re.compile(
    _LEAD + r"(?:you\s+(?:can|may)|you\s+are\s+allowed\s+to|you're\s+allowed\s+to|"
    r"it'?s\s+(?:ok|okay|fine|alright)\s+to|it\s+is\s+(?:ok|okay|fine)\s+to|feel\s+free\s+to|"
    r"go\s+ahead\s+and)\s+(?P<what>.+?)\s+again(?:\s+(?:now|from\s+now\s+on|too|as\s+well))?$",
    _I)
_GERMAN_RE: Final = re.compile(
    _LEAD + r"(?:du\s+darfst|du\s+kannst|sie\s+dürfen|sie\s+können)\s+(?P<what>.*\bwieder\b.*)$",
    _I)
_FRENCH_RE: Final = re.compile(
    _LEAD + r"(?:tu\s+peux|vous\s+pouvez)\s+(?:de\s+nouveau|à\s+nouveau|encore)\s+(?P<what>.+)$",
    _I)
_SPANISH_RE: Final = re.compile(
    _LEAD + r"(?:ya\s+)?(?:puedes|puede|pueden)\s+volver\s+a\s+(?P<what>.+)$", _I)
_FRAMES: Final = (_POINTING_RE, _AGAIN_RE, _GERMAN_RE, _FRENCH_RE, _SPANISH_RE)
#: words that keep a limit or set a condition: such a sentence lifts nothing
_LIMITED_RE: Final = re.compile(
    r"\b(?:only|just\s+once|except|unless|but\s+not|if|once|when|after|until|as\s+long\s+as|"
    r"nur|außer|wenn|sobald|seulement|sauf|si|quand|solo|sólo|excepto|si|cuando)\b", _I)
_GATE: Final = ("again", "forget", "scratch", "rule", "ignore", "wieder", "nouveau",
                "volver", "never mind", "disregard", "drop", "delete", "remove", "cancel")
_WORD_RE: Final = re.compile(r"[^\W\d_][\w-]*")
#: words a lift may hold that a rule need not: articles, pronouns, the lift's own words, and
#: generic verbs (the rule may say "run" where the lift says "use")
_STOP: Final = frozenset("""
a an the to at in on of for with about by from my your our his her their this that these those
it its me him them us you i we not never don t no any some all again anymore now please
use using used run running do doing make making send sending go get put take let
der die das den dem des ein eine einen mir mich dir dich ihm ihr ihnen wieder nicht nie
benutzen nutzen verwenden machen
le la les l n d j qu un une des de du à au aux me te lui leur nouveau encore pas jamais
utiliser
el la los las un una de del a al me te le les volver nunca usar
""".split())
#: the fewest letters two forms of a word share at their beginning (shorter words: whole)
_MIN_STEM: Final = 4


@dataclass(frozen=True, slots=True)
class Lift:
    """A sentence that lifts rules, and the words a rule must hold all of (in some form) to be
    lifted."""

    sentence: str
    words: tuple[str, ...]


def lifts(text: str) -> list[Lift]:
    """The lifts the user's message makes, in order (none for most messages)."""
    low = text.lower()
    if not any(word in low for word in _GATE):
        return []
    out = []
    for sentence in _SENTENCE_RE.split(text.translate(_QUOTES)):
        core = sentence.strip(" \t\n.!,;:")
        if not core or core.endswith("?"):
            continue
        for frame in _FRAMES:
            m = frame.match(core)
            if m is None:
                continue
            what = m.group("what")
            if _LIMITED_RE.search(what):
                break  # a condition or a limit: the ban is not simply over
            words = tuple(dict.fromkeys(
                w for w in (w.lower() for w in _WORD_RE.findall(what)) if w not in _STOP))
            if words:
                out.append(Lift(core, words))
            break
    return out


def lifted(lift: Lift, rule_text: str) -> bool:
    """Whether the rule's text holds every word the lift names, in some form."""
    held = {w.lower() for w in _WORD_RE.findall(rule_text.translate(_QUOTES))}
    return all(any(_same(word, other) for other in held) for word in lift.words)


def _same(a: str, b: str) -> bool:
    """The same word but for its ending ("email" and "emailing", "mailen" and "Mails", "écrire"
    and "écris"): a common beginning of at least four letters that leaves at most two of the
    shorter word."""
    if a == b:
        return True
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    return common >= max(_MIN_STEM, min(len(a), len(b)) - 2)


_SENTENCE_RE: Final = re.compile(r"(?<=[.!?;])\s+|\n+")
_QUOTES: Final = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
