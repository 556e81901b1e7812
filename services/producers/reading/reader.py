"""Statements a user makes about themselves, read by meaning.

For every clause of the user's own sentences: the gates first (cheap rules; most text stops
here), then the values the vocabulary's gazetteers find in it, then the clause, with its values
replaced by fixed stand-ins (so "we moved to bun" and "we moved to yarn" read alike), goes to
the intent classifier. The label says what is stated; the values fill it. Every clause of a
batch of messages is encoded in one call.

A statement's stance: `declared` when its sentence is framed for good ("from now on",
"always", "ab jetzt", "désormais", "siempre"), `one_off` when a style request is about this
answer only ("shorter", "more detail on step 2"), otherwise `standing`. Identity, tooling,
vetoes and channels are never one-off: "I'm based in Berlin" is not about one answer.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from cachetools import LRUCache

from habitus.events.domain import Stance
from habitus.vocabulary import check, places, tools
from services.producers.reading import (
    answer_language,
    by_words,
    gates,
    homes,
    leading,
    negation,
    retractions,
    slots,
    text,
    tool_values,
)
from services.producers.reading.intents import NONE, Decision, IntentClassifier

_IDENTITY_KINDS = ("name", "preferred_name", "employer", "team", "role", "location", "timezone",
                   "pronouns", "email")
#: identity kinds whose own pattern is the speaker's statement of them, whatever the encoder
#: reads (it has no examples of them): "my pronouns are they/them", "my email is ..."
_SELF_STATED = frozenset({"pronouns", "email"})
_ANCHORING_KINDS = frozenset({*_IDENTITY_KINDS, "language", "channel"})
#: a fragment's label, from the kind of value it holds ("..., in French": `language`)
_FRAGMENT_LABELS = {**dict.fromkeys(_IDENTITY_KINDS, "identity"), "language": "language",
                    "tool": "tooling", "channel": "channel"}
#: the stand-in each kind of value is replaced with before the clause is encoded
_STAND_INS = {"name": "Anna", "preferred_name": "Anna", "employer": "Acme", "team": "sales",
              "role": "engineer", "location": "Paris", "timezone": "CET",
              "language": "English", "tool": "Docker", "channel": "Slack"}
#: a ban: with a format or content thing in the clause, it is a veto whatever else it says
_BAN_RE = re.compile(
    r"\b(?:no|not|never|don't|dont|do\s+not|stop|stopped|quit|avoid|drop|cut|skip|lose|spare|"
    r"without|anymore|no\s+longer|keine?n?|nie|nicht|ohne|mehr|hör\w*\s+auf|vermeide\w*|"
    r"lass\w*|pas|plus|jamais|sans|arrête\w*|évite\w*|sin|nada\s+de|nunca|deja\s+de|"
    r"deje\s+de|dejamos|evita\w*|ya\s+no|"
    # a dislike of what answers do bans it too ("I hate it when you apologize all the time")
    r"hate\s+(?:it\s+)?when|hate\s+how|can'?t\s+stand|cannot\s+stand|enough\s+(?:with|of)|"
    r"allergic\s+to|"
    r"(?:tired|sick)\s+of|hasse\s+es|déteste\s+quand|odio\s+(?:cuando|que))\b",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Statement:
    """One preference the user stated: `<facet_class>/<key>=<value>`, how and where."""

    facet_class: str
    key: str
    value: str
    sentence: str
    stance: Stance

    @property
    def standing(self) -> bool:
        return self.stance in (Stance.STANDING, Stance.DECLARED)


@dataclass(frozen=True, slots=True)
class _Pending:
    message: int
    clause: text.Clause
    found: tuple[slots.Slot, ...]
    stance: Stance
    #: holds a word a preference is made of; without one a clause only continues another
    anchored: bool = True
    #: bans a format or content thing ("no nested bullets"): a veto
    bans: bool = False
    #: every tool the message names: a tool of two categories takes a neighbour's
    message_tools: frozenset[str] = frozenset()
    #: what a retraction takes back (`retractions.taken_back`): read as denials, not encoded
    denies: tuple[tuple[str, str, str], ...] = ()


def delexicalise(clause: str, found: Sequence[slots.Slot]) -> str:
    """The clause with each value replaced by its kind's stand-in."""
    out, pos = [], 0
    for slot in sorted(found, key=lambda s: s.start):
        stand_in = _STAND_INS.get(slot.kind)
        if stand_in is None or slot.start < pos:
            continue
        out.append(clause[pos:slot.start])
        out.append(stand_in)
        pos = slot.end
    out.append(clause[pos:])
    return "".join(out)


def _prepared(example: str) -> str:
    """A bank example as the classifier sees clauses: values replaced by stand-ins."""
    return delexicalise(example, slots.find(example, example))


def _sentence_gate(sentence: str) -> bool:
    """Whether a sentence may state the user's own preference at all."""
    if gates.is_question(sentence):
        return False
    core = gates.polite_request(sentence) or sentence  # "could you maybe ..." is polite
    return not (gates.about_someone_else(sentence) or gates.hypothetical(core))


_CONTRAST_RE = re.compile(r"^(?:not|nicht|pas|rather\s+than|instead\s+of|statt|plutôt\s+que|"
                          r"en\s+vez\s+de)\s+\S+$", re.IGNORECASE)
_FILLER_WORDS = frozenset(
    """mostly mainly also too and with plus on in en et y und mit avec con some a bit the for
    at chez bei para en sur auf a à el la le der die das backend frontend api server site app
    apps""".split())


#: a tool named as the place of what is banned ("no semicolons in JS", "keine Kommentare in
#: Python"), right before it
_IN_TOOL_RE = re.compile(r"\b(?:in|im|en|dans|para)\s+(?:the\s+|my\s+|our\s+)?$",
                         re.IGNORECASE)


def _tool_banned(pending: _Pending) -> bool:
    clause = pending.clause.text
    return any(s.kind == "tool" and gates.TOOL_BAN_RE.search(clause[max(0, s.start - 40):s.start])
               for s in pending.found)


#: "deno for scripts", "astro for the marketing site": a tool and what it is used for
_TOOL_FOR_RE = re.compile(r"^[\w.#+-]+(?:\s+[\w.#+-]+)?\s+(?:for|für|pour|para)\s", re.IGNORECASE)
_PURPOSE_RE = re.compile(r"\b(?:for|für|pour|para)\s+[\w\s'-]{0,40}$", re.IGNORECASE)


def _fragment(pending: _Pending) -> bool:
    """A clause that is little more than values ("TypeScript with pnpm", "mostly C#", "redis
    for caching"): it continues the clause before it rather than stating anything itself."""
    if not pending.found:
        return False
    rest = delexicalise(pending.clause.text, pending.found)
    for stand_in in _STAND_INS.values():
        rest = rest.replace(stand_in, " ")
    rest = _PURPOSE_RE.sub(" ", rest)
    return all(w in _FILLER_WORDS for w in rest.lower().split())


_TEXT_VERB_RE = re.compile(r"texts?", re.IGNORECASE)
#: a dislike whose thing comes in the next clause: "Ich hasse es, wenn du dich entschuldigst"
_DISLIKE_LEAD_RE = re.compile(r"\b(?:i\s+hate\s+it|hasse\s+es|je\s+déteste\s+(?:ça|quand)|"
                              r"odio)\W*$", re.IGNORECASE)


def _disliked_before(clause: str, sentence: str) -> bool:
    at = sentence.find(clause)
    return at > 0 and _DISLIKE_LEAD_RE.search(sentence[:at]) is not None
_DONT_USE_RE = re.compile(r"(?:please\s+)?(?:don't|dont|do\s+not|never)\s+use\b", re.IGNORECASE)
#: a ban on doing something about a tool, not on the tool ("don't explain basic Python",
#: "erklär mir kein Python", "no need to teach me SQL")
#: a tool followed by what is done with it and where: "terraform apply on prod", "git push
#: --force to main" (two words or more, an option, before the clause ends)
_ONE_USE_RE = re.compile(r"^\s+(?:--?\w[\w-]*|[a-z][\w-]*)\s+(?:on|to|in|against|into)\s+\S",
                         re.IGNORECASE)
_NOT_THE_BAN_RE = re.compile(
    r"\b(?:explain\w*|teach\w*|introduc\w*|walk\s+me\s+through|erklär\w*|expliqu\w*|"
    r"explic\w*)\b(?:\s+[\w.']+){0,3}\s+$", re.IGNORECASE)


def _fill(label: str, pending: _Pending) -> list[tuple[str, str, str]]:
    clause = pending.clause.text
    usable = [s for s in pending.found if not negation.negated(clause, s)]
    if "=" in label:
        key, _, value = label.partition("=")
        if gates.states_no_style(key, clause, pending.clause.sentence):
            return []
        turned = gates.polarity(key, value, clause)  # "I don't need the long version"
        # a value turned by the clause's own words ("not so formal") came from the key's
        # words: the turned value's own words are not there to be found
        turned_by_words = turned != value or (
            key == "tone" and turned is not None and gates.register_said_away(turned, clause))
        if turned is None or not gates.states_style(key, clause,
                                                    None if turned_by_words else turned):
            # the encoder read a style statement but named a key the words do not hold:
            # the one key whose words are there, when they alone decide its value
            return by_words.style_or_layout(clause)
        # brevity said beside the key the encoder read ("terse answers with code first"), or
        # a layout beside brevity ("short answers in bullet points"): a clause is read as one
        # key, and the other would be lost
        if key != "verbosity" and gates.TERSE_WORDS.search(clause) and gates.polarity(
                "verbosity", "terse", clause) == "terse":
            return [("style", key, turned), ("style", "verbosity", "terse")]
        if key == "verbosity":
            return [("style", key, turned), *by_words.layout_beside(clause)]
        return [("style", key, turned)]
    if label == "language":
        langs = [s for s in usable if s.kind == "language"
                 and answer_language.asked_for(clause, s, pending.clause.sentence)]
        return [("style", "language", langs[-1].value)] if langs else []
    if label == "identity":
        if gates.converting(clause):
            return []
        return [("identity", s.kind, s.value) for s in usable if s.kind in _IDENTITY_KINDS
                and not (s.kind == "location"
                         and homes.not_their_home(clause, s, pending.clause.sentence))]
    if label == "tooling":
        sentence = pending.clause.sentence.lstrip(" \x00")
        # the task may follow a polite opening: "can you write a SQL query for postgres"
        opens = (sentence.startswith(clause[:20])
                 or (gates.polite_request(sentence) or "").startswith(clause[:20]))
        if opens and gates.imperative(clause):
            return []  # "write a function in Go"; not "we're on Postgres and deploy to AWS"
        sentence_tools = set(pending.message_tools)
        speaker = gates.first_person(clause)
        out = []
        for s in usable:
            if s.kind != "tool" or (
                    not speaker and tool_values.ARTEFACT_AFTER_RE.match(clause[s.end:])):
                continue  # "the deploy is a bash script": said of the script, not the speaker
            if tool_values.LEARNING_BEFORE_RE.search(clause[max(0, s.start - 30):s.start]):
                continue  # "I'm currently learning Rust": a goal, not what they work in
            category = tool_values.key_of(s.value, sentence_tools, pending.clause.sentence)
            if category is not None and not tool_values.side_tool(
                    s.value, category, pending.clause.sentence, pending.message_tools):
                out.append(("tooling", category, s.value))
        return out
    if label == "veto":
        if _CONTRAST_RE.match(clause):
            return []  # "pnpm, not npm" is a contrast
        # without a ban word, or with nothing of the vocabulary to ban, nothing is banned:
        # "less verbose please" reads like a ban, and says a style by its words
        if not (_BAN_RE.search(clause) or _disliked_before(clause, pending.clause.sentence)):
            return by_words.style(clause)
        things = [s for s in pending.found if s.kind == "veto"]
        if things:
            return [("veto", s.value, "banned") for s in things]
        # "no semicolons in JS": the tool is where something else is banned, not the ban;
        # "don't explain basic Python to me": a ban on explaining, not on Python
        # "never run terraform apply on prod": one use of the tool is banned (a tool rule's
        # business), not the tool
        banned = [("veto", f"tool={s.value}", "banned")
                  for s in pending.found if s.kind == "tool"
                  and not _IN_TOOL_RE.search(clause[max(0, s.start - 12):s.start])
                  and not _NOT_THE_BAN_RE.search(clause[max(0, s.start - 40):s.start])
                  and not _ONE_USE_RE.match(clause[s.end:])]
        return banned or by_words.style(clause)
    if label == "channel":
        if not gates.states_channel(clause) or _DONT_USE_RE.match(clause):
            return []  # "don't use my full name in emails" names no way to reach the user
        named = [s for s in usable if s.kind == "channel"
                 and not gates.channel_as_scope(clause, s.start)]
        # "text me on Telegram": the verb "text" is a way of saying write, the app is named
        apps = [s for s in named if not _TEXT_VERB_RE.fullmatch(clause[s.start:s.end])]
        return [("channel", "primary", s.value) for s in (apps or named)][:1]
    return []


def _keep_the_standing(said: list[Statement], value: tuple[str, str, str], sentence: str,
                       stance: Stance) -> None:
    """A value said twice in one message is one statement; when one sentence asked for this
    answer and another for good ("Can you stop using so many bullets? I prefer prose."),
    it is the standing one, with its own sentence. Within one sentence the first saying's
    scope holds for the rest ("no intro for this one, straight to the steps")."""
    for i, s in enumerate(said):
        if (s.facet_class, s.key, s.value) == value and not s.standing and stance in (
                Stance.STANDING, Stance.DECLARED) and s.sentence != sentence:
            said[i] = Statement(*value, sentence, stance)


class StatementReader:
    """Reads statements from user messages; one encoder call per batch."""

    def __init__(self, classifier: IntentClassifier | None = None, cache_size: int = 50_000):
        self.classifier = classifier or IntentClassifier(prepare=_prepared)
        # Decisions by a digest of the (delexicalised) clause: chat repeats its short clauses
        # ("shorter please", "thanks", "no emojis") all the time, and each is encoded once.
        # Only a digest and a label are kept, never a person's words.
        self._decisions: LRUCache[bytes, Decision] = LRUCache(cache_size)
        #: digests of whole messages that stated nothing ("thanks", "ok", a task): the
        #: commonest turns of a chat, skipped whole the next time
        self._nothing: LRUCache[bytes, bool] = LRUCache(cache_size)
        self._lock = threading.Lock()

    def _key(self, clause: str) -> bytes:
        """The cache key: the clause and the thresholds it was decided under."""
        salt = repr(self.classifier.thresholds).encode()
        return hashlib.blake2b(clause.encode(), digest_size=16, key=salt[:64]).digest()

    def _decide(self, clauses: Sequence[str]) -> list[Decision]:
        keys = [self._key(c) for c in clauses]
        with self._lock:
            known = {k: self._decisions[k] for k in keys if k in self._decisions}
        missing = list(dict.fromkeys(c for c, k in zip(clauses, keys, strict=True)
                                     if k not in known))
        if missing:
            fresh = dict(zip(missing, self.classifier.classify(missing), strict=True))
            with self._lock:
                for clause, decision in fresh.items():
                    key = self._key(clause)
                    self._decisions[key] = decision
                    known[key] = decision
        return [known[k] for k in keys]

    def warm(self) -> None:
        """Load the encoder, encode the bank and load the gazetteer now, not on a first turn."""
        places.warm()
        self.read(["I'm based in Berlin and I prefer short answers."])

    def pending(self, messages: Sequence[str]) -> list[_Pending]:
        """The clauses that pass every gate, with their values and stance."""
        out: list[_Pending] = []
        for n, message in enumerate(messages):
            if not message or not message.strip():
                continue
            allowed: dict[int, bool] = {}
            others: set[int] = set()
            tasks: set[int] = set()
            taken: set[int] = set()
            message_tools = frozenset(name for _, _, _, name in tools.mentions(message))
            speaking: set[tuple[int, int]] = set()
            for clause in text.split(message):
                sentence = clause.sentence
                body = clause.text
                stripped = gates.polite_request(body)
                body = stripped or body
                retracting = gates.retraction(body, sentence)
                anchor = gates.has_anchor(body)
                if not anchor and (n, clause.index) not in speaking and not (
                        slots.could_hold(body)) and not _BAN_RE.search(body) and not (
                        retracting):
                    continue  # most chat: no speaker's word and no value worth looking up
                # the sentence's gates (dearer: a dozen patterns) only for a clause worth
                # reading; both are pure, so the order decides nothing but the cost
                if clause.index not in allowed:
                    allowed[clause.index] = _sentence_gate(sentence)
                if not allowed[clause.index]:
                    continue
                found = tuple(slots.find(body, sentence))
                bans = any(s.kind == "veto" for s in found) and _BAN_RE.search(body)
                if gates.what_you_did(body):
                    continue  # "but you answered in German": the agent's doing, no wish
                if gates.someone_else_in(body):
                    others.add(clause.index)
                    continue
                if clause.index in others and not gates.first_person(body):
                    continue  # "the client is based in Lyon and prefers formal emails"
                if gates.asks_for_writing(body):
                    tasks.add(clause.index)  # the rest of the sentence describes that text
                    continue
                if clause.index in tasks:
                    continue
                if gates.past(body):
                    continue
                if clause.index in taken:
                    continue  # the rest of a sentence read whole as a retraction
                if retracting:
                    denies, whole = retractions.denials(body, sentence, message_tools,
                                                        bans=bool(bans))
                    if whole:
                        taken.add(clause.index)
                    if denies:  # "forget what I said about tables": no classifier needed
                        out.append(_Pending(n, text.Clause(body, sentence, clause.original,
                                                           clause.index), found,
                                            Stance.DENIED, denies=denies))
                        continue
                    if not bans:
                        continue  # a retraction names nothing else to read
                    # a ban ("I told you before: no emojis!") is read as one
                # a value said in a first-person cue (a name, a city after "in") anchors its
                # clause; a bare list of tools ("(a) PostgreSQL (b) MongoDB") does not
                anchored = anchor or gates.asks_for_less(body) or any(
                    s.kind in _ANCHORING_KINDS for s in found) or (
                    bool(found) and (n, clause.index) in speaking) or (
                    _TOOL_FOR_RE.match(body) is not None and any(
                        s.kind == "tool" and s.start == 0 for s in found))
                if anchored:
                    speaking.add((n, clause.index))  # "we're on Postgres and deploy to AWS"
                if not found and not anchored:
                    continue
                stance = (Stance.DECLARED if gates.declared(sentence)
                          else Stance.ONE_OFF if gates.one_off(
                              body, sentence, polite=stripped is not None
                              or gates.polite_request(sentence) is not None)
                          else Stance.STANDING)
                out.append(_Pending(n, text.Clause(body, sentence, clause.original,
                                                   clause.index), found, stance,
                                    anchored, bool(bans), message_tools))
        return out

    def read(self, messages: Sequence[str]) -> list[list[Statement]]:
        """The statements of each message, in order; never raises on any text (an encoder
        failure raises `habitus.encoder.EncoderUnavailable`)."""
        digests = [self._key("\x01" + m) for m in messages]
        with self._lock:
            said_nothing = [d in self._nothing for d in digests]
        todo = self.pending([("" if skip else m) for m, skip in zip(messages, said_nothing,
                                                                    strict=True)])
        results: list[list[Statement]] = [[] for _ in messages]
        if todo:
            self._read(todo, results)
        with self._lock:  # remembered as digests only: what stated nothing holds nothing
            for digest, found, skip in zip(digests, results, said_nothing, strict=True):
                if not found and not skip:
                    self._nothing[digest] = True
        return results

    def _read(self, todo: Sequence[_Pending], results: list[list[Statement]]) -> None:
        readable = [p for p in todo if not p.denies]
        decisions = iter(self._decide([delexicalise(p.clause.text, p.found)
                                       for p in readable]))
        previous: tuple[int, int, str] | None = None
        for pending in todo:
            if pending.denies:
                said = results[pending.message]
                said += [Statement(*t, pending.clause.original[:500], Stance.DENIED)
                         for t in pending.denies if t not in {
                             (s.facet_class, s.key, s.value) for s in said}]
                continue
            decision = next(decisions)
            label = decision.label if pending.anchored else NONE
            named = by_words.setting(pending.clause.text)
            if named is not None:
                label = named  # "use metric units", "I want times in 24-hour format"
            elif any(s.kind in _SELF_STATED for s in pending.found):
                # the slot's own pattern is the speaker's ("my pronouns are they/them", "I go
                # by he/they", "my email is ..."), which the encoder, with no such examples,
                # reads as anything (a tone, a channel)
                label = "identity"
            if pending.bans and (label == NONE or label.startswith("format=")):
                label = "veto"
            if label in (NONE, "tooling") and _tool_banned(pending):
                label = "veto"  # "no moment.js please", "ya no usamos Redux"
            elif label == "veto" and not _BAN_RE.search(pending.clause.text) and any(
                    s.kind == "tool" for s in pending.found):
                label = "tooling"  # "i use zed now": a tool said without any ban is used
            here = (pending.message, pending.clause.index)
            if label == NONE and previous is not None and previous[:2] == here and (
                    _fragment(pending)):
                # "we use React and TypeScript with pnpm", "detailed answers, in French"
                kinds = {_FRAGMENT_LABELS[s.kind] for s in pending.found
                         if s.kind in _FRAGMENT_LABELS}
                label = kinds.pop() if len(kinds) == 1 else NONE
            if label == NONE:
                label = by_words.label(pending.clause.text, pending.found)
            if label == NONE:
                continue
            previous = (*here, label)
            seen = {(s.facet_class, s.key, s.value) for s in results[pending.message]}
            filled = _fill(label, pending)
            if not filled and pending.bans and label != "veto":
                # "I don't want headings in answers", read as a style its words do not hold:
                # a format or content thing with a ban word is a veto whatever else it says
                filled = _fill("veto", pending)
            for facet_class, key, value in filled:
                stance = pending.stance
                if facet_class != "style" and stance is Stance.ONE_OFF:
                    stance = Stance.STANDING
                if facet_class == "channel" and stance is Stance.STANDING and (
                        gates.one_delivery(pending.clause.sentence)):
                    stance = Stance.ONE_OFF  # "Email me the report when it's ready"
                if check(facet_class, key, value):
                    continue
                if (facet_class, key, value) in seen:
                    _keep_the_standing(results[pending.message], (facet_class, key, value),
                                       pending.clause.original[:500], stance)
                    continue
                seen.add((facet_class, key, value))
                results[pending.message].append(
                    Statement(facet_class, key, value, pending.clause.original[:500], stance))
            implied = leading.implied_role(pending.clause.text, pending.found, filled)
            if implied is not None and not any(
                    (s.facet_class, s.key) == implied[:2] for s in results[pending.message]):
                results[pending.message].append(
                    Statement(*implied, pending.clause.original[:500], Stance.ONE_OFF))
