"""The scenario's model: answers the extractor, habits' Analyze and habits' judge the way a
good model would for this story, computed from what each request carries.

* **extraction / reflection**: for every `Extraction` of the scenario whose quote is in a
  chunk of the window, a facet citing that chunk (reflections may only propose style and
  goal, so they get those only);
* **Analyze** (`habit_proposals`): for every `Proposal` whose quotes are in the batch's
  observations, the habit, citing the observations that hold them;
* **the judge** (`habit_judgment`): a condition holds when the request holds one of its
  keywords (`TenantStory.judge`); the others are `not_currently_relevant`.

It serves them over real HTTP with `habitus.demo.scripted_llm.ScriptedLlmServer` (the small
OpenAI-compatible server in the library, since examples must not import the tests' one):

    server = serve(build(time.time()))   # HABITUS_LLM_BASE_URL=server.url, MODEL=server.model
"""

from __future__ import annotations

import json
import time
from typing import Any

from examples.scenarios.three_weeks import Scenario, build
from habitus.demo.scripted_llm import ScriptedLlmServer, schema_name, system_message, user_message

EXTRACTION, REFLECTION = "extraction", "reflection"
ANALYZE, JUDGE = "habit_proposals", "habit_judgment"


def kind_of(body: dict[str, Any]) -> str:
    name = schema_name(body)
    if name:
        return name
    system = system_message(body)  # fenced mode: the system prompt names the answer's keys
    if "judgments" in system:
        return JUDGE
    if "schema_version" in system and "habits" in system:
        return ANALYZE
    return REFLECTION if '"preferences"' in system else EXTRACTION


def _block(text: str, begin: str, end: str) -> list[Any]:
    if begin + "\n" not in text:
        return []
    inner = text.split(begin + "\n", 1)[1].split("\n" + end, 1)[0]
    out = []
    for line in inner.splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _holds(text: str, quote: str) -> bool:
    return quote.casefold() in text.casefold()


class ScenarioModel:
    """The responder for `ScriptedLlmServer`."""

    def __init__(self, scenario: Scenario):
        self.extractions = scenario.extractions()
        self.proposals = scenario.proposals()
        self.judge = scenario.judge()

    def __call__(self, body: dict[str, Any]) -> Any:
        kind = kind_of(body)
        text = user_message(body)
        if kind == JUDGE:
            return self._judgments(text)
        if kind == ANALYZE:
            return self._habits(text)
        return self._facets(text, reflection=kind == REFLECTION)

    def _facets(self, text: str, *, reflection: bool) -> dict[str, Any]:
        chunks = _block(text, "<<<MATERIAL", "MATERIAL>>>")
        facets: list[dict[str, Any]] = []
        seen: set[tuple[str, str, str]] = set()
        for e in self.extractions:
            if reflection and e.class_ not in ("style", "goal"):
                continue
            chunk = next((c for c in chunks if _holds(str(c.get("text", "")), e.quote)), None)
            if chunk is None or (e.class_, e.key, e.value) in seen:
                continue
            cue = e.cue if chunk.get("own_words") or e.cue != "explicit" else "behavioral"
            seen.add((e.class_, e.key, e.value))
            facets.append({"class": e.class_, "key": e.key, "value": e.value,
                           "confidence": 0.8, "cue_family": cue,
                           "evidence": [{"chunk": chunk["id"], "quote": e.quote}]})
        if reflection:
            return {"observations": [], "patterns": [], "preferences": facets}
        summary = "The user talked about their work." if chunks else ""
        return {"summary": summary, "facets": facets}

    def _habits(self, text: str) -> dict[str, Any]:
        observations = _block(text, "<<<OBSERVATIONS", "OBSERVATIONS>>>")
        habits = []
        for p in self.proposals:
            refs = []
            for quote in p.quotes:
                found = next((o["id"] for o in observations
                              if _holds(str(o.get("text", "")), quote)), None)
                if found is not None and found not in refs:
                    refs.append(found)
            if refs:
                habits.append({"condition": p.when, "behavior": p.do, "polarity": 1,
                               "evidence": refs, "confidence_bp": p.confidence_bp,
                               "contradicts": False})
        return {"schema_version": 1, "habits": habits}

    def _judgments(self, text: str) -> dict[str, Any]:
        payloads = _block(text, "<<<PAYLOAD", "PAYLOAD>>>")
        payload = payloads[0] if payloads else {"request": "", "conditions": []}
        request = str(payload.get("request", ""))
        judgments = []
        for c in payload.get("conditions", []):
            condition = str(c.get("condition", ""))
            words = next((k for w, k in self.judge.items()
                          if w.casefold() in condition.casefold()), ())
            applicable = any(_holds(request, k) for k in words)
            judgments.append({"id": c["id"], "applicable": applicable, "confidence_bp": 9000,
                              "reason": "current_applicability" if applicable
                              else "not_currently_relevant"})
        return {"schema_version": 3, "judgments": judgments}


def serve(scenario: Scenario | None = None) -> ScriptedLlmServer:
    """Start the scenario's model on a free local port (stop it with `.stop()`)."""
    return ScriptedLlmServer(ScenarioModel(scenario or build(time.time()))).start()


if __name__ == "__main__":  # a model for `habitus up` run by hand
    server = serve()
    print(f"HABITUS_LLM_BASE_URL={server.url} HABITUS_LLM_MODEL={server.model}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
