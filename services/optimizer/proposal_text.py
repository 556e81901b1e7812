"""What the LLM proposer asks and how its answer is read (pure; `proposers` makes the call).

The prompt gives the model the space (each dimension with its kind and allowed values, the fixed
values, the rules in words), the objectives, the trials so far with their metrics (the latest
`HISTORY_TRIALS`) and the frontier, and asks for one configuration as a JSON object with the
keys `params` and `reasoning`.

Its answer is read leniently, as models answer: the first ```json fenced block, else the first
fenced block of any kind, else the first balanced `{...}` in the text. An object without a
`params` key is taken as the parameters themselves. An answer none of that reads is a parse
failure: the trial runs with the fixed values alone, and says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from habitus.contract.optimize import METRICS, Objective, SearchSpace

HISTORY_TRIALS: Final = 20
_JSON_FENCE = re.compile(r"```[ \t]*json[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_ANY_FENCE = re.compile(r"```[^\n`]*\r?\n?(.*?)```", re.DOTALL)

SYSTEM: Final = (
    "You tune the configuration of an AI agent platform for one tenant. Each configuration is "
    "measured on the tenant's own recorded traffic. Propose the next configuration to try: one "
    "that is likely to improve on the trials so far, or that tests a promising trade-off the "
    "frontier does not cover yet. Use only the dimensions and values given. Reply with one "
    "```json fenced block holding an object with two keys: \"params\" (dotted path -> value, "
    "one entry per dimension) and \"reasoning\" (one or two sentences).")


@dataclass(frozen=True, slots=True)
class Tried:
    """A trial as the prompt shows it."""

    trial_id: str
    params: Mapping[str, Any]
    metrics: Mapping[str, float | None]


def _dimension_line(space: SearchSpace, name: str) -> str:
    d = space.dimension(name)
    if d.kind in ("continuous", "integer"):
        allowed = f"{d.kind} in [{d.low:g}, {d.high:g}]"
    elif d.kind == "subset":
        allowed = f"a non-empty subset of {json.dumps(d.values)}"
    elif d.kind == "text" and not d.values:
        allowed = "free text"
    else:
        allowed = f"one of {json.dumps(d.values)}"
    about = f" ({d.description})" if d.description else ""
    return f"- {d.name}: {allowed}{about}"


def _metrics(metrics: Mapping[str, float | None]) -> str:
    return ", ".join(f"{k}={'n/a' if v is None else f'{v:.6g}'}" for k, v in metrics.items())


def build_prompt(space: SearchSpace, objectives: Sequence[Objective], history: Sequence[Tried],
                 frontier: Sequence[str], merge_from: Sequence[Tried] = ()) -> str:
    """The user message of one proposal (see the module docstring)."""
    lines = ["Dimensions:", *(_dimension_line(space, d.name) for d in space.search)]
    if space.fixed:
        lines += ["", f"Fixed (always applied): {json.dumps(space.fixed, sort_keys=True)}"]
    if space.constraints.rules:
        lines += ["", "Rules:", *(f"- {r}" for r in space.constraints.rules)]
    if space.constraints.exclude:
        lines += ["", "Never propose these combinations:",
                  *(f"- {json.dumps(e.when, sort_keys=True)}" for e in space.constraints.exclude)]
    lines += ["", "Objectives:", *(
        f"- {o.direction} {o.metric} (weight {o.weight:g}): {METRICS[o.metric]}"
        for o in objectives)]
    shown = list(history)[-HISTORY_TRIALS:]
    if shown:
        lines += ["", f"Trials so far ({len(history)}, the latest {len(shown)} shown):"]
        lines += [f"- {t.trial_id}: {json.dumps(dict(t.params), sort_keys=True)} -> "
                  f"{_metrics(t.metrics)}" for t in shown]
        lines += ["", "Pareto frontier: " + (", ".join(frontier) or "none yet")]
    else:
        lines += ["", "No trials yet: propose a sensible first configuration."]
    if merge_from:
        lines += ["", "Combine the strengths of these frontier trials into one configuration:",
                  *(f"- {t.trial_id}: {json.dumps(dict(t.params), sort_keys=True)}"
                    for t in merge_from)]
    return "\n".join(lines)


def _first_object(text: str) -> Any:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text.strip())
    except ValueError:
        return None


def parse_answer(text: str) -> tuple[dict[str, Any], str | None] | None:
    """(params, reasoning) read from a model's answer; None when nothing reads as an object."""
    candidates: list[Any] = []
    fenced = _JSON_FENCE.search(text)
    if fenced is not None:
        candidates.append(_loads(fenced.group(1)))
    candidates.extend(_loads(m.group(1)) for m in _ANY_FENCE.finditer(text))
    candidates.append(_first_object(text))
    for value in candidates:
        if not isinstance(value, dict):
            continue
        params = value.get("params", value)
        if not isinstance(params, dict):
            continue
        reasoning = value.get("reasoning") if "params" in value else None
        return dict(params), reasoning if isinstance(reasoning, str) else None
    return None
