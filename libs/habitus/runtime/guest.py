"""What runs with the system `habitus up` starts, and on it alone: a `Guest` (the demo), and
the `System` it is given once the gateway is ready.

The dependency points from the guest to the runtime: `habitus.demo` implements `Guest`, the
runtime never imports the demo.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from habitus.config import Settings


@dataclass(frozen=True)
class System:
    """A started system, as a guest reaches it."""

    #: the gateway
    base_url: str
    #: the local `dev` tenant's API key
    key: str
    nats_url: str
    database_url: str
    data_dir: Path


class Guest(Protocol):
    """What runs with the system `habitus up` starts, and on it alone (the demo).

    `up` asks it four things at four moments and knows nothing else of it, so the dependency
    points from the guest to the runtime: `habitus.demo` implements this, the runtime never
    imports the demo."""

    def refusal(self, settings: Settings) -> str | None:
        """Why the guest will not run on a system with these settings (`up` says it and starts
        nothing), or None."""
        ...

    def service_env(self) -> dict[str, str]:
        """Variables for the services' environment (theirs only), asked for once just before
        they start: what the guest's run needs of them (the demo: its scripted model)."""
        ...

    def run(self, system: System) -> bool:
        """The guest's work, in a worker thread once the gateway is ready; True when it did
        all it should."""
        ...

    def stop(self) -> None:
        """Release what `service_env` started; called at shutdown once the services stopped,
        whether or not `run` ran."""
        ...
