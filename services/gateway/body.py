"""Reading a JSON request body: everything the system could not store is refused here.

Why at the edge: an item the gateway accepts is published and answered "accepted"; if a consumer
or Postgres then cannot store it (a NUL byte in text, a lone surrogate, nesting that overflows a
serialiser's recursion limit), the event is silently lost after the client was told it is safe.
So the body is checked before anything is published, and the error names the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from services.gateway.errors import GatewayError

# A JSON string token: quotes around non-quote, non-backslash runs and escapes (unrolled loop).
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRINGS = re.compile(_STRING, re.DOTALL)
_TOKENS = re.compile(rb"(" + _STRING + rb")|([\[\]{},:])", re.DOTALL)
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# Postgres text cannot hold NUL; a code point in the surrogate range is left only by a lone
# surrogate (json.loads joins valid pairs) and cannot be encoded as UTF-8 at all.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

MAX_PATH_SEGMENTS = 12


@dataclass(frozen=True, slots=True)
class TooDeep(Exception):
    """The body nests deeper than the limit; `path` leads to the container where it does."""

    path: tuple[str, ...]
    limit: int


def check_media_type(request: Request) -> None:
    """415 unless the body is declared JSON: a form post or text/plain body is a client bug
    that would otherwise surface as a confusing parse error."""
    declared = request.headers.get("content-type", "")
    media, _, params = declared.partition(";")
    media = media.strip().lower()
    charset = next((p.split("=", 1)[1].strip().strip('"').lower()
                    for p in params.split(";") if p.strip().lower().startswith("charset=")),
                   "utf-8")
    if (media == "application/json" or media.endswith("+json")) and charset in ("utf-8",
                                                                                  "utf8"):
        return
    raise GatewayError("unsupported_media_type",
                       f"Content-Type: send application/json (UTF-8), got {declared or 'none'!r}",
                       415)


def depth_exceeds(raw: bytes, limit: int) -> bool:
    """Does the JSON text nest containers deeper than `limit`? Measured on the bytes, before
    parsing, so no parser recursion can overflow: each pass removes the innermost empty pairs
    (C-speed), and a pair still removed by pass `limit + 1` had `limit` levels around it."""
    shape = _STRINGS.sub(b"", raw).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        shape, removed = _EMPTY_PAIR.subn(b"", shape)
        if not removed:
            return False
    return _EMPTY_PAIR.search(shape) is not None


class _Frame:
    """One open container while the tokens are walked: its kind, the index or key now being
    read, whether an object expects a key next, and the keys it has had."""

    __slots__ = ("at", "expects_key", "keys", "kind")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.at: Any = 0 if kind == "[" else None
        self.expects_key = kind == "{"
        self.keys: set[Any] = set()


def _walk(raw: bytes) -> Iterator[tuple[str, list[_Frame], Any]]:
    """The body's structure, token by token, for the locators of bad bodies: ("open", stack)
    before a container is entered, ("key", stack, key) as an object's key is read (the stack
    is the containers around it, the innermost last)."""
    stack: list[_Frame] = []
    for match in _TOKENS.finditer(raw):
        string, punct = match.group(1), match.group(2)
        top = stack[-1] if stack else None
        if string is not None:
            if top is not None and top.kind == "{" and top.expects_key:
                try:
                    key = json.loads(string)
                except ValueError:
                    key = "?"
                yield "key", stack, key
                top.keys.add(key)
                top.at = key
                top.expects_key = False
        elif punct in (b"[", b"{"):
            yield "open", stack, None
            stack.append(_Frame(punct.decode()))
        elif punct in (b"]", b"}"):
            if stack:
                stack.pop()
        elif punct == b"," and top is not None:
            if top.kind == "[":
                top.at += 1
            else:
                top.expects_key = True


def locate_depth(raw: bytes, limit: int) -> tuple[str, ...]:
    """The path to the first container nested deeper than `limit` (only run on a body already
    known to be too deep, so its cost is paid by bad requests alone)."""
    for event, stack, _ in _walk(raw):
        if event == "open" and len(stack) >= limit:
            return tuple(_segment(f) for f in stack)
    return ()


def _segment(frame: _Frame) -> str:
    return escape(str(frame.at)) if frame.at is not None else "?"


def escape(text: str) -> str:
    """A name safe to echo in an error: unstorable characters as \\u escapes."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def format_path(path: tuple[str, ...] | list[str]) -> str:
    if len(path) > MAX_PATH_SEGMENTS:
        path = [*path[:MAX_PATH_SEGMENTS], "..."]
    return ".".join(path) or "body"


class DuplicateKey(ValueError):
    """An object names a key twice; `path` leads to the second one. JSON parsers disagree on
    which wins (Python's: the last), so a `user_id` given twice would be stored under whichever
    the parser picked, silently: it is refused instead."""

    def __init__(self, path: tuple[str, ...]):
        super().__init__(f"{format_path(path)}: the key appears twice in its object; "
                         "give each key once")
        self.path = path


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Repeated()
    return found


class _Repeated(Exception):
    """Raised inside the parser; the path is found afterwards, on bad bodies only."""


def locate_duplicate(raw: bytes) -> tuple[str, ...]:
    """The path to the first key given twice in its object (run only on a body known to hold
    one, so its cost is paid by bad requests alone)."""
    for event, stack, key in _walk(raw):
        if event == "key" and key in stack[-1].keys:
            return (*(_segment(f) for f in stack[:-1]), escape(str(key)))
    return ()


def parse_json(raw: bytes, max_depth: int) -> Any:
    """Strict JSON: UTF-8, no deeper than `max_depth`, no key twice in an object. Raises
    TooDeep, DuplicateKey or ValueError."""
    if depth_exceeds(raw, max_depth):
        raise TooDeep(locate_depth(raw, max_depth), max_depth)
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys)
    except _Repeated:
        raise DuplicateKey(locate_duplicate(raw)) from None


def unstorable(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """(field path, reason) for every string or object key that cannot be stored. Iterative,
    and bounded anyway by the depth check that ran first."""
    todo: list[tuple[tuple[str, ...], Any]] = [(path, value)]
    while todo:
        where, node = todo.pop()
        if isinstance(node, str):
            reason = _reason(node)
            if reason:
                yield format_path(where), reason
        elif isinstance(node, dict):
            for key, child in node.items():
                reason = _reason(key)
                if reason:
                    yield format_path((*where, escape(key))), f"the key {reason}"
                todo.append(((*where, escape(key)), child))
        elif isinstance(node, list):
            todo.extend(((*where, str(i)), child) for i, child in enumerate(node))


def _reason(text: str) -> str | None:
    bad = _UNSTORABLE.search(text)
    if bad is None:
        return None
    if bad.group() == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return (f"contains a lone surrogate (\\u{ord(bad.group()):04x}); "
            "text must be valid Unicode")
