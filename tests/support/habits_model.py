"""A scripted model for the habits service, answering over the real HTTP of `ScriptedLlm`.

It tells Analyze calls from judge calls by the schema name the client asks for, and a test's
answers from another's by a marker word in the call's material (each test puts its own marker
in its turns and requests). An answer is a function of what the call carried: for Analyze, the
observations (`{"id": "r1", "text": ...}`, as the model saw them); for the judge, the payload
(`{"request", "context", "conditions": [{"id": "c1", "condition": ...}]}`). Unscripted calls
get "nothing" (no proposals; every condition not relevant).
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.support.llm_server import Answer

Observations = list[dict[str, str]]
Payload = dict[str, Any]
Step = Callable[[Any], Any] | Answer

ANALYZE = "habit_proposals"
JUDGE = "habit_judgment"


def _user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def kind_of(body: dict[str, Any]) -> str:
    schema = (body.get("response_format") or {}).get("json_schema") or {}
    if schema.get("name"):
        return str(schema["name"])
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    return JUDGE if "judgments" in system else ANALYZE


def _between(text: str, begin: str, end: str) -> list[str]:
    block = text.split(begin + "\n", 1)[1].split("\n" + end, 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def observations(body: dict[str, Any]) -> Observations:
    return [json.loads(line) for line in
            _between(_user(body), "<<<OBSERVATIONS", "OBSERVATIONS>>>")]


def payload(body: dict[str, Any]) -> Payload:
    return dict(json.loads(_between(_user(body), "<<<PAYLOAD", "PAYLOAD>>>")[0]))


def refs(obs: Observations, *quotes: str) -> list[str]:
    """The ids of the observations holding each quote (the first that does)."""
    out = []
    for quote in quotes:
        found = next((o["id"] for o in obs if quote.casefold() in o["text"].casefold()), None)
        assert found is not None, f"no observation holds {quote!r}: {obs}"
        out.append(found)
    return out


def habit(when: str, do: str, evidence: list[str], *, polarity: int = 1,
          confidence_bp: int = 8000, contradicts: bool = False) -> dict[str, Any]:
    return {"condition": when, "behavior": do, "polarity": polarity, "evidence": evidence,
            "confidence_bp": confidence_bp, "contradicts": contradicts}


def proposals(*habits: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "habits": list(habits)}


def judgments(p: Payload, applicable: Callable[[str], bool], confidence_bp: int = 9000
              ) -> dict[str, Any]:
    """A well-formed judgment: each condition applicable when `applicable(condition)`."""
    return {"schema_version": 3, "judgments": [
        {"id": c["id"], "applicable": applicable(c["condition"]),
         "confidence_bp": confidence_bp,
         "reason": "current_applicability" if applicable(c["condition"])
         else "not_currently_relevant"} for c in p["conditions"]]}


class HabitsModel:
    """The responder: `script(marker, kind, *steps)` queues answers for calls whose material
    holds `marker`; a step is an `Answer` or a function of the observations (Analyze) or the
    payload (judge) returning the JSON to answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[str, str], collections.deque[Step]] = {}
        self.seen: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)

    def script(self, marker: str, kind: str, *steps: Step) -> None:
        with self._lock:
            self._steps.setdefault((marker, kind), collections.deque()).extend(steps)

    def calls(self, marker: str, kind: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [b for b in self.seen[marker] if kind is None or kind_of(b) == kind]

    def __call__(self, body: dict[str, Any]) -> Answer:
        text, kind = _user(body), kind_of(body)
        step: Step | None = None
        with self._lock:
            for marker in {m for m, _ in self._steps if m in text}:
                self.seen[marker].append(body)
                queue = self._steps.get((marker, kind))
                if queue and step is None:
                    step = queue.popleft()
        if isinstance(step, Answer):
            return step
        if kind == JUDGE:
            p = payload(body)
            return Answer(json=step(p) if step else judgments(p, lambda _: False))
        return Answer(json=step(observations(body)) if step else proposals())
