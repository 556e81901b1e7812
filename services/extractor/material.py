"""What the extractor reads: ingest events cut into chunks the model sees and cites.

A chunk is one piece of text with the evidence reference it came from, so a facet the model
cites by chunk id (`c1`, `c2`, ...) can be traced back to the ingest event. Chunks carry who
wrote them (`own_words`): only the user's chat messages and the mail the user sent are the
user speaking; an assistant reply, a received email or a document is somebody else, which the
validation relies on to refuse `explicit` cues and identity claims taken from other people.

The text is cut down to what is worth the tokens: tool-call payloads are never sent (only the
names of the tools called), quoted replies and forwarded history are dropped from emails (the
quoted text is somebody else's, and was already seen when its own message was ingested), and
every chunk is bounded. Texts are NFC-normalised so a quote the model copies compares equal to
the chunk it came from however the sender's keyboard composed accents.

Everything here is a pure function of its input, so replaying the same events rebuilds the same
windows and the same window hashes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from habitus.events.evidence import DocumentChunkRef, EmailMessageRef, TurnRef
from habitus.events.ingest import DocumentIngested, EmailObserved, TurnRecorded

ChunkKind = Literal["user_turn", "assistant_turn", "sent_email", "received_email", "document"]
ChunkEvidence = TurnRef | EmailMessageRef | DocumentChunkRef
Material = TurnRecorded | EmailObserved | DocumentIngested

#: the kinds that are the user speaking: the only evidence for an `explicit` cue
OWN_WORDS_KINDS: frozenset[str] = frozenset({"user_turn", "sent_email"})
#: a chunk's text is cut to this many characters (at a word boundary), so one pasted log or a
#: long newsletter cannot fill a window on its own
MAX_CHUNK_CHARS = 4000
#: an assistant reply longer than this makes its turn worth a reflection
COMPLEX_REPLY_CHARS = 500
#: tool names listed after an assistant reply; the rest are counted, not named
MAX_TOOL_NAMES = 20
#: recipients named on a sent email's `To:` line
MAX_RECIPIENTS = 5
_ELLIPSIS = " \u2026"

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BLANK_RUN_RE = re.compile(r"\n{3,}")
_TRAILING_SPACE_RE = re.compile(r"[ \t]+\n")
_QUOTED_LINE_RE = re.compile(r"^\s*>")
_REPLY_HEADER_RE = re.compile(r"^\s*on\s.{0,400}\bwrote:\s*$", re.IGNORECASE)
_SEPARATOR_RE = re.compile(
    r"^\s*-{2,}\s*(?:original message|forwarded message|begin forwarded message)\s*-*\s*$",
    re.IGNORECASE,
)
_HEADER_FROM_RE = re.compile(r"^\s*from:\s*\S", re.IGNORECASE)
_HEADER_NEXT_RE = re.compile(r"^\s*(?:sent|date|to|subject):", re.IGNORECASE)


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk before it is placed in a window (it has no id yet)."""

    kind: ChunkKind
    evidence: ChunkEvidence
    text: str
    occurred_at: float

    @property
    def own_words(self) -> bool:
        """Whether the user wrote this text (a chat message of theirs, a mail they sent)."""
        return self.kind in OWN_WORDS_KINDS

    @property
    def key(self) -> str:
        """A stable name for the chunk (its kind and evidence), unique across a user's
        material: what `window_hash` is given as the chunk's identity."""
        return chunk_key(self.kind, self.evidence)

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready form, for storing a pending window."""
        return {
            "kind": self.kind,
            "evidence": self.evidence.model_dump(mode="json"),
            "text": self.text,
            "occurred_at": self.occurred_at,
        }


@dataclass(frozen=True)
class Chunk:
    """A chunk in a window: `ref` is the id the model cites it by (`c1`, `c2`, ...)."""

    ref: str
    kind: ChunkKind
    evidence: ChunkEvidence
    text: str
    occurred_at: float

    @property
    def own_words(self) -> bool:
        """Whether the user wrote this text (a chat message of theirs, a mail they sent)."""
        return self.kind in OWN_WORDS_KINDS

    @property
    def key(self) -> str:
        """The chunk's stable name (see `ChunkDraft.key`)."""
        return chunk_key(self.kind, self.evidence)


@dataclass(frozen=True)
class SourceKey:
    """Where material comes from; each source keeps its own rolling summary.

    The user's conversations are one source whatever the session, their mail is one source,
    and each document is its own (a summary of a contract says nothing about a design doc).
    """

    kind: Literal["conversations", "email", "document"]
    id: str

    @property
    def key(self) -> str:
        """The source's name in storage: `conversations`, `email` (or `email:<toolkit>/<connection>`
        for a named mailbox) or `document:<source_id>`."""
        if self.kind == "document" or (self.kind == "email" and self.id != "email"):
            return f"{self.kind}:{self.id}"
        return self.kind


def chunk_key(kind: ChunkKind, evidence: ChunkEvidence) -> str:
    """`<kind>:<ids>` with each id percent-encoded, so no two chunks share a key."""
    match evidence:
        case TurnRef():
            ids = [evidence.session_id, evidence.turn_id]
        case EmailMessageRef():
            ids = [evidence.message_id]
        case DocumentChunkRef():
            ids = [evidence.source_id, evidence.chunk_id]
    return kind + ":" + "/".join(quote(i, safe="") for i in ids)


def source_of(payload: Material) -> SourceKey:
    """The source a piece of material belongs to."""
    match payload:
        case TurnRecorded():
            return SourceKey("conversations", "conversations")
        case EmailObserved():
            # One mailbox per connection when the agent names it, else the user's mail as one.
            if payload.toolkit and payload.connection_id:
                return SourceKey("email", f"{payload.toolkit}/{payload.connection_id}")
            return SourceKey("email", "email")
        case DocumentIngested():
            return SourceKey("document", payload.source_id)


def drafts_of(payload: Material, *, occurred_at: float) -> list[ChunkDraft]:
    """The chunks of one ingest event, in reading order; empty parts are dropped.

    `occurred_at` is the event's own time (the envelope's): a document chunk has no other, and
    turns and emails carry more precise ones in their payloads, which are used instead.
    """
    match payload:
        case TurnRecorded():
            return _turn_drafts(payload)
        case EmailObserved():
            return _email_drafts(payload)
        case DocumentIngested():
            ref = DocumentChunkRef(source_id=payload.source_id, chunk_id=payload.chunk_id)
            text = bounded(clean_text(payload.text))
            return [ChunkDraft("document", ref, text, occurred_at)] if text else []


def _turn_drafts(turn: TurnRecorded) -> list[ChunkDraft]:
    ref = TurnRef(session_id=turn.session_id, turn_id=turn.turn_id)
    out: list[ChunkDraft] = []
    user = bounded(clean_text(turn.user_message))
    if user:
        out.append(ChunkDraft("user_turn", ref, user, turn.user_at))
    reply = bounded(clean_text(turn.assistant_message))
    tools = _tools_line([call.tool_name for call in turn.tool_calls])
    assistant = "\n".join(part for part in (reply, tools) if part)
    if assistant:
        out.append(ChunkDraft("assistant_turn", ref, assistant, turn.assistant_at))
    return out


def _tools_line(names: Sequence[str]) -> str:
    """`[tools called: a, b]`: which tools ran says something about the user's tooling; what
    they were given and returned is payload, not conversation, and is never sent."""
    unique = list(dict.fromkeys(clean_text(n) for n in names if clean_text(n)))
    if not unique:
        return ""
    shown = ", ".join(unique[:MAX_TOOL_NAMES])
    more = len(unique) - MAX_TOOL_NAMES
    return f"[tools called: {shown}{f' and {more} more' if more > 0 else ''}]"


def _email_drafts(email: EmailObserved) -> list[ChunkDraft]:
    body = bounded(clean_text(strip_quoted_reply(email.body)))
    subject = clean_text(email.subject).replace("\n", " ")
    if not body and not subject:
        return []
    if email.direction == "sent":
        kind: ChunkKind = "sent_email"
        shown = email.to[:MAX_RECIPIENTS]
        more = len(email.to) - len(shown)
        header = "To: " + ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        header = header if shown else ""
    else:
        kind = "received_email"
        header = f"From: {clean_text(email.from_)}"
    lines = [line for line in (header, f"Subject: {subject}" if subject else "") if line]
    text = "\n".join(lines) + (f"\n\n{body}" if body else "")
    return [ChunkDraft(kind, EmailMessageRef(message_id=email.message_id), text, email.sent_at)]


def strip_quoted_reply(body: str) -> str:
    """The new part of an email: quoted lines (`> ...`) dropped, and everything from a reply
    header (`On <date>, <name> wrote:`, also wrapped over two lines), an `Original message` or
    `Forwarded message` separator, or an Outlook-style `From:` / `Sent:` header block on."""
    lines = body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if (
            _REPLY_HEADER_RE.match(line)
            or _REPLY_HEADER_RE.match(f"{line} {nxt}")
            or _SEPARATOR_RE.match(line)
            or (_HEADER_FROM_RE.match(line) and _header_block_follows(lines, i + 1))
        ):
            break
        if not _QUOTED_LINE_RE.match(line):
            kept.append(line)
    return "\n".join(kept)


def _header_block_follows(lines: Sequence[str], start: int) -> bool:
    """Whether a `From:` line is the head of a quoted message (a `Sent:`, `Date:`, `To:` or
    `Subject:` line within the next three), not a sentence that starts with "From:"."""
    return any(_HEADER_NEXT_RE.match(line) for line in lines[start:start + 3])


def clean_text(text: str) -> str:
    """NFC, Unix line ends, no control characters, no trailing spaces, at most one blank line
    in a row, stripped."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL_RE.sub("", text.replace("\t", " "))
    text = _TRAILING_SPACE_RE.sub("\n", text)
    return _BLANK_RUN_RE.sub("\n\n", text).strip()


def bounded(text: str, limit: int = MAX_CHUNK_CHARS) -> str:
    """`text` cut to at most `limit` characters, at a word boundary when there is one in the
    last fifth, with an ellipsis so the model knows the text goes on."""
    if len(text) <= limit:
        return text
    cut = text[: limit - len(_ELLIPSIS)]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= len(cut) * 4 // 5:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


def estimate_tokens(text: str) -> int:
    """About four characters a token: what windows are bounded by before any model counts."""
    return max(1, math.ceil(len(text) / 4))


def window_chunks(drafts: Sequence[ChunkDraft]) -> list[Chunk]:
    """The window's chunks with their ids, `c1` to `cN` in the order given."""
    return [
        Chunk(f"c{i}", d.kind, d.evidence, d.text, d.occurred_at)
        for i, d in enumerate(drafts, start=1)
    ]


def window_hash(
    source: str,
    kind: Literal["extract", "reflect"],
    chunk_keys: Sequence[str],
    texts: Sequence[str],
    prompt_version: str,
) -> str:
    """The identity of one model call: the same inputs and prompt version give the same hash,
    so a window is never sent twice; any change of text, order or prompt is a new window.

    The parts are hashed as one JSON array, so no concatenation of two parts can collide with
    another split of the same characters.
    """
    if len(chunk_keys) != len(texts):
        raise ValueError(f"{len(chunk_keys)} chunk keys for {len(texts)} texts")
    doc = [source, kind, prompt_version, list(chunk_keys), list(texts)]
    encoded = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def is_complex_turn(payload: TurnRecorded) -> bool:
    """A turn worth a reflection: the assistant called a tool, or wrote more than
    COMPLEX_REPLY_CHARS characters (a long answer is where preferences about answers show)."""
    return bool(payload.tool_calls) or len(payload.assistant_message.strip()) > COMPLEX_REPLY_CHARS


_TYPOGRAPHIC = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u00b4": "'",
    "`": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u00ab": '"', "\u00bb": '"', "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-",
    "\u2014": "-", "\u2015": "-", "\u2212": "-",
})


def fold_text(text: str, *, keep_newlines: bool = False) -> tuple[str, tuple[int, ...]]:
    """`text` folded for comparison, and for each folded character its index in `text`.

    Folding: compatibility forms (NFKC, so full-width letters and ligatures read as plain
    ones), case-folded, typographic quotes, apostrophes and dashes made ASCII, invisible format
    characters (zero-width spaces) dropped, and each run of whitespace one space (or one line
    break when the run holds one and `keep_newlines`), none at either end. The index map lets a
    match found in the folded text be reported at its place in the original.
    """
    chars: list[str] = []
    origin: list[int] = []
    gap: int | None = None  # index of the first whitespace of a pending run
    gap_newline = False
    for i, ch in enumerate(text):
        if unicodedata.category(ch) == "Cf":
            continue
        for c in unicodedata.normalize("NFKC", ch).casefold().translate(_TYPOGRAPHIC):
            if c.isspace():
                gap = i if gap is None else gap
                gap_newline = gap_newline or c == "\n"
                continue
            if gap is not None and chars:
                chars.append("\n" if keep_newlines and gap_newline else " ")
                origin.append(gap)
            gap, gap_newline = None, False
            chars.append(c)
            origin.append(i)
    return "".join(chars), tuple(origin)
