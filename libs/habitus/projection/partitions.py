"""A projection's partitions: which slots each one reads, and the subject filters that say so.

The streams store every message with a user slot and a tenant slot (`habitus.subjects`). A
projection split into `count` partitions gives partition `index` the slots `s` with
`s % count == index`, so any count dividing `SLOTS` works and a change of count never needs a
stored subject to change. What must be seen in order decides which slot a projection keys on
(`Projection.partition_by`): the user's, for per-user state (most projections), or the
tenant's, for state a whole tenant shares. Either way one user's (or tenant's) events all land
in one partition, in stream order.

A partition's consumer filters with one subject per event type and slot (`filters`); the
whole projection (count 1) keeps one filter per type, `<root>.<Type>.>`, which also matches the
messages a stream stored before it carried the tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from habitus.subjects import SLOTS, slot_of, tenant_slot_of

#: the slot a projection keys its partitions on
PartitionKey = Literal["user", "tenant"]

#: partition counts a projection may have (each divides SLOTS)
COUNTS = tuple(n for n in range(1, SLOTS + 1) if SLOTS % n == 0)


def check_count(count: int) -> int:
    if count not in COUNTS:
        raise ValueError(f"a projection's partitions must number one of "
                         f"{', '.join(map(str, COUNTS))} (they share {SLOTS} slots), "
                         f"got {count}")
    return count


@dataclass(frozen=True, order=True, slots=True)
class Partition:
    """Partition `index` of `count`: the slots `s` with `s % count == index`."""

    index: int
    count: int

    def __post_init__(self) -> None:
        check_count(self.count)
        if not 0 <= self.index < self.count:
            raise ValueError(f"partition {self.index} of {self.count} does not exist")

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def whole(self) -> bool:
        return self.count == 1

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(range(self.index, SLOTS, self.count))

    def covers(self, slot: int) -> bool:
        return slot % self.count == self.index

    @property
    def suffix(self) -> str:
        """What names this partition's consumer, lock and log lines apart ('' when whole)."""
        return "" if self.whole else f"__p{self.index}of{self.count}"

    @classmethod
    def parse(cls, label: str) -> Partition:
        """`"2/4"` -> Partition(2, 4)."""
        index, sep, count = label.partition("/")
        if not sep or not index.isdigit() or not count.isdigit():
            raise ValueError(f"a partition is written index/count (e.g. 2/4), got {label!r}")
        return cls(int(index), int(count))


WHOLE = Partition(0, 1)


def layout(count: int) -> list[Partition]:
    """Every partition of a projection split `count` ways."""
    check_count(count)
    return [Partition(i, count) for i in range(count)]


def partition_filter(subject_filter: str, key: PartitionKey, slot: int) -> str:
    """`subject_filter` (a projection's filter on one event type, in any of its spellings:
    `<root>.<T>.>`, `<root>.<T>.<tenant>.<user>`, `...<user>.*.*`) narrowed to one slot.

    Family roots are three tokens (`habitus.v1.event`), so the type is the fourth token, the
    tenant and user the fifth and sixth, the slots the seventh and eighth."""
    tokens = subject_filter.split(".")
    if ">" in tokens[:-1] or len(tokens) < 5 or len(tokens) > 8:
        raise ValueError(f"cannot partition the subject filter {subject_filter!r}")
    if tokens[-1] == ">":
        tokens = tokens[:-1]
    tokens += ["*"] * (8 - len(tokens))
    position = 6 if key == "user" else 7
    if tokens[position] not in ("*", str(slot)):
        raise ValueError(f"{subject_filter!r} already names another slot")
    tokens[position] = str(slot)
    return ".".join(tokens)


def filters(subject_filters: Iterable[str], key: PartitionKey, partition: Partition
            ) -> list[str]:
    """The subject filters of `partition` of a projection whose whole filters are
    `subject_filters`: one per filter and slot (the filters themselves when whole)."""
    whole = list(subject_filters)
    if partition.whole:
        return whole
    return [partition_filter(f, key, slot) for f in whole for slot in partition.slots]


def slot_for(key: PartitionKey, tenant_id: str, user_id: str) -> int:
    """The slot a projection keyed on `key` reads this tenant's (and user's) events under."""
    return slot_of(tenant_id, user_id) if key == "user" else tenant_slot_of(tenant_id)


def owners(partitions: Sequence[Partition], slot: int) -> list[Partition]:
    """The partitions among `partitions` that read `slot` (one per layout present)."""
    return [p for p in partitions if p.covers(slot)]
