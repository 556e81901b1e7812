"""The generated traces both sides of the trace-router benchmark store: the same traces from the
same seed, as plain dicts. Standard library only, so the reference implementation's side
(`openjarvis_side.py`, run in a venv of its own) imports it without importing habitus."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

SEED = 12
T0 = 1_764_000_000.0
STEPS = 4
USERS = 20
MODELS = ("qwen3:8b", "llama3.2:3b", "deepseek-coder-v2:16b", "llama3.3:70b", "gpt-4o")
AGENTS = ("orchestrator", "react", "coder", "simple")
TOOLS = ("search", "calculator", "python", "file_read", "web_fetch", "shell")
QUERIES = (
    "Hi",
    "What is the capital of France?",
    "def foo(): pass -- why does this return None?",
    "import os; list every file under the home directory",
    "solve the integral of x^2 from 0 to 3",
    "calculate the probability of two sixes in a row",
    "Please explain step by step how the process of photosynthesis works in plants",
    "Tell me about the history of the Roman empire and the causes of its fall",
    "Compare the trade-offs of SQLite and Postgres for a small web service",
    "Summarise the release notes of the last three versions",
)
OUTCOMES = ("success", "success", "success", "failure", None)


def trace(rng: random.Random, n: int) -> dict[str, Any]:
    """Trace `n`: a route step, a generate step, a tool call and a respond step."""
    started = T0 + n * 2.0
    model = MODELS[rng.randrange(len(MODELS))]
    tool = TOOLS[rng.randrange(len(TOOLS))]
    prompt, completion = rng.randint(50, 800), rng.randint(20, 600)
    durations = [round(rng.uniform(0.001, 0.05), 4), round(rng.uniform(0.2, 6.0), 4),
                 round(rng.uniform(0.01, 2.0), 4), round(rng.uniform(0.001, 0.05), 4)]
    at = [started, started + durations[0], started + sum(durations[:2]),
          started + sum(durations[:3])]
    steps = [
        {"step_type": "route", "timestamp": at[0], "duration_seconds": durations[0],
         "input": {"query_length": 40}, "output": {"model": model}, "metadata": {}},
        {"step_type": "generate", "timestamp": at[1], "duration_seconds": durations[1],
         "input": {"prompt_tokens": prompt},
         "output": {"tokens": prompt + completion, "completion_tokens": completion},
         "metadata": {"model": model}},
        {"step_type": "tool_call", "timestamp": at[2], "duration_seconds": durations[2],
         "input": {"tool": tool, "arguments": {"q": f"lookup {n}"}},
         "output": {"success": rng.random() < 0.85, "content": f"result {n}"},
         "metadata": {"tool_name": tool}},
        {"step_type": "respond", "timestamp": at[3], "duration_seconds": durations[3],
         "input": {}, "output": {"chars": 120}, "metadata": {}},
    ]
    assert len(steps) == STEPS
    outcome = OUTCOMES[rng.randrange(len(OUTCOMES))]
    feedback = round(rng.uniform(0.0, 1.0), 3) if rng.random() < 0.6 else None
    latency = round(sum(durations), 4)
    return {
        "user_id": f"user{n % USERS}",
        "trace_id": f"trace-{n:07d}",
        "query": f"{QUERIES[rng.randrange(len(QUERIES))]} (#{n})",
        "agent": AGENTS[rng.randrange(len(AGENTS))],
        "model": model,
        "engine": "ollama",
        "result": f"Answer number {n}, produced with {tool}.",
        "outcome": outcome,
        "feedback": feedback,
        "started_at": started,
        "ended_at": started + latency,
        "total_tokens": prompt + completion,
        "total_latency_seconds": latency,
        "steps": steps,
    }


def traces(count: int, start: int = 0, seed: int = SEED) -> Iterator[dict[str, Any]]:
    """Traces `start` .. `start + count - 1`; trace n is the same whatever the range asked."""
    for n in range(start, start + count):
        yield trace(random.Random(seed * 1_000_003 + n), n)
