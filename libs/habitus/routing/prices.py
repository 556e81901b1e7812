"""What a model costs per token, from the price catalogue the `tokencost` package ships.

Why prices: a router has to rank models whose names carry no size (`gpt-4o`, `claude-sonnet-4`,
`openai/gpt-4o`). What a provider charges for a model is the best public, maintained signal of
how large and capable it is relative to its siblings (gpt-4o costs 17 times gpt-4o-mini), so
`sizes` uses the price wherever no parameter count is known. The catalogue is `tokencost`'s
`model_prices.json` (LiteLLM's table, kept up to date upstream and already a dependency), not a
list of our own that would go stale.

Why the file and not the package: `import tokencost` pulls in anthropic and tiktoken and takes
about 1.6 s, which the router must not pay at start or on a request. `catalogue()` finds the
package directory with `importlib.util.find_spec` (which imports nothing), reads the JSON on the
first lookup that needs it and keeps it for the process. A missing or unreadable file is an
empty catalogue (logged once): routing then ranks by sizes and names alone, it never fails.

Which entries count: language models (mode "chat", "completion", "responses", or no mode given)
with a numeric input and output price whose sum is positive. A price of zero (Ollama's local
entries, free previews) says nothing about a model, so it counts as no price. A model's price
is input + output cost per token; reasons show it per 1M tokens.

How a name finds its entry (`lookup`); names are compared without case, the first match wins:

1. the name itself, then without an Ollama `:latest` tag;
2. for an undated name, its `-latest` entry, else its newest dated entry (`claude-sonnet-4` →
   `claude-sonnet-4-20250514`): an undated alias names the current release;
3. for a dated name the catalogue lacks (`-20990101`, `-2099-01-01`, `@20990101`) or a
   `-latest` one, the same name without the date or tag, then step 2;
4. with a provider prefix (`openai/gpt-4o`, `openrouter/anthropic/...`), the name after the
   last `/`, then steps 1 to 3 for it;
5. a bare name the catalogue only knows under provider prefixes (`deepseek-r1` is sold by seven
   hosts at $0.80 to $12.00 per 1M tokens): the entry of median price (the lower of the two
   middle ones), the typical price rather than one host's.

The entry that matched is kept with the price (`Price.entry`), so a reason can say where a price
came from when the entry is not the name asked about.

Everything but `catalogue()` is pure: `build_table` and `lookup` take the data they read.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

PACKAGE: Final = "tokencost"
FILE_NAME: Final = "model_prices.json"
#: the catalogue's modes of models that answer text; an entry without a mode counts too
TEXT_MODES: Final = frozenset({"chat", "completion", "responses"})
_LATEST_TAG: Final = ":latest"
_LATEST_SUFFIX: Final = "-latest"
#: a release date at the end of a name: -2024-08-06, -20240806, @20240806
_DATE: Final = re.compile(r"[-@](\d{4})-?(\d{2})-?(\d{2})$")


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price: the catalogue entry it came from and USD per token, input + output."""

    entry: str
    per_token: float
    #: USD per input token and per output token (None: only the sum is known)
    input_per_token: float | None = None
    output_per_token: float | None = None

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        """What a call of `tokens_in` prompt and `tokens_out` answer tokens costs, in USD
        (half the summed price per token each, when the split is not known)."""
        if self.input_per_token is None or self.output_per_token is None:
            return self.per_token / 2 * (tokens_in + tokens_out)
        return self.input_per_token * tokens_in + self.output_per_token * tokens_out

    @property
    def per_million(self) -> float:
        """USD per 1M input tokens plus per 1M output tokens."""
        return self.per_token * 1_000_000


@dataclass(frozen=True, slots=True)
class PriceTable:
    """The catalogue, indexed for `lookup`.

    `prices`: lower-cased entry -> its price. `newest`: an undated lower-cased name -> the
    lower-cased entry of its newest dated release. `by_tail`: the part after a provider prefix
    -> the prefixed entry of median price that has it (only tails that are no entry themselves).
    """

    prices: Mapping[str, Price]
    newest: Mapping[str, str]
    by_tail: Mapping[str, str]


EMPTY: Final = PriceTable({}, {}, {})


def _cost(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def entry_price(entry: Any) -> float | None:
    """USD per token (input + output) of one catalogue entry; None when it is no text model
    or has no positive price."""
    if not isinstance(entry, Mapping):
        return None
    mode = entry.get("mode")
    if mode is not None and mode not in TEXT_MODES:
        return None
    cost_in, cost_out = (_cost(entry.get("input_cost_per_token")),
                         _cost(entry.get("output_cost_per_token")))
    if cost_in is None or cost_out is None or cost_in + cost_out <= 0:
        return None
    return cost_in + cost_out


def _undated(key: str) -> tuple[str, str] | None:
    """(the name without its release date, the date as YYYYMMDD), or None for an undated name."""
    match = _DATE.search(key)
    if match is None or match.start() == 0:
        return None
    return key[: match.start()], "".join(match.groups())


def build_table(raw: Any) -> PriceTable:
    """The catalogue's JSON (entry -> fields) as a `PriceTable`; anything that is not a priced
    text model is left out. Two entries that differ only in case: the first by spelling wins."""
    if not isinstance(raw, Mapping):
        return EMPTY
    prices: dict[str, Price] = {}
    for entry in sorted(k for k in raw if isinstance(k, str)):
        per_token = entry_price(raw[entry])
        key = entry.strip().lower()
        if per_token is not None and key and key not in prices:
            fields = raw[entry]
            prices[key] = Price(entry, per_token, _cost(fields.get("input_cost_per_token")),
                                _cost(fields.get("output_cost_per_token")))
    dated: dict[str, tuple[str, str]] = {}
    hosted: dict[str, list[tuple[float, str]]] = {}
    for key in sorted(prices):
        undated = _undated(key)
        if undated is not None:
            base, date = undated
            if base not in dated or (date, key) > dated[base]:
                dated[base] = (date, key)
        if "/" in key:
            tail = key.rsplit("/", 1)[1]
            if tail and tail not in prices:
                hosted.setdefault(tail, []).append((prices[key].per_token, key))
    # hosts charge differently for one model: the entry of median price is the typical one
    tails = {tail: sorted(entries)[(len(entries) - 1) // 2][1]
             for tail, entries in hosted.items()}
    return PriceTable(prices, {base: key for base, (_, key) in dated.items()}, tails)


def _release(key: str, table: PriceTable) -> Price | None:
    """Steps 1 to 3 of the module docstring for one provider-less or prefixed name."""
    if key in table.prices:
        return table.prices[key]
    if key.endswith(_LATEST_TAG):
        return _release(key[: -len(_LATEST_TAG)], table)
    undated = _undated(key)
    if undated is None and key.endswith(_LATEST_SUFFIX):
        return _alias(key[: -len(_LATEST_SUFFIX)], table)
    if undated is None:
        return _alias(key, table)
    return _alias(undated[0], table)


def _alias(base: str, table: PriceTable) -> Price | None:
    """An undated name: itself, its `-latest` entry, else its newest release."""
    for candidate in (base, base + _LATEST_SUFFIX, table.newest.get(base)):
        if candidate is not None and candidate in table.prices:
            return table.prices[candidate]
    return None


def lookup(name: str, table: PriceTable) -> Price | None:
    """The price of the model `name` by the rules of the module docstring; None when the
    catalogue has no entry for it."""
    key = name.strip().lower()
    if not key:
        return None
    found = _release(key, table)
    bare = key.rsplit("/", 1)[-1]
    if found is None and bare != key:
        found = _release(bare, table)
    if found is None:
        prefixed = table.by_tail.get(bare)
        if prefixed is None and bare.endswith(_LATEST_TAG):
            prefixed = table.by_tail.get(bare[: -len(_LATEST_TAG)])
        found = table.prices.get(prefixed) if prefixed is not None else None
    return found


def catalogue_path() -> Path | None:
    """Where the installed `tokencost` keeps its price file, found without importing it."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    locations = spec.submodule_search_locations if spec is not None else None
    for location in locations or ():
        path = Path(location) / FILE_NAME
        if path.is_file():
            return path
    return None


@functools.cache
def catalogue() -> PriceTable:
    """The installed catalogue, read once per process; empty (and logged) when unreadable."""
    path = catalogue_path()
    if path is None:
        log.warning("no model price catalogue: %s is not installed; models of unknown size "
                    "are ranked by name", PACKAGE)
        return EMPTY
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("the model price catalogue %s is unreadable: %r", path, exc)
        return EMPTY
    return build_table(raw)


@functools.lru_cache(maxsize=4096)
def price_of(name: str) -> Price | None:
    """`lookup` in the installed catalogue (cached: a request names the same few models)."""
    return lookup(name, catalogue())
