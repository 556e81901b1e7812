"""The crypto-shredding core on a real directory key store: sealing and opening a user's event
payloads, keys bound to their owner, erasure destroying the key (and a copy of a sealed event
made before then staying unreadable), rotation of data keys and of the KEK without losing
anything sealed before."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from habitus.crypto import DirectoryKeyStore, Keyring, SealError, Shredded, load_kek_ring
from habitus.crypto.kek import KekError, parse_env_kek
from habitus.crypto.keyring import KeyMissing
from habitus.crypto.sealing import open_body, seal_body

TURN: dict[str, Any] = {
    "type": "TurnRecorded", "tenant_id": "acme", "user_id": "dana", "event_id": "e1",
    "occurred_at": 1_764_000_000.0, "producer": "gateway", "schema_version": 1,
    "payload": {"session_id": "s1", "turn_id": "t1", "channel": "chat",
                "user_message": "Email sarah.connor@example.com about Project Falcon, "
                                "and keep answers short.",
                "assistant_message": "Done.", "user_at": 1_764_000_000.0,
                "assistant_at": 1_764_000_001.0}}
SECRETS = ("sarah.connor@example.com", "Project Falcon")


@pytest.fixture
def ring(tmp_path: Path) -> Keyring:
    return Keyring(load_kek_ring(None, tmp_path / "kek.json"),
                   DirectoryKeyStore(tmp_path / "keys"))


def test_a_sealed_payload_hides_the_text_and_opens_back_exactly(ring: Keyring) -> None:
    sealed = seal_body(TURN, ring)
    wire = json.dumps(sealed)
    assert not any(s in wire for s in SECRETS)
    assert sealed["user_id"] == "dana" and sealed["type"] == "TurnRecorded"  # routable
    assert open_body(json.loads(wire), ring) == TURN


def test_tenant_events_and_the_tombstone_stay_readable(ring: Keyring) -> None:
    tenant_wide = {**TURN, "user_id": "_tenant"}
    assert seal_body(tenant_wide, ring) == tenant_wide
    tombstone = {**TURN, "type": "UserErased", "payload": {"reason": "asked"}}
    assert seal_body(tombstone, ring) == tombstone


def test_a_payload_moved_to_another_user_does_not_open(ring: Keyring) -> None:
    sealed = seal_body(TURN, ring)
    seal_body({**TURN, "user_id": "sam"}, ring)  # sam has a key too
    with pytest.raises(KeyMissing):  # dana's key id is not one of sam's: refused, not skipped
        open_body({**sealed, "user_id": "sam"}, ring)
    tampered = dict(sealed)
    raw = bytearray(base64.b64decode(sealed["payload"]))
    raw[20] ^= 1
    tampered["payload"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(SealError):
        open_body(tampered, ring)


def test_erasure_destroys_the_key_and_a_copy_made_before_stays_unreadable(
        ring: Keyring, tmp_path: Path) -> None:
    sealed = seal_body(TURN, ring)
    other = seal_body({**TURN, "user_id": "sam"}, ring)
    backup = tmp_path / "backup.json"
    backup.write_text(json.dumps([sealed, other]))  # a copy of the log taken before erasure
    assert ring.destroy("acme", "dana")
    assert not ring.destroy("acme", "dana")
    fresh = Keyring(ring.kek, ring.store)  # another process, nothing cached
    old_dana, old_sam = json.loads(backup.read_text())
    for keyring in (ring, fresh):
        with pytest.raises(Shredded):
            open_body(old_dana, keyring)
        assert open_body(old_sam, keyring)["payload"] == TURN["payload"]
    # the key file is gone from the key store, not left behind
    assert [p.name for p in (tmp_path / "keys").glob("*/*.key")] == [
        ring.store.path("acme", "sam").name]  # type: ignore[attr-defined]
    # a user who comes back gets a new key; what was shredded stays shredded
    again = seal_body(TURN, ring)
    assert again["sealed"]["kid"] != sealed["sealed"]["kid"]
    with pytest.raises(Shredded):
        open_body(old_dana, fresh)


def test_rotating_a_users_key_keeps_what_the_old_one_sealed(ring: Keyring) -> None:
    before = seal_body(TURN, ring)
    kid = ring.rotate("acme", "dana")
    after = seal_body(TURN, ring)
    assert after["sealed"]["kid"] == kid != before["sealed"]["kid"]
    fresh = Keyring(ring.kek, ring.store)
    assert open_body(before, fresh) == open_body(after, fresh) == TURN


def test_the_publishing_path_seals_with_a_rotated_key_at_once_here_and_after_ttl_elsewhere(
        tmp_path: Path) -> None:
    """The sealer memo (the hot path's current key) follows a rotation: at once in the process
    that rotated, and within the keys' ttl in one that was not told."""
    from habitus.crypto.sealing import open_event_json, seal_event_json

    kek = load_kek_ring(None, tmp_path / "kek.json")
    store = DirectoryKeyStore(tmp_path / "keys")
    rotating, elsewhere = Keyring(kek, store), Keyring(kek, store, ttl=0.05)
    event = json.dumps({"event_id": "e1", "type": "TurnRecorded", "schema_version": 1,
                        "tenant_id": "acme", "user_id": "dana", "occurred_at": 1.7e9,
                        "producer": "tests", "causation_id": None, "correlation_id": None,
                        "payload": TURN["payload"]},
                       separators=(",", ":")).encode()

    def kid_of(ring: Keyring) -> str:
        wire = seal_event_json(event, "acme", "dana", "e1", "TurnRecorded", ring)
        opened = open_event_json(wire, Keyring(kek, store))
        assert opened is not None and json.loads(opened)["payload"] == TURN["payload"]
        return str(json.loads(wire)["sealed"]["kid"])

    first = kid_of(rotating)
    assert kid_of(elsewhere) == first  # both memos hold the first key now
    second = rotating.rotate("acme", "dana")
    assert kid_of(rotating) == second != first
    time.sleep(0.1)
    assert kid_of(elsewhere) == second


def test_rotating_the_kek_rewraps_every_key_and_the_old_kek_can_go(ring: Keyring,
                                                                    tmp_path: Path) -> None:
    sealed = [seal_body({**TURN, "user_id": f"u{n}"}, ring) for n in range(5)]
    old = ring.kek
    rotated = old.rotated()
    assert ring.rewrap_all(rotated) == 5
    trimmed = rotated.without(old.current)
    fresh = Keyring(trimmed, ring.store)
    assert [open_body(s, fresh)["payload"] for s in sealed] == [TURN["payload"]] * 5
    # and without the rewrap, dropping the old KEK would have lost them: it says so
    stale = Keyring(load_kek_ring(None, tmp_path / "other-kek.json"), ring.store)
    with pytest.raises(KekError, match="not in the ring"):
        open_body(sealed[0], stale)


def test_two_processes_creating_a_users_first_key_agree(tmp_path: Path) -> None:
    kek = load_kek_ring(None, tmp_path / "kek.json")
    store = DirectoryKeyStore(tmp_path / "keys")
    rings = [Keyring(kek, store) for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        kids = set(pool.map(lambda r: r.current("acme", "new")[0], rings))
    assert len(kids) == 1


def test_the_kek_file_is_created_once_private_and_the_env_kek_is_checked(
        tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "kek.json"
    first = load_kek_ring(None, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_kek_ring(None, path).keys == first.keys
    env = parse_env_kek("prod-1:" + base64.b64encode(b"k" * 32).decode())
    assert env.current == "prod-1"
    with pytest.raises(KekError, match="32"):
        parse_env_kek("prod-1:" + base64.b64encode(b"short").decode())
    with pytest.raises(KekError, match="expected <id>"):
        parse_env_kek("no-id-here")
    shutil.rmtree(tmp_path / "secrets")


def test_the_catalog_seals_on_encode_and_opens_on_decode_by_either_path(ring: Keyring) -> None:
    from habitus.bus.publisher import headers_for
    from habitus.events import CATALOG, Catalog
    from habitus.events.ingest import TurnRecorded

    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(ring)
    event = catalog.new(TurnRecorded.model_validate(TURN["payload"]), tenant_id="acme",
                        user_id="dana", producer="gateway")
    wire = catalog.encode(event)
    assert not any(s.encode() in wire for s in SECRETS)
    fast = catalog.decode_message(wire, headers_for(event))  # the spliced plain JSON
    general = catalog.decode(wire)  # parse, open, validate
    assert fast == general == event
    tenant_wide = event.model_copy(update={"user_id": "_tenant"})
    assert catalog.encode(tenant_wide) == tenant_wide.to_json()
    ring.destroy("acme", "dana")
    with pytest.raises(Shredded):
        catalog.decode_message(wire, headers_for(event))
    plain = Catalog(list(CATALOG))  # a process without a keyring cannot read it, and says so
    with pytest.raises(Exception, match="no keyring"):
        plain.decode(wire)


def test_rotating_the_kek_from_the_command_line_while_processes_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from habitus.cli import app
    from habitus.config import Settings, get_settings
    from habitus.crypto.setup import keyring_from

    monkeypatch.setenv("HABITUS_KEYSTORE_DIR", str(tmp_path / "keys"))
    monkeypatch.delenv("HABITUS_KEK", raising=False)
    monkeypatch.delenv("HABITUS_KEK_FILE", raising=False)

    def habitus(*args: str) -> Any:
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
        finally:
            get_settings.cache_clear()

    running = keyring_from(Settings())  # a service that started before the rotation
    assert running is not None
    old_kek = running.kek.current
    before = [seal_body({**TURN, "user_id": f"u{n}"}, running) for n in range(3)]

    rotated = habitus("datakeys", "rotate-kek")
    assert rotated.exit_code == 0, rotated.output
    restarted = keyring_from(Settings())  # a process started after it: the new KEK wraps
    assert restarted is not None and restarted.kek.current != old_kek
    newcomer = seal_body({**TURN, "user_id": "newcomer"}, restarted)
    # the running process meets a key wrapped by a KEK it did not know, and reads the ring
    assert open_body(newcomer, running)["payload"] == TURN["payload"]

    early = habitus("datakeys", "drop-kek", old_kek)
    assert early.exit_code == 2 and "still wraps 3 key(s)" in early.output
    assert habitus("datakeys", "rewrap").exit_code == 0
    status = habitus("datakeys", "status", "--json")
    assert json.loads(status.output)["keys_wrapped_by"] == {restarted.kek.current: 4}
    dropped = habitus("datakeys", "drop-kek", old_kek)
    assert dropped.exit_code == 0, dropped.output
    current = habitus("datakeys", "drop-kek", restarted.kek.current)
    assert current.exit_code == 2 and "rotate first" in current.output
    fresh = keyring_from(Settings())
    assert fresh is not None and set(fresh.kek.keys) == {restarted.kek.current}
    assert [open_body(b, fresh)["payload"] for b in [*before, newcomer]] == [TURN["payload"]] * 4
    # one user's data key, rotated: what the old one sealed still opens
    assert habitus("datakeys", "rotate", "--tenant", "acme", "--user", "u0").exit_code == 0
    assert open_body(before[0], keyring_from(Settings()))["payload"] == TURN["payload"]


def test_concurrent_rotations_keep_every_key_and_a_destroy_is_not_undone(tmp_path: Path
                                                                          ) -> None:
    kek = load_kek_ring(None, tmp_path / "kek.json")
    store = DirectoryKeyStore(tmp_path / "keys")
    first = Keyring(kek, store)
    sealed = seal_body(TURN, first)
    rings = [Keyring(kek, store) for _ in range(6)]
    with ThreadPoolExecutor(6) as pool:
        kids = list(pool.map(lambda r: r.rotate("acme", "dana"), rings))
    stored = store.load("acme", "dana")
    assert stored is not None
    assert {k.kid for k in stored.keys} == {sealed["sealed"]["kid"], *kids}  # none lost
    # a rewrap racing an erasure never brings the erased keys back
    with ThreadPoolExecutor(2) as pool:
        pool.submit(first.rewrap_all, kek)
        pool.submit(first.destroy, "acme", "dana")
    assert store.load("acme", "dana") is None and store.erased("acme", "dana")


def test_a_key_the_store_never_destroyed_is_missing_not_shredded(tmp_path: Path) -> None:
    kek = load_kek_ring(None, tmp_path / "kek.json")
    sealed = seal_body(TURN, Keyring(kek, DirectoryKeyStore(tmp_path / "keys")))
    # a process pointed at another (empty) key store: the event is not the erased user's
    wrong = Keyring(kek, DirectoryKeyStore(tmp_path / "elsewhere"))
    with pytest.raises(KeyMissing, match="HABITUS_KEYSTORE_DIR"):
        open_body(sealed, wrong)


def test_a_process_holding_a_destroyed_key_drops_it_when_told(tmp_path: Path) -> None:
    kek = load_kek_ring(None, tmp_path / "kek.json")
    store = DirectoryKeyStore(tmp_path / "keys")
    here, erasing = Keyring(kek, store), Keyring(kek, store)
    sealed = seal_body(TURN, here)  # `here` caches dana's key
    assert erasing.destroy("acme", "dana")
    assert open_body(sealed, here)["payload"] == TURN["payload"]  # its copy, until told
    here.forget("acme", "dana")  # what hearing habitus.crypto.announce's message does
    with pytest.raises(Shredded):
        open_body(sealed, here)
    kid, _ = here.current("acme", "dana")  # dana, if she comes back, gets a new key
    assert kid != sealed["sealed"]["kid"]


def test_a_payload_moved_into_another_event_of_the_same_user_does_not_open(ring: Keyring
                                                                           ) -> None:
    sealed = seal_body(TURN, ring)
    for other in ({"event_id": "e2"}, {"type": "FeedbackGiven"}):
        with pytest.raises(SealError):
            open_body({**sealed, **other}, ring)
    assert open_body(sealed, ring) == TURN


def test_the_readers_fast_path_forgets_a_destroyed_key_when_told_or_when_its_time_is_up(
        tmp_path: Path) -> None:
    from habitus.crypto.sealing import open_event_json, seal_event_json

    kek = load_kek_ring(None, tmp_path / "kek.json")
    store = DirectoryKeyStore(tmp_path / "keys")
    told, expiring, erasing = Keyring(kek, store), Keyring(kek, store, ttl=0.05), \
        Keyring(kek, store)
    order = ("event_id", "type", "schema_version", "tenant_id", "user_id", "occurred_at",
             "producer")  # as the envelope's model writes it
    event = json.dumps({**{k: TURN[k] for k in order}, "causation_id": None,
                        "correlation_id": None, "payload": TURN["payload"]},
                       separators=(",", ":")).encode()
    wire = seal_event_json(event, "acme", "dana", "e1", "TurnRecorded", erasing)
    for ring in (told, expiring):  # each reads it once: the key is in its memo now
        opened = open_event_json(wire, ring)
        assert opened is not None and json.loads(opened)["payload"] == TURN["payload"]
    assert erasing.destroy("acme", "dana")
    told.forget("acme", "dana")  # what hearing habitus.crypto.announce's message does
    with pytest.raises(Shredded):
        open_event_json(wire, told)
    time.sleep(0.1)  # nobody told this one: its copy counts for its ttl, no longer
    with pytest.raises(Shredded):
        open_event_json(wire, expiring)


def test_keys_are_read_ahead_for_a_batch_and_only_a_sealers_warming_creates_any(
        ring: Keyring) -> None:
    import asyncio

    from habitus.events import CATALOG, Catalog
    from habitus.events.catalog import warm_keys

    seal_body(TURN, ring)  # dana has keys
    ring.forget("acme", "dana")
    assert ring.cold([("acme", "dana"), ("acme", "eve")]) == [("acme", "dana"),
                                                               ("acme", "eve")]
    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(ring)
    # a reader's warming reads dana's keys and makes none for eve (nor for the tenant)
    asyncio.run(warm_keys(catalog, [("acme", "dana"), ("acme", "eve"), ("acme", "_tenant")],
                          create=False))
    assert ring.cold([("acme", "dana"), ("acme", "eve")], creating=True) == [("acme", "eve")]
    assert ring.store.load("acme", "eve") is None
    # eve has no keys (her events were never sealed): readers' batches naming her do not read
    # the store again for the keys' ttl
    assert ring.cold([("acme", "dana"), ("acme", "eve")]) == []
    ring.destroy("acme", "dana")  # and an erased user's are not brought back
    asyncio.run(warm_keys(catalog, [("acme", "dana")], create=False))
    assert ring.store.load("acme", "dana") is None
    # a publisher's warming makes a new user's key before the batch is sealed
    asyncio.run(warm_keys(catalog, [("acme", "eve")], create=True))
    assert ring.cold([("acme", "eve")], creating=True) == []
    assert ring.store.load("acme", "eve") is not None


def test_a_reader_looks_again_for_keys_it_found_missing_once_their_time_is_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the keyring's own clock (a real one made this flaky on a loaded machine: the 50 ms
    ttl it needed to run quickly could pass between warming the keys and asking for them)."""
    import asyncio
    import types

    import habitus.crypto.keyring as keyring_module
    from habitus.events import CATALOG, Catalog
    from habitus.events.catalog import warm_keys

    now = [1_000.0]
    monkeypatch.setattr(keyring_module, "time",
                        types.SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    kek = load_kek_ring(None, tmp_path / "kek.json")
    store = DirectoryKeyStore(tmp_path / "keys")
    reader, writer = Keyring(kek, store, ttl=60.0), Keyring(kek, store)
    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(reader)
    asyncio.run(warm_keys(catalog, [("acme", "dana")], create=False))
    assert reader.cold([("acme", "dana")]) == []  # found missing just now
    seal_body(TURN, writer)  # her first sealed event, from another process
    now[0] += 59.0
    assert reader.cold([("acme", "dana")]) == []  # still within the ttl: not asked again
    now[0] += 2.0
    assert reader.cold([("acme", "dana")]) == [("acme", "dana")]
    asyncio.run(warm_keys(catalog, [("acme", "dana")], create=False))
    assert reader.cold([("acme", "dana")]) == []
    assert open_body(seal_body(TURN, writer), reader) == TURN


def test_threads_warming_the_same_new_users_make_each_key_once(tmp_path: Path) -> None:
    store = DirectoryKeyStore(tmp_path / "keys")
    made: list[str] = []

    class Counting:
        """The store, counting the key files written (each is a write and an fsync)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def create(self, keys: Any) -> Any:
            made.append(keys.user_id)
            return store.create(keys)

    ring = Keyring(load_kek_ring(None, tmp_path / "kek.json"), Counting())  # type: ignore[arg-type]
    owners = [("acme", f"u{n}") for n in range(20)]
    with ThreadPoolExecutor(4) as pool:  # four batches naming the same twenty new users
        list(pool.map(lambda _: ring.warm(owners, True), range(4)))
    assert sorted(made) == sorted(u for _, u in owners)
    assert ring.cold(owners) == []


def test_a_second_owner_spliced_into_a_sealed_envelope_is_refused_not_believed(
        ring: Keyring) -> None:
    """A JSON parser keeps the last of two keys. A body naming its user twice must not open as
    one user's words under the other's name: the envelope is the associated data, so any
    change to it (a key given twice, even with the same value) does not open."""
    from habitus.bus.publisher import headers_for
    from habitus.events import CATALOG, Catalog, EventValidationError
    from habitus.events.ingest import TurnRecorded

    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(ring)
    event = catalog.new(TurnRecorded.model_validate(TURN["payload"]), tenant_id="acme",
                        user_id="dana", producer="gateway")
    wire = catalog.encode(event)
    head = b'"user_id":"dana"'
    seal_body({**TURN, "user_id": "mallory"}, ring)  # mallory has keys too
    for spliced in (b',"user_id":"mallory"', b',"user_id":"dana"'):
        with pytest.raises(EventValidationError, match="does not open"):
            catalog.decode_message(wire.replace(head, head + spliced, 1), headers_for(event))
    assert catalog.decode_message(wire, headers_for(event)) == event


def test_any_byte_of_the_envelope_altered_does_not_open(ring: Keyring) -> None:
    """Beyond the owner and ids the earlier form bound: the time, the producer, the causation,
    the schema version."""
    from habitus.bus.publisher import headers_for
    from habitus.events import CATALOG, Catalog, EventValidationError
    from habitus.events.ingest import TurnRecorded

    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(ring)
    event = catalog.new(TurnRecorded.model_validate(TURN["payload"]), tenant_id="acme",
                        user_id="dana", producer="gateway", occurred_at=1_700_000_000.0)
    wire = catalog.encode(event)
    for before, after in ((b'"occurred_at":1700000000.0', b'"occurred_at":1700000001.0'),
                          (b'"producer":"gateway"', b'"producer":"gatewax"'),
                          (b'"causation_id":null', b'"causation_id":"x"')):
        assert before in wire
        with pytest.raises(EventValidationError, match="does not open"):
            catalog.decode_message(wire.replace(before, after, 1), headers_for(event))


def test_a_body_sealed_in_the_earlier_form_still_opens_and_its_splices_are_refused(
        ring: Keyring) -> None:
    """Streams hold bodies sealed before the envelope was the associated data: the reader
    opens them by the envelope's exact pattern, and a spliced owner falls to the general path,
    which reads the last owner and finds no key of that id."""
    from habitus.bus.publisher import headers_for
    from habitus.crypto.sealing import open_event_json
    from habitus.events import CATALOG, Catalog
    from habitus.events.ingest import TurnRecorded
    from tests.support.sealed_v1 import seal_event_json_v1

    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(ring)
    event = catalog.new(TurnRecorded.model_validate(TURN["payload"]), tenant_id="acme",
                        user_id="dana", producer="gateway")
    wire = seal_event_json_v1(event.to_json(), "acme", "dana", event.event_id, event.type,
                              ring)
    assert open_event_json(wire, ring) is not None
    assert catalog.decode_message(wire, headers_for(event)) == event
    head = b'"user_id":"dana"'
    forged = wire.replace(head, head + b',"user_id":"mallory"', 1)
    assert open_event_json(forged, ring) is None  # not the earlier form's pattern
    seal_body({**TURN, "user_id": "mallory"}, ring)
    with pytest.raises(KeyMissing):
        catalog.decode_message(forged, headers_for(event))
    twice = wire.replace(head, head + b',"user_id":"dana"', 1)
    assert catalog.decode_message(twice, headers_for(event)) == event
    quoted = catalog.new(TurnRecorded.model_validate(TURN["payload"]), tenant_id="acme",
                         user_id="dana", producer='the "night" batch')
    odd = seal_event_json_v1(quoted.to_json(), "acme", "dana", quoted.event_id, quoted.type,
                             ring)
    assert open_event_json(odd, ring) is None  # outside the pattern: the general path opens it
    assert catalog.decode_message(odd, headers_for(quoted)) == quoted


def test_a_sealed_body_whose_key_id_is_no_key_id_is_bad_not_a_missing_key(
        ring: Keyring) -> None:
    """A missing key makes a projection wait for it (a key volume not mounted); a body whose key
    id could never be one of ours is the body's fault, and is refused at once (it is
    dead-lettered instead of stalling its consumer)."""
    from habitus.bus.publisher import headers_for
    from habitus.events import CATALOG, Catalog, EventValidationError
    from habitus.events.ingest import TurnRecorded

    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(ring)
    event = catalog.new(TurnRecorded.model_validate(TURN["payload"]), tenant_id="acme",
                        user_id="dana", producer="gateway")
    wire = catalog.encode(event)
    kid = json.loads(wire)["sealed"]["kid"].encode()
    with pytest.raises(EventValidationError, match="not a key id"):
        catalog.decode_message(wire.replace(kid, b'k1\\" x'), headers_for(event))
    with pytest.raises(KeyMissing):  # a well-formed id the store lacks: wait for the store
        catalog.decode_message(wire.replace(kid, b"k0123456789ab"), headers_for(event))
    sealed = seal_body(TURN, ring)
    with pytest.raises(ValueError, match="key id"):  # the general path says the same
        open_body({**sealed, "sealed": {**sealed["sealed"], "kid": 'k1" x'}}, ring)
    assert catalog.decode_message(wire, headers_for(event)) == event


def test_any_envelope_opens_from_its_bytes(ring: Keyring) -> None:
    """A producer name with a quote in it (escaped in the JSON) was outside the earlier form's
    pattern; the envelope as written is the associated data now, whatever it holds."""
    from habitus.bus.publisher import headers_for
    from habitus.crypto.sealing import open_event, open_event_json
    from habitus.events import CATALOG, Catalog
    from habitus.events.ingest import TurnRecorded

    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(ring)
    event = catalog.new(TurnRecorded.model_validate(TURN["payload"]), tenant_id="acme",
                        user_id="dana", producer='the "night" batch')
    wire = catalog.encode(event)
    assert open_event_json(wire, ring) is not None
    assert catalog.decode_message(wire, headers_for(event)) == event
    assert catalog.decode(wire) == event  # the general path opens it from the bytes too
    assert open_event(wire, ring)["payload"] == json.loads(event.to_json())["payload"]
    with pytest.raises(ValueError, match="from its bytes"):  # not from a parsed copy
        open_body(json.loads(wire), ring)


def test_a_batchs_opener_uses_the_memo_only_for_the_owner_it_was_read_for(
        tmp_path: Path) -> None:
    """`EnvelopeOpener` takes a key from the memo by key id without reading the envelope's
    owner: only where the entry's owner stands where it stood. Two users given the same key id
    (random ids collide in a large deployment) each open with their own key, and an event of
    another type (the owner further along) opens too."""
    from habitus.bus.publisher import headers_for
    from habitus.crypto.keyring import dek_context
    from habitus.crypto.keystore import UserKeys, WrappedKey
    from habitus.events import CATALOG, Catalog
    from habitus.events.ingest import FeedbackGiven, TurnRecorded

    store = DirectoryKeyStore(tmp_path / "keys")
    writer = Keyring(load_kek_ring(None, tmp_path / "kek.json"), store)
    catalog = Catalog(list(CATALOG))
    catalog.use_keyring(writer)
    turn = TurnRecorded.model_validate(TURN["payload"])
    dana = catalog.new(turn, tenant_id="acme", user_id="dana", producer="gateway")
    dana_wire = catalog.encode(dana)
    kid = json.loads(dana_wire)["sealed"]["kid"]
    # sam's one key carries dana's key id: what a collision of random ids makes
    kek_id, wrapped = writer.kek.wrap(os.urandom(32), dek_context("acme", "sam", kid))
    store.create(UserKeys("acme", "sam", kid, (WrappedKey(kid, kek_id, wrapped, time.time()),)))
    sam = catalog.new(turn, tenant_id="acme", user_id="sam", producer="gateway")
    sam_wire = catalog.encode(sam)
    assert json.loads(sam_wire)["sealed"]["kid"] == kid
    feedback = catalog.new(FeedbackGiven.model_validate(
        {"turn_id": "t1", "score": 1.0, "outcome": "success"}),
        tenant_id="acme", user_id="dana", producer="gateway")
    feedback_wire = catalog.encode(feedback)

    reader = Catalog(list(CATALOG))
    reader.use_keyring(Keyring(writer.kek, store))
    opener = reader.opener()
    assert opener is not None
    for event, wire in ((dana, dana_wire), (sam, sam_wire), (feedback, feedback_wire),
                        (dana, dana_wire), (sam, sam_wire)):
        assert reader.decode_message(wire, headers_for(event), opener) == event


def test_a_batchs_opener_keeps_no_key_past_its_time_and_refuses_a_bad_blob(
        tmp_path: Path) -> None:
    """An opener made after the keys' ttl ran out reads the store again (an erasure elsewhere
    is met as `Shredded`), and a payload that is no base64 or does not authenticate is a bad
    event, never opened."""
    from habitus.crypto.sealing import EnvelopeOpener, seal_event_json

    kek = load_kek_ring(None, tmp_path / "kek.json")
    store = DirectoryKeyStore(tmp_path / "keys")
    erasing, reading = Keyring(kek, store), Keyring(kek, store, ttl=0.05)
    order = ("event_id", "type", "schema_version", "tenant_id", "user_id", "occurred_at",
             "producer")
    event = json.dumps({**{k: TURN[k] for k in order}, "causation_id": None,
                        "correlation_id": None, "payload": TURN["payload"]},
                       separators=(",", ":")).encode()
    wire = seal_event_json(event, "acme", "dana", "e1", "TurnRecorded", erasing)
    assert json.loads(EnvelopeOpener(reading)(wire))["payload"] == TURN["payload"]
    blob = json.loads(wire)["payload"]
    flipped = blob[:20] + ("A" if blob[20] != "A" else "B") + blob[21:]
    for bad in (flipped, blob[:-2], blob[:16]):
        with pytest.raises(SealError):
            EnvelopeOpener(reading)(wire.replace(blob.encode(), bad.encode()))
    assert erasing.destroy("acme", "dana")
    opener = EnvelopeOpener(reading)  # made within the ttl: this batch still opens
    assert json.loads(opener(wire))["payload"] == TURN["payload"]
    time.sleep(0.1)
    with pytest.raises(Shredded):
        EnvelopeOpener(reading)(wire)
