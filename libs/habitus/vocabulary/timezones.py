"""Time zones as IANA names (`zoneinfo`), from what people write: "IST", "CET", "Pacific
time", "UTC+2", "Europe/Berlin".

An abbreviation names a zone only through the zones that use it, and several are ambiguous
(IST is India, Ireland and Israel; CST is the US centre and China; BST is British summer
time). When the user's city is known, an ambiguous abbreviation is resolved to the city's own
zone if that zone uses the abbreviation; otherwise to the zone most people mean by it (the
first in `_ABBREVIATIONS`). `UTC+2` is `Etc/GMT-2`: the POSIX sign of the `Etc` zones is the
opposite of the usual one.
"""

from __future__ import annotations

import re
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

#: abbreviation -> the zones it can mean, the usual one first
_ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "IST": ("Asia/Kolkata", "Europe/Dublin", "Asia/Jerusalem"),
    "CET": ("Europe/Berlin", "Europe/Paris", "Europe/Madrid", "Europe/Rome"),
    "CEST": ("Europe/Berlin", "Europe/Paris", "Europe/Madrid", "Europe/Rome"),
    "MEZ": ("Europe/Berlin",), "MESZ": ("Europe/Berlin",),  # German for CET and CEST
    "EET": ("Europe/Athens", "Europe/Helsinki", "Europe/Bucharest"),
    "EEST": ("Europe/Athens", "Europe/Helsinki", "Europe/Bucharest"),
    "WET": ("Europe/Lisbon",), "WEST": ("Europe/Lisbon",),
    "GMT": ("Europe/London",), "BST": ("Europe/London",),
    "PST": ("America/Los_Angeles",), "PDT": ("America/Los_Angeles",),
    "PT": ("America/Los_Angeles",),
    "MST": ("America/Denver", "America/Phoenix"), "MDT": ("America/Denver",),
    "MT": ("America/Denver",),
    "CST": ("America/Chicago", "Asia/Shanghai", "America/Mexico_City"),
    "CDT": ("America/Chicago",), "CT": ("America/Chicago",),
    "EST": ("America/New_York", "America/Toronto"), "EDT": ("America/New_York",),
    "ET": ("America/New_York",),
    "AKST": ("America/Anchorage",), "HST": ("Pacific/Honolulu",),
    "JST": ("Asia/Tokyo",), "KST": ("Asia/Seoul",), "SGT": ("Asia/Singapore",),
    "HKT": ("Asia/Hong_Kong",), "MSK": ("Europe/Moscow",),
    "AEST": ("Australia/Sydney",), "AEDT": ("Australia/Sydney",),
    "ACST": ("Australia/Adelaide",), "AWST": ("Australia/Perth",),
    "NZST": ("Pacific/Auckland",), "NZDT": ("Pacific/Auckland",),
    "UTC": ("UTC",),
}
_NAMED = {
    "pacific": "America/Los_Angeles", "eastern": "America/New_York",
    "central": "America/Chicago", "mountain": "America/Denver",
    "uk": "Europe/London", "british": "Europe/London", "india": "Asia/Kolkata",
    "indian": "Asia/Kolkata", "central european": "Europe/Berlin",
    "hora del este": "America/New_York", "hora del pacífico": "America/Los_Angeles",
    "hora central": "America/Chicago", "heure de l'est": "America/New_York",
    "mitteleuropäische zeit": "Europe/Berlin",
}
_NAMED_RE = re.compile(
    r"^(?P<n>pacific|eastern|central european|central|mountain|uk|british|indian?)"
    r"(?:\s+(?:standard|daylight|summer))?\s+time$", re.IGNORECASE)
_OFFSET_RE = re.compile(r"^(?:UTC|GMT)\s*(?P<sign>[+\u2212-])\s*(?P<h>\d{1,2})(?::?00)?$",
                        re.IGNORECASE)
#: the abbreviations, as a pattern readers can use to find one in text (case-sensitive)
ABBREVIATION_PATTERN = "|".join(sorted(_ABBREVIATIONS, key=len, reverse=True))


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(available_timezones())


def _uses(zone: str, abbreviation: str) -> bool:
    """Whether `zone` calls its time `abbreviation` in winter or in summer."""
    try:
        tz = ZoneInfo(zone)
    except ZoneInfoNotFoundError:
        return False
    return abbreviation in {datetime(2026, month, 15, 12, tzinfo=tz).tzname()
                            for month in (1, 7)}


def canonical_timezone(text: str, *, near: str | None = None) -> str | None:
    """The IANA zone `text` names, or None. `near`: the IANA zone of the user's city, which
    decides an ambiguous abbreviation when it uses it."""
    raw = " ".join(text.split()).strip(" .,;:!?()")
    if not raw:
        return None
    if (raw in _zones() and "/" in raw) or raw == "UTC":
        return raw
    upper = raw.upper()
    if upper in _ABBREVIATIONS and (raw.isupper() or len(raw) > 3):
        options = _ABBREVIATIONS[upper]
        if (near is not None and near in options) or (near is not None and _uses(near, upper)):
            return near
        return options[0]
    named = _NAMED_RE.match(raw)
    if named is not None:
        return _NAMED[named.group("n").lower()]
    if raw.lower() in _NAMED:
        return _NAMED[raw.lower()]
    offset = _OFFSET_RE.match(raw)
    if offset is not None:
        hours = int(offset.group("h"))
        if hours == 0:
            return "UTC"
        if hours > 14:
            return None
        sign = "-" if offset.group("sign") == "+" else "+"  # Etc/GMT-2 is UTC+2
        return f"Etc/GMT{sign}{hours}"
    return None


def is_timezone(value: str) -> bool:
    """Whether `value` is an IANA zone name (what `identity/timezone` holds)."""
    return value in _zones()
