"""A tenant's configuration: the settings an optimisation run may change, by dotted path.

A tenant's agents are routed and prompted by Habitus; the part of that an operator (or an
optimisation run) may tune is this flat namespace of dotted paths, each with a type and a range:

| path | value |
| --- | --- |
| `routing.policy` | a routing policy (`heuristic`, `learned`, `sft`, `bandit`, `grpo`) |
| `routing.min_samples` | traces a query class needs before the table policies trust it |
| `routing.model_for.<class>` | the model for one query class (code, math, short, long, general) |
| `routing.models` | the models routing may choose among (of those a request offers) |
| `generation.temperature`, `.top_p`, `.max_tokens` | what routing answers recommend |
| `generation.system_prompt` | the system prompt a routing answer recommends |
| `prompt.examples` | worked examples of the request's query class in the context (0: none) |
| `prompt.skills` | the tool sequences that worked for the request's class, in the context |
| `prompt.examples_chars` | the most characters the examples and skills take together |
| `routing.online_switch` | the learned policy's conservative online switch below min_samples |

It is part of the contract because three parties read it: the optimizer validates search spaces
and applied configurations against it, the trace router routes by the `routing.*` and
`generation.*` paths, and the profile renderer shapes `prompt.context` by the `prompt.*` ones.
Validation says which path is wrong and why, so an RPC answers with that as its field error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

QueryClass = Literal["code", "math", "short", "long", "general"]
#: the query classes a query is sorted into (`habitus.routing.context.query_class`)
QUERY_CLASSES: Final[tuple[QueryClass, ...]] = ("code", "math", "short", "long", "general")
#: the routing policies, by name (`habitus.routing.policies.POLICIES` implements them)
POLICY_NAMES: Final = ("heuristic", "learned", "sft", "bandit", "grpo")

Kind = Literal["choice", "number", "integer", "text", "flag", "names"]


@dataclass(frozen=True, slots=True)
class Setting:
    """One path of the namespace: its kind, its range, what it does."""

    path: str
    kind: Kind
    description: str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    #: text settings: the longest value
    max_length: int = 256


_MODEL_FOR: Final = "routing.model_for."

SETTINGS: Final[Mapping[str, Setting]] = {s.path: s for s in (
    Setting("routing.policy", "choice", "the routing policy of requests that name none",
            choices=POLICY_NAMES),
    Setting("routing.min_samples", "integer",
            "traces a query class needs before the learned and sft policies trust it",
            low=1, high=10_000),
    Setting("routing.models", "names",
            "the models routing may choose among, of those a request offers"),
    *(Setting(f"{_MODEL_FOR}{cls}", "text", f"the model {cls} queries are routed to when it "
              "is offered", max_length=256) for cls in QUERY_CLASSES),
    Setting("generation.temperature", "number", "the sampling temperature recommended",
            low=0.0, high=2.0),
    Setting("generation.top_p", "number", "the nucleus sampling mass recommended",
            low=0.0, high=1.0),
    Setting("generation.max_tokens", "integer", "the longest answer recommended, in tokens",
            low=1, high=1_000_000),
    Setting("generation.system_prompt", "text", "the system prompt recommended",
            max_length=20_000),
    Setting("prompt.examples", "integer",
            "worked examples of the request's query class prompt.context carries (0: none)",
            low=0, high=10),
    Setting("prompt.skills", "flag",
            "prompt.context carries the tool sequences that worked for the request's class"),
    Setting("prompt.examples_chars", "integer",
            "the most characters the examples and skills sections take together",
            low=100, high=100_000),
    Setting("routing.online_switch", "flag",
            "below min_samples, the learned policy routes a class to the model of its latest "
            "well-rated success instead of the heuristic (the conservative online switch)"),
)}


class ConfigurationError(ValueError):
    """A configuration (or a search space over one) is invalid: `errors` lists each
    (dotted path, reason), and the message joins them."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{path}: {reason}" for path, reason in errors))


def setting_of(path: str) -> Setting:
    """The setting at `path`; `LookupError` naming the known paths for any other."""
    found = SETTINGS.get(path)
    if found is None:
        if path.startswith(_MODEL_FOR):
            raise LookupError(f"unknown query class {path[len(_MODEL_FOR):]!r}; known: "
                              f"{', '.join(QUERY_CLASSES)}")
        raise LookupError("unknown setting; known: routing.policy, routing.min_samples, "
                          "routing.model_for.<class>, routing.models, routing.online_switch, "
                          "generation.temperature, generation.top_p, generation.max_tokens, "
                          "generation.system_prompt, prompt.examples, prompt.skills, "
                          "prompt.examples_chars")
    return found


def check_value(setting: Setting, value: Any) -> Any:
    """`value` as the setting holds it (an integral float for an integer setting becomes an
    int); `ValueError` with the reason when it does not fit."""
    if setting.kind == "flag":
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value
    if setting.kind == "names":
        if not isinstance(value, list | tuple) or not value:
            raise ValueError("must be a non-empty list of names")
        names: list[str] = []
        for item in value:
            if not isinstance(item, str) or not item.strip() or len(item) > setting.max_length:
                raise ValueError(f"every name must be a non-empty string of at most "
                                 f"{setting.max_length} characters")
            if item not in names:
                names.append(item)
        return sorted(names)
    if setting.kind in ("choice", "text"):
        if not isinstance(value, str) or not value.strip():
            raise ValueError("must be a non-empty string")
        if len(value) > setting.max_length:
            raise ValueError(f"longer than {setting.max_length} characters")
        if setting.choices and value not in setting.choices:
            raise ValueError(f"must be one of {', '.join(setting.choices)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if not math.isfinite(value):
        raise ValueError("must be finite")
    if setting.kind == "integer":
        if value != int(value):
            raise ValueError("must be a whole number")
        value = int(value)
    else:
        value = float(value)
    if setting.low is not None and value < setting.low:
        raise ValueError(f"must be at least {setting.low:g}")
    if setting.high is not None and value > setting.high:
        raise ValueError(f"must be at most {setting.high:g}")
    return value


def validate_configuration(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` checked path by path, in key order; `ConfigurationError` listing every wrong
    path at once."""
    out: dict[str, Any] = {}
    errors: list[tuple[str, str]] = []
    for path in sorted(params):
        try:
            out[path] = check_value(setting_of(path), params[path])
        except (LookupError, ValueError) as exc:
            errors.append((path, str(exc)))
    if errors:
        raise ConfigurationError(errors)
    return out


def model_for(params: Mapping[str, Any], query_class: str) -> str | None:
    """The model the configuration routes `query_class` to, if it sets one."""
    value = params.get(f"{_MODEL_FOR}{query_class}")
    return value if isinstance(value, str) else None


def section(params: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The settings under `prefix.` without it (`generation` → `{"temperature": 0.2}`)."""
    head = prefix + "."
    return {k[len(head):]: v for k, v in sorted(params.items()) if k.startswith(head)}
