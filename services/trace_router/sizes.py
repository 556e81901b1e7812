"""Model sizes in billions of parameters, and the "largest" and "smallest" of a request's models.

A size comes from, in order: the request (`available_models: [name | {name,
parameter_count_b}]`), the model's name (`qwen3:8b` → 8, `mixtral:8x7b` → 56, `qwen2.5:1.5b` →
1.5, `smollm:135m` → 0.135), then `CATALOG`, a few common names that carry no size tag. Anything
else is unknown (`None`): in practice a cloud model (`gpt-4o`, `claude-sonnet-4`).

Unknown is not zero. The reference scores an unknown size as 0 parameters, so "largest" can never
pick a cloud model and "smallest" has to special-case zero; here an unknown model counts as larger
than any local one for `largest` and is never `smallest` while a sized one is available. Ties
go to the first model in the order given, so a request decides them, not dict or set order.

Pure: no I/O, no registry; the caller passes the request's models and gets plain values back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

Sizes = Mapping[str, float | None]

#: a size tag: optional experts ("8x"), a number, "b" or "m"; not glued to a letter, digit or
#: dot on its left (so "v2", "3.2" and "q4" are not sizes) nor to a letter or digit on its right
_SIZE_TAG = re.compile(r"(?<![A-Za-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?![A-Za-z0-9])",
                       re.IGNORECASE)

#: common names whose default tag has no size in it (Ollama's defaults), in billions
CATALOG: Final[Mapping[str, float]] = {
    "codestral": 22.0,
    "mistral": 7.0,
    "mixtral": 56.0,
    "llama3": 8.0,
    "llama3.1": 8.0,
    "llama3.2": 3.0,
    "llama3.3": 70.0,
    "qwen2.5": 7.0,
    "qwen2.5-coder": 7.0,
    "qwen3": 8.0,
    "deepseek-coder-v2": 16.0,
    "deepseek-r1": 8.0,
    "gemma2": 9.0,
    "gemma3": 4.0,
    "phi3": 3.8,
    "phi4": 14.0,
}


def parse_size(name: str) -> float | None:
    """The size a model's name states, in billions; the first size tag wins.

    The first tag is the total: in "mixtral:8x7b" it is 8 experts of 7B, in "…-16b-a3b" the
    second tag is the active share, which says less about cost and quality than the total.
    """
    match = _SIZE_TAG.search(name)
    if match is None:
        return None
    experts, number, unit = match.groups()
    size = float(number) * (int(experts) if experts else 1)
    if unit.lower() == "m":
        size /= 1000.0
    return size if size > 0 else None


def catalog_size(name: str) -> float | None:
    """The catalog's size for a name, ignoring case and a ":latest" tag."""
    key = name.strip().lower()
    if key.endswith(":latest"):
        key = key[: -len(":latest")]
    return CATALOG.get(key)


def size_of(name: str, given: Any = None) -> float | None:
    """A model's size: `given` when it is a positive finite number, else its name, else the
    catalog, else unknown.

    A given 0 (or a negative, NaN, a bool, a string) means the client does not know the size,
    the way the reference writes unknown, so it falls through to the name instead of making
    the model the smallest.
    """
    if isinstance(given, int | float) and not isinstance(given, bool):
        value = float(given)
        if math.isfinite(value) and value > 0:
            return value
    parsed = parse_size(name)
    if parsed is not None:
        return parsed
    return catalog_size(name)


def resolve(available: Sequence[str | Mapping[str, Any]] | None
            ) -> tuple[tuple[str, ...], dict[str, float | None]]:
    """The request's model names in order (blank and repeated names dropped) and their sizes.

    An entry is a name or `{"name", "parameter_count_b"?}`; an entry with no usable name is
    skipped rather than failing the request, and a repeated name keeps its first size.
    """
    names: list[str] = []
    sizes: dict[str, float | None] = {}
    for entry in available or ():
        given: Any = None
        if isinstance(entry, str):
            name = entry.strip()
        elif isinstance(entry, Mapping):
            raw = entry.get("name")
            if not isinstance(raw, str):
                continue
            name = raw.strip()
            given = entry.get("parameter_count_b")
        else:
            continue
        if not name or name in sizes:
            continue
        names.append(name)
        sizes[name] = size_of(name, given)
    return tuple(names), sizes


def largest(models: Sequence[str], sizes: Sizes) -> str | None:
    """The largest model: the first of unknown size if any (a cloud model), else the first of
    the greatest size; `None` for no models."""
    best: str | None = None
    best_size = -math.inf
    for model in models:
        size = sizes.get(model)
        if size is None:
            return model
        if size > best_size:
            best, best_size = model, size
    return best


def smallest(models: Sequence[str], sizes: Sizes) -> str | None:
    """The first of the least size among sized models; the first model when none is sized;
    `None` for no models."""
    best: str | None = None
    best_size = math.inf
    for model in models:
        size = sizes.get(model)
        if size is not None and size < best_size:
            best, best_size = model, size
    if best is None and models:
        return models[0]
    return best
