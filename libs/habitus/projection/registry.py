"""Finding projections by name, for `habitus replay` and the service runner.

Services register theirs under the `habitus.projections` entry-point group; a `module:attr` path
works too (tests, one-off tools). The attribute is a Projection instance or a zero-argument factory.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from habitus.projection.base import Projection

GROUP = "habitus.projections"


def available() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def resolve(name: str) -> Projection:
    for ep in entry_points(group=GROUP):
        if ep.name == name:
            return _instantiate(ep.load(), name)
    if ":" in name:
        module, _, attr = name.partition(":")
        return _instantiate(getattr(importlib.import_module(module), attr), name)
    known = ", ".join(sorted(available())) or "none registered yet"
    raise LookupError(f"unknown projection {name!r} (known: {known})")


def _instantiate(obj: Any, name: str) -> Projection:
    if isinstance(obj, Projection):
        return obj
    if callable(obj):
        made = obj()
        if isinstance(made, Projection):
            return made
    raise TypeError(f"{name} is not a Projection or a factory of one")
