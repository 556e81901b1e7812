"""The header parser `habitus.bus.connect` installs gives nats-py's answers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

import habitus.bus.connect  # noqa: F401  (installs the parser)
from habitus.bus.headers import NATS_PARSE, parse_header_lines

# pieces a header block is made of, the awkward ones included: whitespace nats-py rejects in a
# name (the ASCII separators \x1c-\x1f are whitespace to `str.isspace`), bytes that are not
# ASCII or not UTF-8, colons in values, bare CR or LF, empty lines
_PIECES = st.sampled_from([
    b"Nats-Msg-Id", b"Habitus-Type", b"traceparent", b"X Y", b"X\tY", b"X\x1cY", b"X\x1fY",
    b"N\xc3\xa4me", b"\xff", b":", b": ", b"\r\n", b"\r", b"\n", b" ", b"\t", b"value",
    b"caf\xc3\xa9", b"\xe2\x82", b"a:b:c", b"",
])
_BLOCKS = st.one_of(
    st.lists(_PIECES, max_size=24).map(b"".join),
    st.binary(max_size=200),
)


@given(_BLOCKS)
def test_same_headers_as_nats_py_for_any_block(raw: bytes) -> None:
    assert parse_header_lines(raw) == NATS_PARSE(raw)


def test_a_published_events_headers_read_back() -> None:
    raw = (b"Nats-Msg-Id: acme.alice.01JXYZ\r\nHabitus-Type: TurnRecorded\r\n"
           b"Habitus-Schema-Version: 1\r\nBad Name: skipped\r\nX-Note:  caf\xc3\xa9 \r\n\r\n")
    assert parse_header_lines(raw) == {
        "Nats-Msg-Id": "acme.alice.01JXYZ", "Habitus-Type": "TurnRecorded",
        "Habitus-Schema-Version": "1", "X-Note": "café"}


def test_connect_installs_it_for_every_client() -> None:
    assert Client._parse_header_lines is parse_header_lines
    assert Client._parse_header_lines is not NATS_PARSE
