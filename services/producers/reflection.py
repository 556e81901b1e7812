"""Producer 4 (fast path): goals the user states about themselves in so many words.

"I've decided to learn Rust", "I realised I need to ship the billing migration first": the user
telling the agent what they are working towards. Explicit evidence, so the rule only fires on
sentences that really are such statements: cues matched as whole words, questions skipped, a
sentence already read as a statement (a style, identity or tooling preference) left to it.
The frames of a standing preference ("from now on", "please remember") are not goals: they
belong to the statement reader.

A goal's key is its topic: the first content words after the cue, at most three, lower-case,
no dates or function words (the vocabulary's open-key shape), so "I've decided to learn Rust
this year" and "I decided to learn Rust" reinforce `goal/learn-rust`. A goal whose topic
cannot be named that way is not emitted: a key cut from a sentence helps nobody.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from habitus.events.domain import CueFamily, FacetClass
from habitus.vocabulary import open_key_problem
from services.producers.candidates import (
    MAX_VALUE_CHARS,
    REFLECTION,
    Candidate,
    squash_spaces,
)

CONFIDENCE = 0.85
TOPIC_WORDS = 3

_CUE_RE = re.compile(
    r"\b(?:"
    r"i(?:'ve|\s+have)?\s+(?:now\s+|just\s+|finally\s+)?reali[sz]ed(?:\s+that)?"
    r"|i(?:'ve|\s+have)?\s+(?:now\s+|just\s+)?learn(?:ed|t)(?:\s+that)?"
    r"|i(?:'ve|\s+have)\s+decided(?:\s+to)?"
    r"|i\s+decided(?:\s+to)?"
    r"|my\s+(?:main\s+|current\s+|big\s+)?goal\s+(?:is|this\s+\w+\s+is)(?:\s+to)?"
    r"|i'm\s+working\s+towards"
    r"|i(?:'m|\s+am)\s+(?:studying|preparing|training|cramming)\s+for"
    r"|i(?:'m|\s+am)\s+trying\s+to(?=\s+(?:learn|become|pass|get\s+certified)\b)"
    # "I'm learning Japanese", "I want to get better at system design" (not "learning that",
    # "learn how this works": a lesson or a question, no goal)
    r"|i(?:'m|\s+am)(?:\s+(?:currently|slowly))?(?=\s+learning\s+(?!that|how|why|what|about)\w)"
    r"|i(?:\s+want|'d\s+like|\s+would\s+like)\s+to(?=\s+(?:get\s+better\s+at|improve\s+my|"
    r"become|learn\s+(?!how|why|what|where|when|which|more)\w))"
    r")\s+",
    re.IGNORECASE,
)
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD_RE = re.compile(r"[a-z]+")
#: where the goal's clause ends: the words after it are the sentence's other business
_CLAUSE_END_RE = re.compile(r"[,;:(]|\s(?:so|but|because|since)\s", re.IGNORECASE)
#: forms of one goal's words ("I'm learning Rust" is the goal "I decided to learn Rust" names)
_SAME_TOPIC = {"learning": "learn", "improving": "improve", "becoming": "become"}
_SKIP = frozenset(
    """i i'm we to the a an my our that this it is are be get do make really finally now just
    need must have has should will would can could so and or but of in on at for with from by
    about more most some all very also then than""".split())


def _sentences(text: str) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for chunk in _SENTENCE_END_RE.split(text):
        chunk = chunk.strip()
        out.append((squash_spaces(chunk.rstrip(".!?")), chunk.endswith("?")))
    return out


def topic(rest: str) -> str | None:
    """The goal's topic key from the words after its cue, or None when none fits."""
    rest = _CLAUSE_END_RE.split(rest, maxsplit=1)[0]  # "Japanese, so feel free ...": Japanese
    folded = unicodedata.normalize("NFKD", rest).encode("ascii", "ignore").decode().lower()
    words = [_SAME_TOPIC.get(w, w) for w in _WORD_RE.findall(folded)
             if w not in _SKIP and len(w) > 1]
    for n in range(min(TOPIC_WORDS, len(words)), 0, -1):
        key = "-".join(words[:n])
        if open_key_problem(key) is None:
            return key
    return None


def reflection_candidates(
    user_message: str, *, session_id: str, turn_id: str, observed_at: float
) -> list[Candidate]:
    """One Goal candidate per distinct goal topic of `user_message`."""
    normalised = user_message.replace("\u2019", "'")
    seen: set[str] = set()
    out: list[Candidate] = []
    for sentence, is_question in _sentences(normalised):
        cue = None if is_question or not sentence else _CUE_RE.search(sentence)
        if cue is None:
            continue
        key = topic(sentence[cue.end():])
        if key is None or key in seen:
            continue
        seen.add(key)
        out.append(
            Candidate(
                facet_class=FacetClass.GOAL.value,
                key=key,
                value=sentence[:MAX_VALUE_CHARS],
                cue_family=CueFamily.EXPLICIT.value,
                confidence=CONFIDENCE,
                evidence=({"type": "turn", "session_id": session_id, "turn_id": turn_id},),
                observed_at=observed_at,
                producer=REFLECTION,
            )
        )
    return out


def _words(text: str) -> str:
    return re.sub(r"[^\w]+", " ", text.replace("\u2019", "'").lower()).strip()


def without_restated(reflections: Sequence[Candidate], sentences: Sequence[str],
                     values: Sequence[str] | None = None) -> list[Candidate]:
    """The goals whose sentence was not already read as a statement. With the statements'
    `values`, a goal whose sentence was read is still kept when its topic says more than
    those values: "I'm studying for my AWS Solutions Architect certification" read as
    `cloud=aws` is still the goal `aws-solutions-architect`, where "I've decided to use pnpm"
    read as `package_manager=pnpm` is no goal of its own."""
    stated = [_words(s) for s in sentences if s]
    if not stated:
        return list(reflections)
    known = {w for v in values or () for w in _words(v).split()} | _GOAL_VERBS
    kept = []
    for candidate in reflections:
        words = _words(candidate.value)
        restated = any(s in words or words in s for s in stated)
        if not restated or (values is not None
                            and not set(candidate.key.split("-")) <= known):
            kept.append(candidate)
    return kept


#: a goal topic's verbs: "use-pnpm" says no more than the statement `pnpm`
_GOAL_VERBS = frozenset("use learn switch move try start adopt get".split())
