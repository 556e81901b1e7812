"""Finding projections by name, for `habitus replay` and `habitus lag`: the installed services'
projections (their descriptors list them), or a `module:attr` path (tests, one-off tools). The
attribute is a Projection instance or a zero-argument factory.

With the services, not the projections: the names come from the installed descriptors.
"""

from __future__ import annotations

import importlib
from typing import Any

from habitus.projection.base import Projection
from habitus.projection.erasure import ErasureProjection
from habitus.service.registry import services


def available() -> dict[str, type[Projection]]:
    return {p.name: p for s in services() for p in s.running_projections()}


def resolve(name: str) -> Projection:
    known = available()
    if name in known:
        cls = known[name]
        if issubclass(cls, ErasureProjection):
            return cls([sibling() for sibling in cls.erases])
        return cls()
    if ":" in name:
        module, _, attr = name.partition(":")
        return _instantiate(getattr(importlib.import_module(module), attr), name)
    raise LookupError(f"unknown projection {name!r} (known: {', '.join(sorted(known))})")


def _instantiate(obj: Any, name: str) -> Projection:
    if isinstance(obj, Projection):
        return obj
    if callable(obj):
        made = obj()
        if isinstance(made, Projection):
            return made
    raise TypeError(f"{name} is not a Projection or a factory of one")
