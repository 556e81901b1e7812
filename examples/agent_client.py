"""An agent loop against the Habitus gateway, over plain HTTP (httpx).

For each scripted user message, the agent:

1. asks `prompt.context` what the next prompt should carry for this user and this request
   (preferences, PROFILE.md notes, tool rules, habits that apply);
2. asks `router.select_model` which of its models should answer (`record: true` publishes the
   decision as `RouteDecided`, joined to the trace by its id);
3. answers: `answer()` below is this example's own fake model. REPLACE IT with your LLM call;
4. reports what happened through `POST /v1/events`: the turn (`TurnRecorded`: preferences and
   tool rules are learned from it), the run (`TraceCompleted`: the router learns from it) and
   a score (`FeedbackGiven`),

printing what Habitus answered at each step. At the end it prints `traces.summary` for the user.

Run it next to `make run` (`habitus up`):

    python examples/agent_client.py --user alice

The gateway and key come from `HABITUS_URL` (or `HABITUS_GATEWAY_URL`) and `HABITUS_API_KEY`;
without them, from the running `habitus up`: its gateway in `./var/runtime.json` and the local
`dev` tenant's key in `./var/dev-api-key` (`HABITUS_DATA_DIR` moves `./var`).

Every event carries ids the agent derives from its own (session, turn, trace): sending a batch
again after a timeout is safe, the gateway answers `duplicate` for what it already stored.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

MODELS = ["qwen3:8b", "deepseek-coder-v2:16b", "llama3.1:70b"]
TOOLS = ["send_email", "web_search", "python"]
SCRIPT = [
    # (what the user says, the tools the agent "calls" while answering, the score it gets)
    ("Write a python function that parses 'key=value' lines into a dict.",
     [("python", True)], 0.7),
    # said once, about answers in general: a preference from this one message
    ("Shorter answers please, and no bullet points.", [], 0.9),
    ("Never email Sarah at sarah@example.com.", [("send_email", True)], 1.0),
    ("What's the weather in Lisbon tomorrow?", [("web_search", False), ("web_search", True)],
     0.4),
]


# --------------------------------------------------------------------------- where Habitus is


def data_dir() -> Path:
    return Path(os.environ.get("HABITUS_DATA_DIR", "var"))


def gateway_url(url: str | None) -> str:
    url = url or os.environ.get("HABITUS_URL") or os.environ.get("HABITUS_GATEWAY_URL")
    if url:
        return url.rstrip("/")
    try:  # a running `habitus up` writes its gateway here
        running = json.loads((data_dir() / "runtime.json").read_text()).get("gateway")
    except (OSError, ValueError):
        running = None
    if isinstance(running, str) and running.startswith("http"):
        return running.rstrip("/")
    return f"http://127.0.0.1:{os.environ.get('HABITUS_HTTP_PORT', '8080')}"


def api_key(key: str | None) -> str:
    key = key or os.environ.get("HABITUS_API_KEY")
    if key:
        return key
    local = data_dir() / "dev-api-key"  # `habitus up` makes it for the local `dev` tenant
    if local.exists():
        return local.read_text().strip()
    raise SystemExit("no API key: set HABITUS_API_KEY (or run next to `habitus up`)")


# --------------------------------------------------------------------------- Habitus over HTTP


class Habitus:
    def __init__(self, base: str, key: str):
        self.http = httpx.Client(base_url=base, timeout=30,
                                 headers={"Authorization": f"Bearer {key}"})

    def rpc(self, method: str, **params: Any) -> Any:
        """`POST /v1/rpc/<method>`: `{"result": ...}`, or an error naming the field at fault."""
        response = self.http.post(f"/v1/rpc/{method}", json=params)
        body = response.json()
        if response.status_code != 200:
            error = body.get("error", {})
            raise RuntimeError(f"{method}: {response.status_code} {error.get('code')}: "
                               f"{error.get('message')}")
        return body["result"]

    def report(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """`POST /v1/events`: one result per item (accepted, duplicate, rejected, ...)."""
        response = self.http.post("/v1/events", json=items)
        body: dict[str, Any] = response.json()
        if response.status_code not in (200, 202) or body.get("rejected") or body.get("failed"):
            raise RuntimeError(f"/v1/events: {response.status_code} {json.dumps(body)}")
        return body


# --------------------------------------------------------------------------- the agent's model


def answer(model: str, system_prompt: str, message: str, tools: list[tuple[str, bool]]
           ) -> tuple[str, int]:
    """THE EXAMPLE'S FAKE MODEL: replace this with your LLM call (OpenAI, Ollama, ...), with
    `system_prompt` (what Habitus said the prompt should carry) as the system message and
    `model` as the model. Returns the answer and the tokens it used."""
    wants_short = any(w in system_prompt.lower() for w in ("terse", "concise", "short"))
    used = ", ".join(name for name, ok in tools if ok)
    reply = f"[{model}] " + ("Done." if wants_short else f"Here is my answer to: {message}")
    if used:
        reply += f" (used {used})"
    return reply, len(system_prompt.split()) + len(message.split()) + len(reply.split())


# --------------------------------------------------------------------------- the loop


def show(step: str, text: str) -> None:
    print(f"  {step:<16} {text}", flush=True)


def turn(habitus: Habitus, user: str, session: str, n: int, message: str,
         tools: list[tuple[str, bool]], score: float, previous_at: float | None) -> float:
    print(f"\nturn {n}: {message!r}", flush=True)
    started = time.time()

    context = habitus.rpc("prompt.context", user_id=user, request=message, tools=TOOLS)
    sections = ", ".join(f"{s['name']} ({len(s['content'])} chars)" for s in context["sections"])
    show("prompt.context", f"profile v{context['version']}; sections: {sections or 'none'}")
    if context["steered_by"]:
        show("", f"steered by habit: {'; '.join(context['steered_by'])}")
    for line in context["text"].splitlines()[:8]:
        show("", f"| {line}")

    choice = habitus.rpc("router.select_model", query=message, available_models=MODELS,
                         user_id=user, record=True)
    show("router", f"{choice['model']} by {choice['policy']} ({choice['query_class']}): "
                   f"{choice['reason']}")

    reply, tokens = answer(choice["model"], context["text"], message, tools)
    ended = time.time()
    show("answer", reply)

    trace_id = choice["decision_id"]  # the routing decision and the run share one id
    steps: list[dict[str, Any]] = [{"step_type": "llm", "timestamp": started,
                                    "duration_seconds": round(ended - started, 3),
                                    "input": {"model": choice["model"]},
                                    "output": {"tokens": tokens}}]
    steps += [{"step_type": "tool", "timestamp": ended, "duration_seconds": 0.1,
               "input": {"tool": name}, "output": {"success": ok}} for name, ok in tools]
    outcome = "success" if score >= 0.5 else "failure"
    items = [
        {"type": "TurnRecorded", "user_id": user, "payload": {
            "session_id": session, "turn_id": f"t{n}", "channel": "example",
            "user_message": message, "assistant_message": reply,
            "user_at": started, "assistant_at": ended, "previous_assistant_at": previous_at,
            "tool_calls": [{"tool_name": name, "ok": ok,
                            "output_summary": None if ok else "timed out"}
                           for name, ok in tools]}},
        {"type": "TraceCompleted", "user_id": user, "payload": {
            "trace_id": trace_id, "query": message, "agent": "example-agent",
            "model": choice["model"], "engine": "fake", "steps": steps, "result": reply,
            "outcome": outcome, "started_at": started, "ended_at": ended,
            "total_tokens": tokens, "total_latency_seconds": round(ended - started, 3)}},
        {"type": "FeedbackGiven", "user_id": user, "payload": {
            "trace_id": trace_id, "score": score, "outcome": outcome}},
    ]
    result = habitus.report(items)
    show("/v1/events", ", ".join(f"{r['type']} {r['status']}" for r in result["results"]))
    return ended


def settle(habitus: Habitus, user: str, turns: int, seconds: float) -> None:
    """What the loop taught Habitus: the traces counted, and the next prompt's context (the
    correction of turn 2 is a preference, the edict of turn 3 a critical rule for
    `send_email`). Waits for them at most `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        summary = habitus.rpc("traces.summary", user_id=user)
        rules = habitus.rpc("memory.tool_rule_list", user_id=user)["rules"]
        context = habitus.rpc("prompt.context", user_id=user, tools=TOOLS)
        # the preferences come with the next cache rebuild, a few seconds after the evidence
        learned = {s["name"] for s in context["sections"]} >= {"user_profile", "tool_rules"}
        if (summary["traces"] >= turns and rules and learned) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    print(f"\nlearned, for {user}:", flush=True)
    show("traces.summary", f"{summary['traces']} traces, success rate "
                           f"{summary['success_rate']}, mean feedback {summary['avg_feedback']}, "
                           f"{summary['tool_calls']} tool calls")
    for rule in rules:
        show("tool rule", f"[{rule['priority']}] {rule['tool_name']}: {rule['rule']}")
    show("prompt.context", f"{len(context['text'])} chars for the next prompt:")
    for line in context["text"].splitlines():
        show("", f"| {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="the gateway (default: see above)")
    parser.add_argument("--key", default=None, help="an API key (default: see above)")
    parser.add_argument("--user", default="alice", help="the user the agent talks to")
    parser.add_argument("--session", default=None, help="the conversation (default: new)")
    parser.add_argument("--settle", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait at the end for what Habitus learned")
    args = parser.parse_args(argv)

    habitus = Habitus(gateway_url(args.url), api_key(args.key))
    session = args.session or f"example-{uuid.uuid4().hex[:8]}"
    print(f"gateway {habitus.http.base_url}, user {args.user}, session {session}", flush=True)
    previous_at = None
    for n, (message, tools, score) in enumerate(SCRIPT, start=1):
        # The previous answer's time lets Habitus read a quick follow-up as a correction.
        previous_at = turn(habitus, args.user, session, n, message, tools, score, previous_at)

    # Habitus learns asynchronously: the turns, traces and scores are folded in a moment.
    settle(habitus, args.user, len(SCRIPT), args.settle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
