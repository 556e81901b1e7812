"""Partitions of a projection and who applies them: pure functions, with their properties.

Every slot belongs to exactly one partition of a layout, whatever its count; a partition's
filters select its slots and nothing else; the deal gives every partition to exactly one live
member, the same number to each (give or take one), and spreads each projection's partitions
over as many members as it can.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from habitus.projection.assignment import assign
from habitus.projection.partitions import (
    COUNTS,
    WHOLE,
    Partition,
    filters,
    layout,
    owners,
    partition_filter,
    slot_for,
)
from habitus.subjects import SLOTS, slot_of, tenant_slot_of

counts = st.sampled_from(COUNTS)
ids = st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)


def test_counts_divide_the_slots_and_others_are_refused() -> None:
    assert COUNTS == (1, 2, 4, 8, 16)
    for bad in (0, 3, 5, 32):
        with pytest.raises(ValueError, match="must number one of"):
            layout(bad)
    with pytest.raises(ValueError, match="does not exist"):
        Partition(4, 4)


@given(counts, st.integers(0, SLOTS - 1))
def test_every_slot_has_exactly_one_partition_in_a_layout(count: int, slot: int) -> None:
    assert len(owners(layout(count), slot)) == 1
    assert sum(len(p.slots) for p in layout(count)) == SLOTS


@given(counts, counts, ids, ids)
def test_a_user_is_in_one_partition_of_each_layout_present(old: int, new: int, tenant: str,
                                                          user: str) -> None:
    """During a repartition both layouts exist: a user's slot has one partition in each."""
    both = [*layout(old), *([] if new == old else layout(new))]
    found = owners(both, slot_of(tenant, user))
    assert sorted(p.count for p in found) == sorted({old, new})


def test_labels_parse_back() -> None:
    assert Partition.parse("2/4") == Partition(2, 4)
    assert Partition(2, 4).label == "2/4" and WHOLE.label == "0/1"
    assert WHOLE.suffix == "" and Partition(2, 4).suffix == "__p2of4"
    for bad in ("2", "a/4", "2/3", "4/4"):
        with pytest.raises(ValueError):
            Partition.parse(bad)


def test_a_filter_is_narrowed_to_a_slot_in_every_spelling() -> None:
    assert partition_filter("habitus.v1.event.CacheRebuilt.>", "user", 3) == (
        "habitus.v1.event.CacheRebuilt.*.*.3.*")
    assert partition_filter("habitus.v1.event.CacheRebuilt.>", "tenant", 3) == (
        "habitus.v1.event.CacheRebuilt.*.*.*.3")
    # a test's projection scoped to a tenant, in the published and the stored spelling
    assert partition_filter("habitus.v1.ingest.turn.acme.*", "user", 5) == (
        "habitus.v1.ingest.turn.acme.*.5.*")
    assert partition_filter("habitus.v1.ingest.turn.acme.*.*.*", "user", 5) == (
        "habitus.v1.ingest.turn.acme.*.5.*")
    with pytest.raises(ValueError, match="another slot"):
        partition_filter("habitus.v1.ingest.turn.acme.*.4.*", "user", 5)
    with pytest.raises(ValueError, match="cannot partition"):
        partition_filter("habitus.v1.>", "user", 1)


def test_the_whole_projection_keeps_its_own_filters() -> None:
    whole = ["habitus.v1.event.A.>", "habitus.v1.event.B.>"]
    assert filters(whole, "user", WHOLE) == whole
    part = filters(whole, "user", Partition(1, 4))
    assert part == [f"habitus.v1.event.{t}.*.*.{s}.*" for t in "AB" for s in (1, 5, 9, 13)]


@given(ids, ids, counts)
def test_the_slot_a_projection_reads_follows_its_key(tenant: str, user: str, count: int
                                                    ) -> None:
    assert slot_for("user", tenant, user) == slot_of(tenant, user)
    assert slot_for("tenant", tenant, user) == tenant_slot_of(tenant)
    # a tenant-keyed projection keeps every user of a tenant in one partition
    [mine] = owners(layout(count), slot_for("tenant", tenant, user))
    [theirs] = owners(layout(count), slot_for("tenant", tenant, user + "x"))
    assert mine == theirs


# ---------------------------------------------------------------------- the deal

layouts = st.dictionaries(st.from_regex(r"[a-z]{1,6}\.[a-z]{1,6}", fullmatch=True),
                          counts, min_size=1, max_size=12)
members = st.lists(st.from_regex(r"m[0-9]{1,3}", fullmatch=True), min_size=1, max_size=6,
                   unique=True)


@given(layouts, members)
def test_every_partition_goes_to_exactly_one_member(shape: dict[str, int], who: list[str]
                                                   ) -> None:
    parts = {name: layout(count) for name, count in shape.items()}
    deal = assign(who, parts)
    dealt = Counter(s for share in deal.values() for s in share)
    assert dealt == Counter((name, p) for name, ps in parts.items() for p in ps)
    assert set(deal) == set(who)


@given(layouts, members)
def test_members_get_the_same_number_give_or_take_one(shape: dict[str, int], who: list[str]
                                                     ) -> None:
    deal = assign(who, {name: layout(count) for name, count in shape.items()})
    sizes = [len(share) for share in deal.values()]
    assert max(sizes) - min(sizes) <= 1


@given(layouts, members)
def test_a_projection_spreads_before_a_member_gets_two_of_it(shape: dict[str, int],
                                                             who: list[str]) -> None:
    deal = assign(who, {name: layout(count) for name, count in shape.items()})
    for name, count in shape.items():
        per_member = Counter(m for m, share in deal.items() for n, _ in share if n == name)
        assert max(per_member.values()) - min(per_member.get(m, 0) for m in who) <= 1, (
            name, count, per_member)


@given(layouts, members)
def test_every_member_computes_the_same_deal(shape: dict[str, int], who: list[str]) -> None:
    parts = {name: layout(count) for name, count in shape.items()}
    assert assign(who, parts) == assign(list(reversed(who)), dict(reversed(parts.items())))


def test_no_member_no_deal() -> None:
    assert assign([], {"a.b": layout(4)}) == {}


def test_partitions_name_their_consumers_apart() -> None:
    from habitus.projection.consumer import durable_name
    from tests.support.tally import TallyProjection

    projection = TallyProjection("s", "t")
    assert durable_name(projection) == projection.durable
    assert durable_name(projection, Partition(3, 4)) == projection.durable + "__p3of4"
