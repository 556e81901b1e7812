"""Scripting the extractor's model: answers chosen by what a request carries.

The extractor batches material into windows, so a test cannot know which request comes when;
it can know what is in it. `MarkerResponder` keys scripted answers by a marker word the test
puts in its material (each test its own), and by the call's kind (extraction or reflection),
and builds each answer from the request's own chunks, citing them by the ids the model was
shown, as a model would.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.support.llm_server import Answer

Chunks = list[dict[str, Any]]
Build = Callable[[Chunks], Answer]


def request_kind(body: dict[str, Any]) -> str:
    """`extraction` or `reflection`: the schema's name, or the system prompt in fenced mode."""
    schema = (body.get("response_format") or {}).get("json_schema") or {}
    if schema.get("name"):
        return str(schema["name"])
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    return "reflection" if '"preferences"' in system else "extraction"


def user_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def chunks_of(body: dict[str, Any]) -> Chunks:
    """The chunks a request carried, as the model saw them (id, kind, own_words, text)."""
    text = user_message(body)
    block = text.split("<<<MATERIAL\n", 1)[1].split("\nMATERIAL>>>", 1)[0]
    return [json.loads(line) for line in block.splitlines() if line.strip()]


def cite(chunks: Chunks, quote: str) -> dict[str, str]:
    """Evidence for `quote`: the first chunk whose text holds it."""
    for chunk in chunks:
        if quote.casefold() in chunk["text"].casefold():
            return {"chunk": chunk["id"], "quote": quote}
    raise AssertionError(f"no chunk holds {quote!r}: {[c['text'] for c in chunks]}")


def facet(chunks: Chunks, class_: str, key: str, value: str, quote: str, *,
          cue: str = "behavioral", confidence: float = 0.8) -> dict[str, Any]:
    return {"class": class_, "key": key, "value": value, "confidence": confidence,
            "cue_family": cue, "evidence": [cite(chunks, quote)]}


def extraction(summary: str, *facets: Callable[[Chunks], dict[str, Any]]) -> Build:
    """An answer `{summary, facets}` whose facets are built from the request's chunks."""
    return lambda chunks: Answer(json={"summary": summary,
                                       "facets": [f(chunks) for f in facets]})


class MarkerResponder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[tuple[str, str], collections.deque[Build | Answer]] = {}
        self.seen: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)

    def script(self, marker: str, *answers: Build | Answer, kind: str = "extraction") -> None:
        with self._lock:
            self._scripts.setdefault((marker, kind), collections.deque()).extend(answers)

    def requests_for(self, marker: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.seen[marker])

    def __call__(self, body: dict[str, Any]) -> Answer:
        text = user_message(body)
        kind = request_kind(body)
        step: Build | Answer | None = None
        with self._lock:
            markers = {m for m, _ in self._scripts if m in text}
            for marker in markers:
                self.seen[marker].append(body)
                queue = self._scripts.get((marker, kind))
                if queue:
                    step = queue.popleft()
        if step is None:
            empty = ({"observations": [], "patterns": [], "preferences": []}
                     if kind == "reflection" else {"summary": "", "facets": []})
            return Answer(json=empty)
        return step if isinstance(step, Answer) else step(chunks_of(body))
