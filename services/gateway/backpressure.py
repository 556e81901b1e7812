"""Whether an ingest request is pushed back because the pipeline is behind: pure, so every rule
is unit-tested without servers.

A fixed rate limit cannot see that the projections fell minutes behind, and when it refuses, it
refuses whoever comes next. Backpressure looks at the lag instead, and at who caused it: once the
pipeline is further behind than the bound, end to end, a tenant whose
accepted items over that lag window are at least its fair share of everybody's (1 / the tenants
that sent any) is answered 429; a tenant under its fair share passes, so one tenant's burst slows
that tenant and not the others.

At the fair share, not only over it, is pushed back: a tenant alone in the window is the whole
backlog (share 1, fair share 1), and k tenants sending alike are the backlog together; passing
them would leave the pipeline to fall further behind with nobody slowed. A tenant that sent
nothing in the window is never pushed back: its first item cannot be what is late.

End to end is what a person waits for: a turn's sentence waits in each queue on its way to the
prompt (producers, the learning cache twice, the renderer), so the pipeline's lag is the
longest chain of stage lags along the data flow, not the worst single stage. With the worst
stage alone, four queues each held just under the bound let a quiet tenant's sentence wait four
bounds while nobody was pushed back.

Retry-After is the tenant's part of the time the backlog needs, share x lag seconds (rounded up,
at least 1, at most the configured cap, so a client that honours it comes back when its own part
is likely applied, not the whole backlog).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PipelineLag:
    """How far behind the pipeline is, end to end: the slowest chain of projections."""

    #: the stage lags (age of the oldest event each has not acknowledged) summed along the
    #: chain, seconds (0: caught up)
    seconds: float
    #: the stage adding the most to that chain; None when every projection is caught up
    projection: str | None = None
    #: the chain, from the projection reading the ingest to the last; () when caught up
    path: tuple[str, ...] = ()


CAUGHT_UP = PipelineLag(0.0)


@dataclass(frozen=True, slots=True)
class Pushback:
    """A refusal: what the 429 says and its Retry-After."""

    lag: PipelineLag
    #: the tenant's accepted items over the lag window / everybody's
    share: float
    #: 1 / the tenants with items in the window
    fair_share: float
    retry_after: int

    @property
    def projection(self) -> str:
        return self.lag.projection or "unknown"

    @property
    def reason(self) -> str:
        """A bounded category for the metrics: alone in the window, or one of several."""
        return "sole_tenant" if self.fair_share >= 1.0 else "over_fair_share"

    def message(self) -> str:
        return (f"backpressure: the pipeline is {self.lag.seconds:.0f}s behind end to end "
                f"(the largest part in {self.projection}) and this tenant sent {self.share:.0%} of "
                f"the items in that time (its fair share: {self.fair_share:.0%}); retry in "
                f"{self.retry_after}s")

    def details(self) -> dict[str, object]:
        """The body's `backpressure` object (the OpenAPI `Backpressure` schema)."""
        return {"projection": self.projection, "lag_seconds": round(self.lag.seconds, 3),
                "path": list(self.lag.path), "share": round(self.share, 4),
                "fair_share": round(self.fair_share, 4)}


def end_to_end(lags: Mapping[str, float],
               upstream: Mapping[str, Sequence[str]]) -> PipelineLag:
    """The slowest chain: for each projection, its own lag plus the slowest chain into it.

    `upstream[p]`: the projections whose events `p` reads. A projection that reads its own
    events (the learning cache's rebuild requests) holds them in its queue a second time, so
    its lag counts twice on the chain; any longer cycle is cut where it closes."""
    best: dict[tuple[str, frozenset[str]], tuple[float, tuple[str, ...]]] = {}

    def part(name: str) -> float:
        """What the stage adds to a chain through it."""
        loops = name in upstream.get(name, ())
        return max(lags.get(name, 0.0), 0.0) * (2 if loops else 1)

    def chain(name: str, seen: frozenset[str]) -> tuple[float, tuple[str, ...]]:
        if (name, seen) in best:
            return best[name, seen]
        sources = [u for u in upstream.get(name, ()) if u != name and u not in seen]
        before = max((chain(u, seen | {name}) for u in sources), default=(0.0, ()))
        found = (before[0] + part(name), (*before[1], name))
        best[name, seen] = found
        return found

    slowest = max((chain(name, frozenset()) for name in lags), default=(0.0, ()))
    if slowest[0] <= 0:
        return CAUGHT_UP
    return PipelineLag(slowest[0], max(slowest[1], key=part), slowest[1])


def over_bound(lag: PipelineLag, bound_seconds: float) -> bool:
    """Is the pipeline behind enough to push back? Never when the bound is 0 (off)."""
    return bound_seconds > 0 and lag.seconds > bound_seconds


def fair_share(active_tenants: int) -> float:
    """Each tenant's even part of the window: 1 / the tenants that sent items in it."""
    return 1.0 / active_tenants if active_tenants > 0 else 1.0


def share_of(tenant: str, counts: Mapping[str, int]) -> float:
    """The tenant's accepted items / everybody's (0 when nobody sent any)."""
    total = sum(n for n in counts.values() if n > 0)
    return max(counts.get(tenant, 0), 0) / total if total else 0.0


def retry_after(share: float, lag_seconds: float, cap: int) -> int:
    """The tenant's part of the time the backlog needs: ceil(share x lag), in [1, cap]."""
    wanted = math.ceil(max(share, 0.0) * max(lag_seconds, 0.0))
    return max(1, min(wanted, max(cap, 1)))


def decide(tenant: str, counts: Mapping[str, int], lag: PipelineLag, *, bound_seconds: float,
           max_retry_after: int) -> Pushback | None:
    """None when the tenant's ingest may pass, else why and for how long it is pushed back.

    `counts`: accepted items per tenant over the lag window (every gateway's, as far as the
    counts reach). The comparison is in integers (items x tenants against the total), so a
    tenant exactly at its fair share is never on the wrong side of a rounding."""
    if not over_bound(lag, bound_seconds):
        return None
    mine = max(counts.get(tenant, 0), 0)
    if mine == 0:
        return None
    positive = [n for n in counts.values() if n > 0]
    total, active = sum(positive), len(positive)
    if mine * active < total:  # under its fair share
        return None
    share = mine / total
    return Pushback(lag, share, fair_share(active),
                    retry_after(share, lag.seconds, max_retry_after))
