"""The projection contract: what every projection of every service must do, proven against
real NATS JetStream and Postgres.

`ProjectionContract` is abstract (pytest does not collect it); one concrete subclass is
generated below for each projection that `running_projections()` lists for each service
of `registry.services(extra=[example.service])`, erasure projections included. A new service
gets the whole contract by being in the registry; a projection consuming a type nobody wrote an
example for fails with "add an example for X".

Each test runs the service's own projection class, scoped to its own tenants (its own name,
checkpoint row, durable consumer and subjects; see harness.py), with the real ProjectionRunner:

a. a prefix of its events applied twice (copies re-published past the stream's duplicate
   window: same event ids, fresh Nats-Msg-Id) leaves its tables and its consequences on the
   stream exactly as applying it once did;
b. a replay from sequence 1 (rows erased, checkpoint reset, emitted_seq 0) in one large batch
   rebuilds exactly the rows the incremental run (batches of 2) built, and re-publishes the
   same consequences (same ids, same payloads) which the stream drops: no extra message;
c. bytes that are no event, between valid events, go to HABITUS_DLQ and are recorded as a dead
   letter at their sequence, and the events after them apply (the same row counts and as many
   consequences as a clean run of the same events for another tenant);
d. `UserErased`, applied by the service's erasure projection, removes every row (and applied
   id) of that user and nothing of another user of the tenant or of another tenant.

For an erasure projection the events are `UserErased`: it owns no tables, so (a)-(c) check
that its (empty) snapshot is unchanged, that it dead-letters poison and goes on; (d) checks it
erases through every projection of its service (each sibling's own (d) proves the rows go).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from habitus.events import Event
from habitus.projection import Projection
from habitus.projection import dlq as dlqh
from habitus.projection.checkpoints import CheckpointStore
from habitus.projection.erasure import ErasureProjection
from habitus.service import registry
from habitus.service.descriptor import ServiceDescriptor
from tests.contract import examples
from tests.contract.harness import (
    Scoped,
    applied_count,
    dead_letters_on_stream,
    emitted_on_stream,
    erase_tenant,
    instantiate,
    publish,
    publish_poison,
    republish_past_window,
    reset_for_replay,
    row_counts,
    snapshot,
)
from tests.support.example_service import main as example
from tests.support.factories import unique

# Not marked slow: the whole contract takes about 10 s (9 projections, 46 tests).

SERVICES = registry.services(extra=[example.service])
CASES = [(s, p) for s in SERVICES for p in s.running_projections()]


def _dump(events: list[Event[Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e.type, e.event_id, e.payload.model_dump(mode="json", by_alias=True))
            for e in events]


class ProjectionContract:
    """The contract, for `projection_class` of the service `descriptor` (set by subclasses)."""

    descriptor: ClassVar[ServiceDescriptor]
    projection_class: ClassVar[type[Projection]]
    #: rounds of one example of each consumed type, per user
    rounds: ClassVar[int] = 2

    # ------------------------------------------------------------------ helpers

    @property
    def erasure(self) -> bool:
        return issubclass(self.projection_class, ErasureProjection)

    def make(self, *tenants: str) -> Scoped:
        return Scoped.of(instantiate(self.projection_class), *tenants)

    def events(self, tenant: str, user: str) -> list[Event[Any]]:
        return examples.sequence(self.projection_class.consumes, tenant, user, self.rounds)

    def assert_exercised(self, snap: dict[str, Any], emitted: list[Any]) -> None:
        """The examples must reach the projection's tables and consequences, or the
        contract proves nothing about it."""
        cls = self.projection_class
        empty = [t for t, rows in snap.items() if not rows]
        assert not empty, (f"{cls.name}: the examples leave {empty} empty; make "
                           "tests/contract/examples.py reach them")
        if cls.emitted_types:
            assert emitted, f"{cls.name}: the examples cause none of {cls.emitted_types}"

    # ------------------------------------------------------------------ the contract

    def test_every_consumed_type_has_an_example(self) -> None:
        missing = [t for t in self.projection_class.consumes if t not in examples.EXAMPLES]
        if missing:
            pytest.fail(f"{self.projection_class.name} consumes {missing}: add an example for "
                        f"{', '.join(missing)} to tests/contract/examples.py")
        for event_type in self.projection_class.consumes:
            for i in range(self.rounds * 3):
                examples.examples_for(event_type, "tenant", "user", i)

    async def test_a_prefix_applied_twice_equals_once(self, nc: Any, pool: Any,
                                                      migrated: None) -> None:
        tenant = unique("ca")
        events = self.events(tenant, "u1") + self.events(tenant, "u2")
        await publish(nc, events)
        scoped = self.make(tenant)
        await scoped.run(nc, pool)
        once = await snapshot(pool, scoped.projection, tenant)
        emitted = await emitted_on_stream(nc, scoped.projection, tenant)
        if self.erasure:
            assert once == {}
        else:
            self.assert_exercised(once, emitted)

        prefix = events[: max(1, len(events) // 2)]
        late = [await republish_past_window(nc, e) for e in prefix]
        await scoped.run(nc, pool)

        assert await snapshot(pool, scoped.projection, tenant) == once
        assert await emitted_on_stream(nc, scoped.projection, tenant) == emitted
        assert (await scoped.last_seq(pool) or 0) >= late[-1]
        assert await dead_letters_on_stream(nc, scoped.projection) == []

    async def test_replay_from_sequence_1_equals_the_incremental_result(
            self, nc: Any, pool: Any, migrated: None) -> None:
        tenant = unique("cb")
        users = ("u1", "u2")
        await publish(nc, [e for u in users for e in self.events(tenant, u)])
        scoped = self.make(tenant)
        await scoped.run(nc, pool, batch_size=2)
        incremental = await snapshot(pool, scoped.projection, tenant)
        on_stream = await emitted_on_stream(nc, scoped.projection, tenant)
        handed = _dump(scoped.emitted)
        if not self.erasure:
            self.assert_exercised(incremental, on_stream)
        assert sorted(i for _, i in on_stream) == sorted(i for _, i, _ in handed)

        await erase_tenant(pool, scoped.projection, tenant, users)
        left = await snapshot(pool, scoped.projection, tenant)
        assert all(not rows for rows in left.values()), f"erase_user left rows: {left}"
        await reset_for_replay(pool, scoped)
        scoped.emitted.clear()
        await scoped.run(nc, pool, batch_size=500)

        assert await snapshot(pool, scoped.projection, tenant) == incremental
        assert _dump(scoped.emitted) == handed, "a replay caused other consequences"
        # re-published with the same ids, and dropped by the stream: no extra message
        assert await emitted_on_stream(nc, scoped.projection, tenant) == on_stream

    async def test_poison_goes_to_the_dlq_and_later_events_still_apply(
            self, nc: Any, pool: Any, migrated: None) -> None:
        tenant, clean_tenant = unique("cc"), unique("cc")
        events = self.events(tenant, "u1")
        half = len(events) // 2
        before = await publish(nc, events[:half])
        # An erasure of u1 also erases the records of u1's dead letters: poison another user.
        poison_user = "u2" if self.erasure else "u1"
        poison_seq = await publish_poison(nc, instantiate(self.projection_class), tenant,
                                          poison_user)
        after = await publish(nc, events[half:])
        await publish(nc, self.events(clean_tenant, "u1"))

        scoped = self.make(tenant)
        clean = self.make(clean_tenant)
        await scoped.run(nc, pool)
        await clean.run(nc, pool)

        async with pool.connection() as conn:
            store = CheckpointStore(scoped.schema)
            letter = await store.dead_letter_at(conn, scoped.name, poison_seq)
            assert letter is not None, f"no dead letter recorded at {poison_seq}"
            assert letter.reason == "invalid_event"
            for seq in [*before, *after]:
                assert await store.dead_letter_at(conn, scoped.name, seq) is None, seq
        letters = await dead_letters_on_stream(nc, scoped.projection)
        assert [m.headers[dlqh.ORIGINAL_SEQ] for m in letters] == [str(poison_seq)]
        assert letters[0].headers[dlqh.REASON] == "invalid_event"
        assert (await scoped.last_seq(pool) or 0) >= after[-1]

        got = await snapshot(pool, scoped.projection, tenant)
        want = await snapshot(pool, clean.projection, clean_tenant)
        assert row_counts(got) == row_counts(want)
        emitted = await emitted_on_stream(nc, scoped.projection, tenant)
        clean_emitted = await emitted_on_stream(nc, clean.projection, clean_tenant)
        assert [t for t, _ in emitted] == [t for t, _ in clean_emitted]
        if not self.erasure:
            self.assert_exercised(want, clean_emitted)
        assert await dead_letters_on_stream(nc, clean.projection) == []

    async def test_user_erased_removes_every_row_of_that_user_and_no_other(
            self, nc: Any, pool: Any, migrated: None) -> None:
        cls = self.projection_class
        if self.erasure:
            assert issubclass(cls, ErasureProjection)
            assert cls.name == f"{self.descriptor.schema}.erasure"
            assert set(cls.erases) == set(self.descriptor.projections), (
                f"{cls.name} does not erase through every projection of "
                f"{self.descriptor.name}")
            return
        tenant, other = unique("cd"), unique("cd")
        await publish(nc, [*self.events(tenant, "A"), *self.events(tenant, "B"),
                           *self.events(other, "A")])
        scoped = self.make(tenant, other)
        await scoped.run(nc, pool)
        a_before = await snapshot(pool, scoped.projection, tenant, "A")
        b_before = await snapshot(pool, scoped.projection, tenant, "B")
        other_before = await snapshot(pool, scoped.projection, other)
        self.assert_exercised(a_before, await emitted_on_stream(nc, scoped.projection, tenant))
        assert await applied_count(pool, cls.schema, tenant, "A", scoped.name) > 0
        b_applied = await applied_count(pool, cls.schema, tenant, "B", scoped.name)
        other_applied = await applied_count(pool, cls.schema, other, "A", scoped.name)

        (erasure_cls,) = [c for c in self.descriptor.running_projections()
                          if issubclass(c, ErasureProjection)]
        siblings = [scoped.projection if sibling is cls else instantiate(sibling)
                    for sibling in erasure_cls.erases]
        erasure = instantiate(erasure_cls, siblings)
        assert isinstance(erasure, ErasureProjection)
        assert scoped.projection in erasure.projections
        await publish(nc, [examples.example_event("UserErased", tenant, "A", 99)])
        await Scoped.of(erasure, tenant).run(nc, pool)

        a_after = await snapshot(pool, scoped.projection, tenant, "A")
        assert {t: rows for t, rows in a_after.items() if rows} == {}, "rows of A are left"
        assert await applied_count(pool, cls.schema, tenant, "A") == 0
        assert await snapshot(pool, scoped.projection, tenant, "B") == b_before
        assert await snapshot(pool, scoped.projection, other) == other_before
        assert await applied_count(pool, cls.schema, tenant, "B", scoped.name) == b_applied
        assert await applied_count(pool, cls.schema, other, "A", scoped.name) == other_applied


def _class_name(projection: type[Projection]) -> str:
    return "Test_" + projection.name.replace(".", "_").replace("-", "_")


for _descriptor, _projection in CASES:
    _name = _class_name(_projection)
    globals()[_name] = type(_name, (ProjectionContract,), {
        "descriptor": _descriptor, "projection_class": _projection, "__module__": __name__,
        "__doc__": f"The contract, for {_projection.name} of {_descriptor.name}."})


def test_a_type_without_an_example_fails_with_a_clear_message() -> None:
    with pytest.raises(examples.MissingExample, match="add an example for ProfileRendered"):
        examples.examples_for("ProfileRendered", "tenant", "user", 0)


def test_every_projection_of_every_service_gets_the_contract() -> None:
    names = {p.name for s in SERVICES for p in s.running_projections()}
    generated = {globals()[_class_name(p)].projection_class.name for _, p in CASES}
    assert generated == names
    assert {"example.pins", "example.erasure"} <= names


#: the projection bookkeeping: every schema has them, CheckpointStore.forget_user erases them
BOOKKEEPING = {"applied_events", "dead_letters"}


@pytest.mark.asyncio
@pytest.mark.parametrize("descriptor", [s for s in SERVICES if s.projections],
                         ids=lambda s: s.name)
async def test_every_table_holding_users_is_one_a_projection_erases(
        descriptor: ServiceDescriptor, pool: Any, migrated: None) -> None:
    """A table with a `user_id` column that no projection declares would be kept by an
    erasure and left out of a replay: a projection that forgets to declare its table fails
    here, whatever its own contract tests could see."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'user_id' "
            "AND table_schema = %s", (descriptor.schema,))
        holding = {f"{descriptor.schema}.{r[0]}" for r in await cur.fetchall()}
    declared = {t for p in descriptor.projections for t in (*p.tables, *p.also_holds)}
    assert holding - {f"{descriptor.schema}.{t}" for t in BOOKKEEPING} == declared
