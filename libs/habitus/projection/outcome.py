"""What applying one batch did, as the runner reports it (and the property tests count it).

Its own module because both halves of a batch fill it in: the fast path
(`habitus.projection.batch`) and poison isolation (`habitus.projection.isolation`), which the
fast path calls; kept in either, the other would import it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchOutcome:
    applied: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    returned: int = 0
    errors: list[str] = field(default_factory=list)
    #: a draining partition was handed deliveries past its cutover (it has drained)
    beyond_cutover: bool = False
