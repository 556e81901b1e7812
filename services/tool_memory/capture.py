"""Tool-scoped rules captured from one turn without an LLM: the user's edicts, repeated failures.

Two things in a turn say how the agent should use its tools next time:

- *Edicts*: a sentence of the user's message that forbids something ("Never email Sarah",
  "Don't run shell commands with sudo", "Stop using the browser for that") becomes a Critical
  rule on the tool it is about. Only imperatives count, so the sentence must open with the
  prohibition, after at most some filler ("please", "ok,", "also", "from now on", ...):
  "I don't know why", "you never listen" and "I want to stop working on this" state nothing,
  because their subject is a person, not the agent. Also not edicts: "Stop." and "stop it"
  ("stop" must take an -ing verb, or it is an interruption, not a standing rule); "never mind",
  "don't worry", "don't know" and the other verbs of an elliptical first person ("(I) don't
  think so", "(I've) never heard of it"); questions ("don't you have a shell tool?"). A missed
  edict costs one rule the user can repeat; an invented one pins a wrong constraint above every
  later instruction, so the rules are built to miss. Spanish, German and French prohibitions
  are read as narrowly (`services.tool_memory.other_languages`).
- *Repeated failures*: a tool that failed twice or more in one turn gets a Normal rule saying
  so, which recall can surface before the agent tries the same call again. One failure is noise.

Sentences split on . ! ? ; (and the ellipsis) only before whitespace or the end of the text, and
on line breaks, so "sarah@example.com", "https://x.io/a?b=1", "3.5" and "v1.2.3", which have no
space after their dots, stay whole. "e.g.", "i.e.", "Dr.", "Mr.", "vs." and similar never end a
sentence; "etc.", "Inc.", "a.m." end one only before a capital letter, since they often close
one. A single capital and a dot ("Ada K. Lovelace", "plan B.") is not special-cased: a sentence
that ends in a letter is as common as a middle initial. Fenced code and `>` quoted lines are
not the user's own words and are skipped.

Rule ids are derived from what the rule says, not when: the same edict (compared after
`normalise_body`: case, typographic quotes, spacing and final punctuation do not count) on the
same tool gets the same id in every turn, and a tool's repeated-failure rule has one id per
(tenant, user, tool), so the service updates a rule instead of piling up copies.

Everything here is pure (no clock, no I/O) and cheap: this runs on every turn, so a message is
first gated on a substring check ("never", "don", "stop", "do not", or the other languages'
words), which most messages fail, and every pattern is compiled at import.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from habitus.events.ingest import TurnRecorded
from habitus.ids import derived_event_id
from habitus.prompt import single_line
from services.tool_memory.other_languages import is_prohibition, may_prohibit
from services.tool_memory.tool_nouns import PADDED_NOUNS, names_a_kind_of_tool, words

#: a rule's body is at most this long (the prompt block pins every Critical rule)
MAX_BODY_CHARS = 240
#: a cut body keeps at least this much of its text when cut on a word boundary
_MIN_WORD_CUT = MAX_BODY_CHARS // 2
#: failures of one tool in one turn that make a rule
FAILURES_FOR_RULE = 2
ANY_TOOL = "*"

CRITICAL = "critical"
NORMAL = "normal"
USER_EXPLICIT = "user_explicit"
POST_TURN = "post_turn"
EDICT_TAGS = ("user-edict",)
FAILURE_TAGS = ("repeated-failure",)


@dataclass(frozen=True, slots=True)
class CapturedRule:
    """One tool-scoped rule learned from a turn; `rule_id` makes a re-capture an update."""

    rule_id: str
    tool_name: str  # trimmed, lower-case; "*" = every tool
    rule: str
    priority: str  # "critical" | "normal"
    source: str  # "user_explicit" | "post_turn"
    tags: tuple[str, ...]


# --------------------------------------------------------------------------- normalising

#: typographic apostrophes and quotes -> ASCII, one character for one so offsets still match
_QUOTES = str.maketrans({
    "\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2032": "'", "\u201b": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"',
})
_SPACE_RE = re.compile(r"\s+")
_TRAILING_PUNCT_RE = re.compile(r"[\s.!?;:,\u2026]+$")


def normalise_tool(name: str) -> str:
    """A tool's name as rules are keyed by it: trimmed and lower-case ("  Shell " -> "shell")."""
    return name.strip().lower()


def normalise_body(text: str) -> str:
    """The body as compared for dedupe: a curly "Don't  email Bob." equals "don't email bob".

    Case, typographic quotes, runs of whitespace and the final punctuation are how it was
    typed, not what it says.
    """
    folded = _SPACE_RE.sub(" ", text.translate(_QUOTES).casefold()).strip()
    return _TRAILING_PUNCT_RE.sub("", folded)


def _clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: cut at the last space that keeps at least half of
    it, else mid-word, and marked with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space >= min(_MIN_WORD_CUT, limit // 2) and space > 0:
        head = head[:space]
    return head.rstrip() + "\u2026"


# --------------------------------------------------------------------------- sentences

_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
#: a run of terminators (with closing quotes or brackets) before whitespace or the end; or a
#: line break. `stop` is the terminator run, so "etc." can be told from "etc.!".
_BOUNDARY_RE = re.compile(
    r"(?P<stop>[.!?;\u2026]+)[\"')\]\u201d\u2019]*(?=\s|$)|[" + _LINE_BREAKS + "]"
)
#: the word before a dot: "e.g", "Dr", "etc" (dots inside it are part of it)
_WORD_BEFORE_DOT_RE = re.compile(r"(?:^|[^\w.])([\w.]+)$")
#: never end a sentence ("e.g." is followed by an example, "Dr." by a name)
_ABBREVIATIONS = frozenset(
    "e.g i.e eg ie dr mr mrs ms prof vs cf approx st jr sr fig viz resp incl esp".split()
)
#: end a sentence only when a capital letter follows, since they often close one
_ABBREVIATIONS_AT_END = frozenset("etc inc ltd co corp a.m p.m".split())
#: text that is not the user's own voice: fenced code and `>` quoted lines
NOT_OWN_WORDS_RE = re.compile(r"(?:```|~~~)[\s\S]*?(?:```|~~~|\Z)|(?m:^[ \t]*>.*$)")
#: a list marker opening a sentence ("- ", "* ", "1) ") is not its text ("1. " splits off alone)
_LEADING_MARKER_RE = re.compile(r"^(?:[-*+\u2022]+\s+|\d{1,3}\)\s+)")


def _blank(m: re.Match[str]) -> str:
    # keep offsets: a masked region becomes spaces (its line breaks too, so it splits nothing)
    return " " * len(m.group())


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the lone "." at `dot` closes an abbreviation rather than a sentence."""
    tail = _WORD_BEFORE_DOT_RE.search(text, max(0, dot - 12), dot)
    if tail is None:
        return False
    word = tail.group(1).lower()
    if word in _ABBREVIATIONS:
        return True
    if word in _ABBREVIATIONS_AT_END:
        following = text[dot + 1 : dot + 40].lstrip()
        return not following[:1].isupper()
    return False


def _spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each non-blank sentence of `text`; a ";" is left out of its sentence."""
    out: list[tuple[int, int]] = []
    start = 0
    for m in _BOUNDARY_RE.finditer(text):
        stop = m.group("stop")
        if stop == "." and _is_abbreviation(text, m.start()):
            continue
        end = m.start() if stop is None or stop == ";" else m.end()
        if text[start:end].strip():
            out.append((start, end))
        start = m.end()
    if text[start:].strip():
        out.append((start, len(text)))
    return out


def _clean(sentence: str) -> str:
    return _LEADING_MARKER_RE.sub("", _SPACE_RE.sub(" ", sentence).strip()).strip()


def sentences(text: str) -> list[str]:
    """The sentences of `text`, trimmed, each keeping its . ! or ? as written (a ";" that
    separates two clauses is dropped). E-mail addresses, URLs, decimals, versions and the common
    abbreviations stay inside their sentence; fenced code and quoted lines are left out."""
    if "```" in text or "~~~" in text or ">" in text:
        text = NOT_OWN_WORDS_RE.sub(_blank, text)
    return [s for s in (_clean(text[a:b]) for a, b in _spans(text)) if s]


# --------------------------------------------------------------------------- edicts

#: filler that may open an imperative: "Ok, please never ...", "And from now on, don't ..."
_LEAD_INS = (
    r"please|pls|plz|kindly|and|also|but|just|ok|okay|k|so|oh|hey|hi|btw|fyi|then|now|again|"
    r"seriously|honestly|important|note|remember|reminder|"
    r"from\s+now\s+on|going\s+forward|in\s+(?:the\s+)?future|by\s+the\s+way|"
    r"one\s+more\s+thing|for\s+the\s+record|i\s+said|i\s+told\s+you|(?:as|like)\s+i\s+said|"
    r"i\s+repeat"
)
_EDICT_RE = re.compile(
    # possessive: a lead-in is never a trigger word, so giving one back can never help (and a
    # line of "and and and ..." must not cost exponential time)
    rf"(?:(?:{_LEAD_INS})\b[\s,:\-\u2013\u2014]+)*+"
    r"(?:"
    r"(?P<neg>(?:(?:make|be)\s+sure(?:\s+(?:to|you))?\s+)?never|don'?t|do\s+not|"
    r"(?:you\s+)?(?:should|must)\s+(?:never|not)|"
    # the speaker's wish as the order: "I never want you to reply-all", "I don't want you to
    # book Ryanair"
    r"i\s+(?:never|don'?t|do\s+not)\s+want\s+you\s+to(?:\s+ever)?),?\s+"
    r"(?P<next>[^\W\d_][\w'-]*)"
    r"|stop\s+(?P<ing>(?:[^\W\d_]+-)?[^\W\d_]+ing)\b"
    # "avoid booking meetings before 9": an order only about a kind of tool's work (checked
    # below), since "avoid using jargon" is a way of answering
    r"|avoid\s+(?P<avoid>[^\W\d_]+ing)\b"
    # a standing obligation: "always cc my manager", "make sure to always run the tests"
    # ("make sure you check the dates" is about this task: no rule)
    r"|(?P<pos>(?:(?:make|be)\s+sure(?:\s+(?:to|you))?\s+)?always)\s+"
    r"(?P<pnext>[^\W\d_][\w'-]*)"
    r")",
    re.IGNORECASE,
)
#: after "never"/"don't": an elliptical first person or a pronoun subject, not an order
#: ("(I) don't know", "never mind", "don't you think?", "(I) don't have time"), or an
#: encouragement ("don't forget to ...", "don't hesitate to ..."); "don't you dare" is kept
_NOT_AN_ORDER = frozenset(
    """know think care understand remember recall believe agree doubt feel mind worry want
    like see mean again before i i'm we they he she it you have need forget hesitate
    did was were would could be""".split()
)
#: "never" + a past participle is narrative ("(I've) never heard of it", "never used it")
_PARTICIPLES = frozenset(
    """heard seen been done had got gotten gone known thought taken given written felt found
    met told said made bought brought understood eaten won lost tried""".split()
)
#: base verbs that end in -ed, so are no participle ("never need", "never embed secrets")
_ED_VERBS = frozenset(
    "need feed heed speed bleed breed seed shed wed proceed succeed exceed embed shred".split()
)
#: -ing words that are no verb: "stop everything" is no "stop <verb>ing"
_ING_NOUNS = frozenset(
    """thing things nothing something anything everything string spring during morning evening
    king ring wing ceiling""".split()
)
#: a trailing tag keeps an order an order: "never email Sarah, ok?"
_TAG_QUESTION_RE = re.compile(
    r",\s*(?:ok|okay|alright|all\s+right|got\s+it|understood|yeah|please)\s*\?+$", re.IGNORECASE
)
_DO_NOT_RE = re.compile(r"\bdo\s+not\b")
#: after "always": words that make no order of it ("always happy to help", "always the same"),
#: and the verbs of how to answer ("always answer in German", "always use tables", "always keep
#: it short"): those are the learning cache's style facets, which the user can correct or
#: forget; a rule pinned beside them would contradict the correction
_NOT_AN_OBLIGATION = frozenset(
    """the a an so very too happy glad good nice fun true right wrong same been was is are be
    my your our this that there here has have had works worked breaks fails crashes answer
    answers reply respond write use keep include explain speak talk format give show start end
    add make put say call address sound""".split()
)


def _gate(low: str) -> bool:
    """Cheap test that `low` (lower-cased) may hold an edict (a prohibition, or an obligation
    with "always"); "don" also finds a curly "don't"."""
    return (
        "never" in low
        or "don" in low
        or "stop" in low
        or ("not" in low and _DO_NOT_RE.search(low) is not None)
        or may_prohibit(low)
        or "always" in low
        or "avoid" in low
        # an order after a condition needs no verb of its own ("..., jamais avant 10h")
        or (_CONDITION_RE.match(low) is not None and _ELLIPTICAL_RE.search(low) is not None)
    )


#: an order about how to answer ("never use emojis", "don't answer in German", "stop
#: apologizing"): the learning cache's style facet or veto, which the user can correct or
#: forget ("emojis are fine actually"); a rule pinned beside it would contradict the correction
_ABOUT_ANSWERS_RE = re.compile(
    r"\b(?:never|don'?t|do\s+not|stop|always)\s+(?:(?:ever|again)\s+)?(?:"
    r"answer\w*|repl(?:y|ies|ying)(?!-all)|respond\w*|apologi[sz]\w*|explain\w*|sound\w*|"
    r"(?:use|using|include|including|add|adding|put|putting)\s+(?:any\s+|the\s+|so\s+many\s+|"
    r"more\s+)?(?:emojis?|emoticons|bullet\w*|tables?|markdown|headings?|headers|jargon|"
    r"disclaimers?|caveats?|numbered\s+lists?|code\s+blocks?|filler|fluff))\b",
    re.IGNORECASE,
)


#: a condition before the order: "When you book hotels, always pick free cancellation",
#: "Wenn du Meetings planst, ...", "Quand tu réserves un hôtel, ...", "Cuando agendes ..."
_CONDITION_RE = re.compile(
    r"^(?:when|whenever|if|every\s+time|(?:immer\s+)?wenn|jedes\s+mal\s+wenn|falls|quand|"
    r"lorsque|lorsqu'|chaque\s+fois\s+que|si|cuando|siempre\s+que)\s*"
    r"(?:you|i|we|du|sie|wir|ich|tu|vous|je|nous|on|t'|m')?\b[^,.;]{2,80},\s*",
    re.IGNORECASE)
#: after a condition that names a kind of tool, an order needs no verb of its own: "When you
#: schedule meetings, never before 10am", "Wenn du Meetings planst, nie vor 10 Uhr"
_ELLIPTICAL_RE = re.compile(
    r"\b(?:never|nie|niemals|jamais|nunca|always|immer|toujours|siempre)\s+"
    # what the order is about, without a verb: a time or a way ("never before 10am", "immer
    # auf Deutsch"); "never heard back", "always the same page loads" say what happens
    r"(?:before|after|on|at|in|during|outside|past|later|earlier|without|with|via|vor|nach|"
    r"am|an|auf|mit|ohne|außerhalb|avant|après|le|en|sur|sans|avec|pendant|antes|después|"
    r"los|las|el|sin|con|por|fuera)\b", re.IGNORECASE)
#: obligations that are ways of answering ("always use bullet points") unless a kind of tool
#: is named ("always use my work email to send invoices")
_TOOL_OBLIGATIONS = frozenset("use include add put write keep give show start end make".split())


def _is_edict(sentence: str) -> bool:
    """Whether one cleaned sentence (ASCII apostrophes) is an imperative prohibition, or a
    standing obligation ("always ..."), about what the agent does rather than how it answers;
    an order after a condition counts ("When you book hotels, always pick ...")."""
    if _ABOUT_ANSWERS_RE.search(sentence) and not names_a_kind_of_tool(sentence):
        return False  # "never include tables in emails to clients" is the e-mail tool's rule
    condition = _CONDITION_RE.match(sentence)
    if condition is not None:
        if (_ELLIPTICAL_RE.match(sentence, condition.end())
                and names_a_kind_of_tool(condition.group())):
            return not sentence.endswith("?")
        sentence = sentence[condition.end():]
    m = _EDICT_RE.match(sentence)
    if m is None:
        return is_prohibition(sentence, names_a_kind_of_tool)
    if sentence.endswith("?") and _TAG_QUESTION_RE.search(sentence) is None:
        return False
    if m.group("avoid") is not None:
        return m.group("avoid").lower() not in _ING_NOUNS and names_a_kind_of_tool(sentence)
    ing = m.group("ing")
    if ing is not None:
        return ing.lower() not in _ING_NOUNS
    obliged = m.group("pnext")
    if obliged is not None:
        word = obliged.lower()
        if word in _TOOL_OBLIGATIONS and names_a_kind_of_tool(sentence):
            return True
        return word not in _NOT_AN_ORDER and word not in _NOT_AN_OBLIGATION and not (
            word.endswith("ed") and word not in _ED_VERBS)
    neg = m.group("neg").lower()
    word = m.group("next").lower()
    if word in _NOT_AN_ORDER:
        if word != "you":
            return False
        after = sentence[m.end() :].lstrip().lower()
        return after.startswith(("dare ", "ever "))
    if neg.endswith("never") and (
        word in _PARTICIPLES or (word.endswith("ed") and word not in _ED_VERBS)
    ):
        return False
    return True


def _edict_sentences(text: str) -> list[str]:
    """The edict sentences of `text` as written (apostrophes too), cleaned but not clipped."""
    if not text or not _gate(text.lower()):
        return []
    ascii_text = text.translate(_QUOTES)  # one char for one: spans index both
    if "```" in text or "~~~" in text or ">" in text:
        ascii_text = NOT_OWN_WORDS_RE.sub(_blank, ascii_text)
    out: list[str] = []
    for a, b in _spans(ascii_text):
        candidate = _clean(ascii_text[a:b])
        if candidate and _gate(candidate.lower()) and _is_edict(candidate):
            out.extend(_clean(text[x:y]).rstrip(" ,") for x, y in _clauses(ascii_text, a, b))
    return out


#: where a second prohibition joins the first: "don't post on Slack, and never email my boss"
_JOINED_RE = re.compile(
    r"(?:,\s*|\s+)(?:and|but|or|also)\s+(?:also\s+)?"
    r"(?=(?:never|don'?t|do\s+not|stop\s+[^\W\d_]+ing)\b)",
    re.IGNORECASE,
)


def _clauses(ascii_text: str, a: int, b: int) -> list[tuple[int, int]]:
    """The spans of the prohibitions one edict sentence joins, each its own rule (it may be
    about another tool); a joined part that is no order stays with the part before it."""
    parts: list[tuple[int, int]] = []
    start = a
    for m in _JOINED_RE.finditer(ascii_text, a, b):
        head = _clean(ascii_text[start : m.start()])
        if not head or not _is_edict(head) or not _is_edict(_clean(ascii_text[m.end() : b])):
            continue  # a lead-in ("Also never ..."), or a joined part that is no order
        parts.append((start, m.start()))
        start = m.end()
    parts.append((start, b))
    return parts


def edicts(text: str) -> list[str]:
    """The bodies of the edicts in `text`, in order: each its sentence as written, trimmed,
    at most MAX_BODY_CHARS (cut on a word boundary where one is near)."""
    return [_clip(single_line(s), MAX_BODY_CHARS) for s in _edict_sentences(text)]


# --------------------------------------------------------------------------- tool choice

def choose_tool(sentence: str, tools_called: Sequence[str]) -> str:
    """The tool an edict is about, among those called in its turn (in call order).

    First a tool the sentence names ("send_email", "send email" and "send-email" all name
    `send_email`, as whole words); else one its nouns point to ("email" -> a tool whose name
    contains "mail", "terminal" -> shell/bash/exec/terminal/cmd, ...); else the first tool
    called; else "*" (every tool). A name beats a noun: "use send_email, not gmail_read for
    mail" is about send_email even when gmail_read was called first.
    """
    tools: list[str] = []
    for raw in tools_called:
        tool = normalise_tool(raw)
        if tool and tool not in tools:
            tools.append(tool)
    if not tools:
        return ANY_TOOL
    said = words(sentence.translate(_QUOTES))
    for tool in tools:
        name = words(tool)
        if name.strip() and name in said:
            return tool
    fragments = [frag for nouns, frags in PADDED_NOUNS if any(n in said for n in nouns)
                 for frag in frags]
    if fragments:
        for tool in tools:
            if any(frag in tool for frag in fragments):
                return tool
    return tools[0]


# --------------------------------------------------------------------------- capture


def _failure_body(tool: str, count: int, summary: str | None) -> str:
    tool_label = single_line(tool)
    head = f"{tool_label} failed {count} times in one turn"
    tail = ". Try a different approach before calling it again."
    reason = single_line(summary or "")
    room = MAX_BODY_CHARS - len(head) - len(tail) - len(" ()")
    if reason and room >= 12:
        return f"{head} ({_clip(reason, room)}){tail}"
    return _clip(head + tail, MAX_BODY_CHARS)


def capture(tenant_id: str, user_id: str, turn: TurnRecorded) -> list[CapturedRule]:
    """The rules one turn teaches: its edicts (Critical), then its repeated failures (Normal).

    Each rule_id appears once: an edict said twice in a turn, or two edicts that differ only in
    case or punctuation on one tool, are one rule.
    """
    out: list[CapturedRule] = []
    seen: set[str] = set()
    found = _edict_sentences(turn.user_message)
    if found:
        called = [call.tool_name for call in turn.tool_calls]
        for sentence in found:
            body = _clip(single_line(sentence), MAX_BODY_CHARS)
            tool = choose_tool(sentence, called)
            rule_id = derived_event_id(
                "tool-rule", tenant_id, user_id, tool, normalise_body(body)
            )
            if rule_id in seen:
                continue
            seen.add(rule_id)
            out.append(CapturedRule(rule_id, tool, body, CRITICAL, USER_EXPLICIT, EDICT_TAGS))

    failures: dict[str, list[str | None]] = {}  # tool -> output summaries, in call order
    for call in turn.tool_calls:
        if not call.ok:
            tool = normalise_tool(call.tool_name)
            if tool:
                failures.setdefault(tool, []).append(call.output_summary)
    for tool, summaries in failures.items():
        if len(summaries) < FAILURES_FOR_RULE:
            continue
        rule_id = derived_event_id("tool-rule", tenant_id, user_id, tool, "repeated-failure")
        if rule_id in seen:
            continue
        seen.add(rule_id)
        first = next((s for s in summaries if s and s.strip()), None)
        out.append(
            CapturedRule(
                rule_id, tool, _failure_body(tool, len(summaries), first), NORMAL, POST_TURN,
                FAILURE_TAGS,
            )
        )
    return out
