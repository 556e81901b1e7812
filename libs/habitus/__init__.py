"""Habitus: the learning layer for AI agents.

The shared package every service imports: the event catalog, subjects, the bus, the projection
runner, storage, configuration, telemetry, service hosting, the embedded runtime, the demo and
the CLI, in layers that import only downwards (docs/architecture.md, "The library's layers";
pyproject.toml's import-linter contracts hold them to it).
"""

__version__ = "0.1.0"
