"""What the user says to lift a rule they made: "You can email Sarah again", "Forget what I said
about emailing Sarah", "Scratch the rule about sudo", "Du darfst Sarah wieder mailen", "Tu
peux de nouveau écrire à Sarah", "Ya puedes volver a escribir a Sarah".

A rule the user made in words ("Never email Sarah") is pinned into every prompt that may use
its tool; without this, words could never take it back, only `memory.tool_rule_delete`. A
lift names what the rule was about, not its tool, so it is matched on words, both ways: every
word the lift names must be in the rule (in some form: "emailing" is "email", "mailen" is
"Mails", "écrire" is "écris"), and the rule may hold nothing the lift leaves out that could
make it another rule: every name in it ("Never email Sarah or Tom" is not lifted by "you can
email Sarah again"), no one else's ("Never email Sarah's manager"), and at most a few other
words when the lift points at the rule ("scratch the rule about sudo" finds "Don't run shell
commands with sudo"), two when it only gives a permission back ("you can email Sarah again"
finds "Never email Sarah without asking me first").

Built to miss, like the edicts: a wrong lift drops a rule the user relies on, which is worse
than a rule kept. So a lift says that a ban is over in so many words:
- pointing at the rule or at what the user said ("forget what I said about ...", "scratch the
  rule about ...", "lift the ban on ...");
- or giving a permission back with "again" (or "wieder", "de nouveau", "volver a") about a
  named someone or something ("you can email Sarah again", "it's fine to book Ryanair
  again"). "You can run the tests again", "go ahead and deploy again" and "you can email her
  again" say a task may be retried, or name no one, and lift nothing.
A question, a negation ("you can never email Sarah again"), a condition ("... again once the
contract is signed"), a kept limit ("only on Mondays") lift nothing, nor does a ban said in the
same breath ("forget what I said about Sarah, never email her before 9"). A lift is matched
against the rules as they stood before its turn, so a rule said beside it stays. E-mail
addresses and links in a rule are the name's, not words of their own.

Pure and cheap: most messages fail a substring gate first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from services.tool_memory.capture import NOT_OWN_WORDS_RE as _NOT_OWN_WORDS_RE

_I = re.IGNORECASE
_LEAD = r"^(?:(?:ok|okay|so|and|actually|also|oh|well|alright|please|update|fyi)[\s,:]+)*"
#: pointing at the rule or at what the user said: the rest is what it was about
_POINTING_RE: Final = re.compile(
    _LEAD + r"(?:forget|scratch|ignore|disregard|drop|lift|never\s+mind)\s+(?:(?:what|everything)"
    r"\s+i\s+(?:said|told\s+you|wrote)|my\s+(?:earlier\s+|old\s+)?(?:rule|ban|instruction)|"
    r"the\s+(?:rule|ban))\s+(?:about|on|for|against|regarding|re)\s+(?P<what>[^,;:\u2014\u2013]+)"
    r"(?P<rest>.*)$", _I)
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
    _LEAD + r"(?:tu\s+peux|vous\s+pouvez)\s+(?:de\s+nouveau|à\s+nouveau)\s+(?P<what>.+)$", _I)
_SPANISH_RE: Final = re.compile(
    _LEAD + r"(?:ya\s+)?(?:puedes|puede|pueden)\s+volver\s+a\s+(?P<what>.+)$", _I)
_PERMISSIONS: Final = (_AGAIN_RE, _GERMAN_RE, _FRENCH_RE, _SPANISH_RE)
#: words that keep a limit or set a condition: such a sentence lifts nothing
_LIMITED_RE: Final = re.compile(
    r"\b(?:only|just\s+once|except|unless|but\s+not|if|once|when|after|until|as\s+long\s+as|"
    r"nur|außer|wenn|sobald|seulement|sauf|si|quand|solo|sólo|excepto|cuando)\b", _I)
#: a negation: a permission with one is a ban ("you can never email Sarah again"), and a
#: pointing lift followed by one says a new ban beside it
_NEGATION_RE: Final = re.compile(
    r"n't\b|\b(?:never|not|no|nie|nicht|kein\w*|jamais|pas|ne|nunca)\b", _I)
_GATE: Final = ("again", "forget", "scratch", "rule", "ignore", "wieder", "nouveau",
                "volver", "never mind", "disregard", "drop", "lift", "ban")
_WORD_RE: Final = re.compile(r"[^\W\d_][\w-]*")
#: a name: a capitalised word not opening its text ("Sarah", "Ryanair")
_NAME_RE: Final = re.compile(r"(?<=[\w,;:] )(?-i:[A-ZÀ-ÖØ-Þ][\w-]+)")
#: someone else's: "Sarah's manager"
_POSSESSIVE_RE: Final = re.compile(r"(?-i:[A-ZÀ-ÖØ-Þ][\w-]+)'s\b")
#: an address or a link in a rule belongs to the name beside it
_ADDRESS_RE: Final = re.compile(r"\S+@\S+|https?://\S+|www\.\S+")
#: words a lift may hold that a rule need not, and that a rule may hold beyond a lift:
#: articles, pronouns, negations, the lift's own words, and generic verbs (the rule may say
#: "run" where the lift says "use")
_STOP: Final = frozenset("""
a an the to at in on of for with about by from my your our his her their this that these those
it its me him them us you i we not never don t no any some all again anymore now please ever
use using used run running do doing make making send sending go get put take let without
der die das den dem des ein eine einen mir mich dir dich ihm ihr ihnen wieder nicht nie
benutzen nutzen verwenden machen keine kein
le la les l n d j qu un une des de du à au aux me te lui leur nouveau pas jamais ne plus
utiliser
el la los las un una de del a al me te le les volver nunca usar
""".split())
#: how many words a rule may hold beyond what a lift names: a few when the lift points at the
#: rule, two (a qualifier: "on her mobile", "without asking me first") when it gives a
#: permission back
_POINTED_EXTRA: Final = 3
_PERMITTED_EXTRA: Final = 2
#: endings two forms of one word may differ by ("email"/"emailing", "mailen"/"Mails")
_ENDINGS: Final = ("ing", "es", "ed", "en", "er", "re", "ir", "ar", "as", "ez", "s", "e", "d",
                   "n", "r")
#: the fewest letters a word keeps when its ending is taken off
_MIN_STEM: Final = 4


@dataclass(frozen=True, slots=True)
class Lift:
    """A sentence that lifts rules, the words a rule must hold all of (in some form) to be
    lifted, and whether it points at the rule (which may then hold a few more words)."""

    sentence: str
    words: tuple[str, ...]
    pointed: bool


def lifts(text: str) -> list[Lift]:
    """The lifts the user's message makes, in order (none for most messages)."""
    low = text.lower()
    if not any(word in low for word in _GATE):
        return []
    out = []
    own = _NOT_OWN_WORDS_RE.sub(" ", text)  # fenced code and quoted lines are not the user's
    for sentence in _SENTENCE_RE.split(own.translate(_QUOTES)):
        core = sentence.strip(" \t\n.!,;:")
        if not core or core.endswith("?"):
            continue
        lift = _pointing(core) or _permission(core)
        if lift is not None:
            out.append(lift)
    return out


def _pointing(core: str) -> Lift | None:
    m = _POINTING_RE.match(core)
    if m is None or _LIMITED_RE.search(m.group("what")) or _NEGATION_RE.search(m.group("rest")):
        return None
    words = _content(m.group("what"))
    return Lift(core, words, pointed=True) if words else None


def _permission(core: str) -> Lift | None:
    for frame in _PERMISSIONS:
        m = frame.match(core)
        if m is None:
            continue
        what = m.group("what")
        if _LIMITED_RE.search(what) or _NEGATION_RE.search(core) or not _NAME_RE.search(
                "x " + what):  # (a name may open what is named: "Sarah wieder mailen")
            return None  # a limit, a ban, or nothing named: a task retried
        words = _content(what)
        return Lift(core, words, pointed=False) if words else None
    return None


def lifted(lift: Lift, rule_text: str) -> bool:
    """Whether the rule is the one the lift takes back: it holds every word the lift names,
    every name in it is one of those, it is about no one else's, and it holds few other words
    (two, for a permission given back)."""
    text = _ADDRESS_RE.sub(" ", rule_text.translate(_QUOTES))
    held = _content(text)
    if not all(any(_same(word, other) for other in held) for word in lift.words):
        return False
    if any(_stem(m.group().lower()[:-2]) in {_stem(w) for w in lift.words}
           for m in _POSSESSIVE_RE.finditer(text)):
        return False  # "Never email Sarah's manager" is about the manager
    names = {_stem(n.lower()) for n in _NAME_RE.findall(" " + text)}
    if not names <= {_stem(w) for w in lift.words}:
        return False  # "Never email Sarah or Tom": Tom was not named
    extra = [w for w in held if not any(_same(w, word) for word in lift.words)]
    return len(extra) <= (_POINTED_EXTRA if lift.pointed else _PERMITTED_EXTRA)


def _content(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(
        w for w in (w.lower() for w in _WORD_RE.findall(text)) if w not in _STOP
        and len(w) > 1))


def _stem(word: str) -> str:
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= _MIN_STEM:
            return word[: -len(ending)]
    return word


def _same(a: str, b: str) -> bool:
    """One word in two forms ("email" and "emailing", "mailen" and "mails", "écrire" and
    "écris"); not two words that share a beginning ("product" and "production")."""
    return a == b or _stem(a) == _stem(b)


_SENTENCE_RE: Final = re.compile(r"(?<=[.!?;])\s+|\n+")
_QUOTES: Final = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
