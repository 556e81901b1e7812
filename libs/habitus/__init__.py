"""Habitus: the learning layer for AI agents.

The shared package every service imports: the event catalog, subjects, the bus, the projection
runner, storage, configuration, telemetry, the embedded runtime and the CLI.
"""

__version__ = "0.1.0"
