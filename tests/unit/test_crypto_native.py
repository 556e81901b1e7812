"""The compiled envelope (habitus.crypto._envelope) against the Python path it stands in for:
every body seals to something the other path opens, and every body, whole or damaged, opens,
refuses or falls back the same way on both, on a real key store. A compiled path that opened
one body the Python path refuses would be a hole; one that refused what Python opens would
lose events."""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pybase64
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from habitus.crypto import (
    DirectoryKeyStore,
    Keyring,
    SealError,
    Shredded,
    compiled,
    load_kek_ring,
    sealing,
)
from habitus.crypto import columns as sealing_columns
from habitus.crypto.aead import NONCE_BYTES
from habitus.crypto.columns import Columns
from habitus.crypto.keyring import KeyMissing
from habitus.crypto.sealing import EnvelopeOpener, seal_event_json
from tests.support.factories import turn

#: every test but the build's own: they compare the compiled path with the Python one
compiled_only = pytest.mark.skipif(sealing.native_open is None,
                                   reason="the compiled envelope was not built here")

SAID = [
    "Please keep answers short, and never email Sarah before 9am.",
    "Ich heiße Jürgen, antworte bitte auf Deutsch — mit Tabellen. 🙂",
    "Mon adresse est jeanne.dupont@example.fr; appelle-moi « Jeanne ».",
    'A quote " and a backslash \\ and a tab\t and a newline\n in one message',
    "x",
    "word " * 4_000,  # larger than the compiled path's stack buffer (4 KiB)
]


@pytest.fixture
def ring(tmp_path: Path) -> Keyring:
    return Keyring(load_kek_ring(None, tmp_path / "kek.json"),
                   DirectoryKeyStore(tmp_path / "keys"))


@pytest.fixture
def python_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within it, sealing and the openers made take the Python path alone."""
    with monkeypatch.context() as patched:
        patched.setattr(sealing, "native_open", None)
        patched.setattr(sealing, "native_seal", None)
        yield


def plain_bodies() -> list[tuple[str, str, str, str, bytes]]:
    """(tenant, user, event id, type, JSON) of realistic turns of three users."""
    events = [turn("acme", user, said) for said in SAID for user in ("dana", "ulrich_2", "u-7")]
    return [(e.tenant_id, e.user_id, e.event_id, e.type, e.to_json()) for e in events]


def outcome(open_: Callable[[bytes], bytes], data: bytes) -> tuple[str, Any]:
    """What opening `data` came to: its plain JSON, or the error's type and message."""
    try:
        return "opened", open_(data)
    except Exception as exc:  # the comparison is the point: any error, by type and text
        return type(exc).__name__, str(exc)


def test_the_compiled_envelope_is_built_where_a_compiler_and_openssl_are() -> None:
    """The editable install builds it wherever it can; a build that silently failed would
    leave every consumer on the slower path."""
    if os.environ.get("HABITUS_NATIVE_ENVELOPE") == "0":
        pytest.skip("HABITUS_NATIVE_ENVELOPE=0: the Python path alone, on purpose")
    include = Path(sysconfig.get_paths()["include"])
    if shutil.which("cc") is None or not (include / "Python.h").exists() or not any(
            Path(d, "openssl", "evp.h").exists() for d in ("/usr/include", "/usr/local/include")):
        pytest.skip("no C compiler, Python headers or OpenSSL headers here")
    assert sealing.native_open is not None and sealing.native_seal is not None


@compiled_only
def test_each_path_opens_what_the_other_sealed(ring: Keyring, python_only: None) -> None:
    compiled_open, compiled_seal = compiled.open_enveloped, compiled.seal_enveloped
    assert compiled_open is not None and compiled_seal is not None
    for tenant, user, event_id, type_, plain in plain_bodies():
        by_python = seal_event_json(plain, tenant, user, event_id, type_, ring)
        by_c = compiled_seal(plain, ring.sealer(tenant, user).compiled,
                             ring.sealer(tenant, user).kid_bytes)
        assert by_c != plain and b"Sarah" not in by_c and b"Jeanne" not in by_c
        assert len(by_c) == len(by_python)  # the same layout, another nonce
        python_opener = EnvelopeOpener(ring)
        assert python_opener(by_c) == plain
        assert python_opener(by_python) == plain
        assert compiled_open(ring.kid_memo(), ring.memo_fresh_after(), by_python) == plain
        assert compiled_open(ring.kid_memo(), ring.memo_fresh_after(), by_c) == plain


@compiled_only
def test_a_fresh_nonce_every_time_even_in_a_forked_child(ring: Keyring) -> None:
    """AES-GCM must never see a nonce twice under one key: the compiled sealer takes it from
    the kernel, so a process forked from a sealer (habitus up's fork server) cannot repeat it,
    as a user-space generator's copied state could."""
    _, _, _, _, plain = plain_bodies()[0]
    sealer = ring.sealer("acme", "dana")
    seal = sealing.native_seal
    assert seal is not None

    def nonces() -> list[bytes]:
        return [nonce_of(seal(plain, sealer.compiled, sealer.kid_bytes)) for _ in range(200)]

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child seals with the keys it inherited, and reports its nonces
        try:
            os.write(write, b"".join(nonces()))
        finally:
            os._exit(0)
    os.close(write)
    mine = nonces()
    with os.fdopen(read, "rb") as pipe:
        got = pipe.read()
    os.waitpid(child, 0)
    theirs = [got[i:i + NONCE_BYTES] for i in range(0, len(got), NONCE_BYTES)]
    assert len(theirs) == 200 and len(set(mine)) == 200 and len(set(theirs)) == 200
    assert not set(mine) & set(theirs)


def nonce_of(sealed: bytes) -> bytes:
    start = sealed.index(b',"payload":"') + 12
    return pybase64.b64decode(sealed[start:sealed.index(b'"', start)])[:NONCE_BYTES]


def compare_damage(ring: Keyring, sealed: bytes, damaged: bytes) -> None:
    """The same outcome on both paths (each opener made fresh, with the memo as the healthy
    body left it)."""
    EnvelopeOpener(ring)(sealed)  # the memo holds the owner's key, as in a running consumer
    with_c = outcome(EnvelopeOpener(ring), damaged)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(sealing, "native_open", None)
        python = outcome(EnvelopeOpener(ring), damaged)
    assert with_c == python, damaged


@compiled_only
def test_every_single_byte_change_comes_out_the_same_on_both_paths(ring: Keyring) -> None:
    tenant, user, event_id, type_, plain = plain_bodies()[3]
    sealed = seal_event_json(plain, tenant, user, event_id, type_, ring)
    for at in range(len(sealed)):
        for new in {ord('"'), ord(","), ord("A"), ord("="), sealed[at] ^ 1}:
            damaged = sealed[:at] + bytes([new]) + sealed[at + 1:]
            if damaged != sealed:
                compare_damage(ring, sealed, damaged)


@compiled_only
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, len(SAID) * 3 - 1), cut=st.integers(0, 10_000),
       insert=st.binary(max_size=40), drop=st.integers(0, 30))
def test_damaged_bodies_come_out_the_same_on_both_paths(ring: Keyring, which: int, cut: int,
                                                        insert: bytes, drop: int) -> None:
    tenant, user, event_id, type_, plain = plain_bodies()[which]
    sealed = seal_event_json(plain, tenant, user, event_id, type_, ring)
    at = cut % (len(sealed) + 1)
    compare_damage(ring, sealed, sealed[:at] + insert + sealed[at + drop:])


@compiled_only
def test_another_owners_envelope_and_a_stale_memo_go_the_python_way(ring: Keyring) -> None:
    """The compiled opener answers only when the memo's entry is fresh and names the
    envelope's owner where it stood; otherwise the Python path decides (here: the key of
    another user under the same key id does not open, and a stale entry is read again)."""
    dana = seal_event_json(turn("acme", "dana", SAID[0]).to_json(), "acme", "dana", "e1",
                           "TurnRecorded", ring)
    EnvelopeOpener(ring)(dana)
    assert sealing.native_open is not None
    memo = ring.kid_memo()
    assert sealing.native_open(memo, ring.memo_fresh_after(), dana) is not None
    assert sealing.native_open(memo, float("inf"), dana) is None  # stale: Python reads again
    # eve's envelope carrying dana's key id: not answered here, refused by the Python path
    eve = dana.replace(b'"user_id":"dana"', b'"user_id":"eve"')
    assert sealing.native_open(memo, ring.memo_fresh_after(), eve) is None
    with pytest.raises(KeyMissing, match="acme/eve"):  # eve has no keys; dana's do not count
        EnvelopeOpener(ring)(eve)


@compiled_only
def test_bodies_that_are_not_the_compiled_paths_to_decide() -> None:
    assert sealing.native_open is not None and sealing.native_seal is not None
    assert sealing.native_open({}, 0.0, b'{"event_id":"e1","payload":{}}') is None
    key = compiled.data_key(bytes(32))
    with pytest.raises(ValueError, match="no payload field"):
        sealing.native_seal(b'{"event_id":"e1"}', key, b"k1")
    with pytest.raises(TypeError):
        sealing.native_seal(b'{"payload":{}}', bytes(32), b"k1")  # a key not made ready
    with pytest.raises(TypeError):
        compiled.data_key(bytes(16))  # not a 256-bit key
    with pytest.raises(TypeError):
        compiled.column_key(bytes(32))  # AES-SIV here takes two 256-bit halves
    with pytest.raises(TypeError):
        sealing.native_open({}, 0.0, "text")  # type: ignore[arg-type]


@compiled_only
def test_a_blob_too_short_to_hold_a_nonce_and_tag_is_refused(ring: Keyring) -> None:
    sealed = seal_event_json(turn("acme", "dana", SAID[0]).to_json(), "acme", "dana", "e1",
                             "TurnRecorded", ring)
    EnvelopeOpener(ring)(sealed)
    start = sealed.index(b',"payload":"') + 12
    end = sealed.index(b'","sealed"')
    short = sealed[:start] + b"QUJDRA==" + sealed[end:]
    with pytest.raises(SealError, match="does not open"):
        EnvelopeOpener(ring)(short)


@compiled_only
def test_events_of_another_type_open_compiled_with_the_same_memo(ring: Keyring) -> None:
    """The memo's entry was read from a turn's envelope; an e-mail's names the owner at another
    offset (its type is longer) and still opens in C, as the Python path accepts it."""
    turn_json = turn("acme", "dana", SAID[0]).to_json()
    email_json = turn_json.replace(b'"type":"TurnRecorded"', b'"type":"EmailMessageIngested"')
    sealed_turn = seal_event_json(turn_json, "acme", "dana", "e1", "TurnRecorded", ring)
    sealed_email = seal_event_json(email_json, "acme", "dana", "e2", "EmailMessageIngested",
                                   ring)
    EnvelopeOpener(ring)(sealed_turn)
    assert sealing.native_open is not None
    fresh = ring.memo_fresh_after()
    assert sealing.native_open(ring.kid_memo(), fresh, sealed_email) == email_json
    assert sealing.native_open(ring.kid_memo(), fresh, sealed_turn) == turn_json


@compiled_only
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=0, max_size=300) | st.sampled_from(SAID))
def test_a_column_value_is_the_same_sealed_either_way(ring: Keyring, text: str) -> None:
    """Column values are lookup keys (sealing is deterministic): the compiled sealer must make
    byte for byte what the Python path makes, or rows written by one would not be found by
    the other."""
    columns = Columns(ring)
    by_c = columns.seal("acme", "dana", text)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(sealing_columns, "seal_column", None)
        by_python = columns.seal("acme", "dana", text)
    assert by_c == by_python
    assert columns.open("acme", "dana", by_c) == text
    if text:
        assert by_c.startswith("hc1:") and by_c != columns.seal("acme", "eve", text)


@compiled_only
def test_an_opener_made_before_an_erasure_announced_here_opens_nothing_after(
        ring: Keyring) -> None:
    """`forget` (the erasure's announcement) empties the memo an opener reads in place: an
    opener made before it finds no key afterwards, on either path, and the user's events are
    shredded, whatever type they are."""
    turn_json = turn("acme", "dana", SAID[0]).to_json()
    email_json = turn_json.replace(b'"type":"TurnRecorded"', b'"type":"EmailMessageIngested"')
    sealed = [seal_event_json(body, "acme", "dana", f"e{i}", "TurnRecorded", ring)
              for i, body in enumerate((turn_json, email_json))]
    with_c = EnvelopeOpener(ring)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(sealing, "native_open", None)
        python = EnvelopeOpener(ring)
    assert [with_c(b) for b in sealed] == [python(b) for b in sealed] == [turn_json, email_json]
    ring.destroy("acme", "dana")
    for body in sealed:
        assert outcome(with_c, body) == outcome(python, body)
        with pytest.raises(Shredded):
            with_c(body)
