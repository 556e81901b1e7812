"""Which replica applies which partition: a pure function of who is alive and the layouts.

Every replica of a service computes the same assignment from the same two inputs, the live
members (their leases in the service's schema) and the projections' layouts (their checkpoint
rows), so no replica has to tell another what to do. As in a Kafka Streams group, the members
are taken in a fixed order and the partitions dealt out round-robin, projection by projection,
the deal carrying on where the previous projection's stopped:

* every member gets the same number of partitions in all, give or take one;
* one projection's partitions go to as many different members as there are (its work spreads
  before any member gets two of it);
* a member joining or leaving changes the deal for everyone at once; each replica then stops
  the runners it lost (finishing their batch, releasing their locks) and starts the ones it
  gained, which wait for a lock still held by a replica that has not noticed yet.

Who really applies a partition is still decided by its advisory lock and fenced by its epoch
(`habitus.projection.leadership`, `habitus.projection.checkpoints`): two replicas that briefly
disagree about the deal cannot both commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from habitus.projection.partitions import Partition

#: one partition of one projection
Slice = tuple[str, Partition]


def assign(members: Iterable[str], layouts: Mapping[str, Sequence[Partition]]
           ) -> dict[str, list[Slice]]:
    """member -> the (projection, partition) pairs it applies. Every partition of `layouts`
    goes to exactly one member (none when there are no members)."""
    order = sorted(set(members))
    deal: dict[str, list[Slice]] = {m: [] for m in order}
    if not order:
        return deal
    cursor = 0
    for projection in sorted(layouts):
        for partition in sorted(layouts[projection]):
            deal[order[cursor % len(order)]].append((projection, partition))
            cursor += 1
    return deal
