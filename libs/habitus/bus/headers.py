"""Message headers parsed as nats-py parses them, in about a third of its time.

nats-py 2.16 checks every header name for whitespace one character at a time, in a generator
passed to `any()`. Every message a consumer receives carries three or four headers (the
deduplication id, the event's type and schema version, the trace), so on a projection that
does little per event that check was about a third of a profiled runner. A compiled pattern makes
the same check in C.

`install()` puts `parse_header_lines` in place of the client's own for every connection of
the process; `habitus.bus.connect` calls it. It gives the same dict for every input (the
property test in tests/unit/test_bus_headers.py holds it to the original): `\\s` in a `str`
pattern is `str.isspace`, ASCII separators `\\x1c`-`\\x1f` included.
"""

from __future__ import annotations

import re
from typing import Final

from nats.aio.client import Client

#: the client's own parser, which the equivalence test compares with
NATS_PARSE: Final = Client.__dict__["_parse_header_lines"].__func__
_CRLF: Final = b"\r\n"
_SPACE: Final = re.compile(r"\s")


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """`Name: Value` lines to a dict: names ASCII without inner whitespace (others are
    skipped), values stripped and decoded as UTF-8 with replacement, the last of a repeated
    name kept."""
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if _SPACE.search(key) is None:
            out[key] = value.strip().decode("utf-8", "replace")
    return out


def install() -> None:
    setattr(Client, "_parse_header_lines", staticmethod(parse_header_lines))  # noqa: B010
