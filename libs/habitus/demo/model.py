"""The scenario's model for the demo's services: the scripted one, unless a real one is set.

The LLM parts of the scenario (the extractor, habits' Analyze and judge) are answered by
`examples/scenarios/scripted_model.py`, served by `habitus.demo.scripted_llm`, unless
`HABITUS_LLM_BASE_URL` and `HABITUS_LLM_MODEL` name a real model. `scripted_model_for_demo`
is what the demo's `habitus up` adds to its own services' environment (theirs only): the
scripted model's URL and short extraction windows.
"""

from __future__ import annotations

import os

from habitus.demo.scenario import Scenario, import_example
from habitus.demo.scripted_llm import ScriptedLlmServer

MODEL = "examples.scenarios.scripted_model"
#: settings the demo gives the services it starts when the environment sets none: extraction
#: windows that close seconds after the replay instead of five minutes, and the producers'
#: statement reader in a thread (a process of its own is a fresh interpreter that loads the
#: reader, about two seconds of a core before the producers are ready, and pays off only
#: under load; the demo replays a hundred items)
DEMO_SERVICE_ENV = {"HABITUS_EXTRACTOR_WINDOW_SECONDS": "3",
                    "HABITUS_EXTRACTOR_SWEEP_SECONDS": "0.5",
                    "HABITUS_PRODUCERS_READER_PROCESSES": "0"}


def llm_configured(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ) if env is None else env
    return bool(env.get("HABITUS_LLM_BASE_URL") and env.get("HABITUS_LLM_MODEL"))


def start_scripted_model(scenario: Scenario | None = None) -> ScriptedLlmServer:
    """The scenario's scripted model on a free local port."""
    server: ScriptedLlmServer = import_example(MODEL).serve(scenario)
    return server


def scripted_model_for_demo() -> tuple[ScriptedLlmServer | None, dict[str, str]]:
    """What the demo's `habitus up` adds to its services' environment (theirs only): the
    scripted model (started here, when no real one is configured) and short extraction windows
    (unless set)."""
    env = {k: v for k, v in DEMO_SERVICE_ENV.items() if k not in os.environ}
    if llm_configured():
        return None, env
    server = start_scripted_model()
    env.update(HABITUS_LLM_BASE_URL=server.url, HABITUS_LLM_MODEL=server.model,
               HABITUS_LLM_MAX_RETRIES="1")
    return server, env
