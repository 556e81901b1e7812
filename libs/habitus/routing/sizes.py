"""Model sizes, prices, and the "largest" and "smallest" of a request's models.

A size (billions of parameters) comes from, in order: the request (`available_models: [name |
{name, parameter_count_b}]`), the model's name (`qwen3:8b` → 8, `mixtral:8x7b` → 56,
`qwen2.5:1.5b` → 1.5, `smollm:135m` → 0.135), then `CATALOG`, a few common names that carry no
size tag. Anything else has no size: in practice a hosted model (`gpt-4o`, `claude-sonnet-4`).

A model without a size is ranked by its price, from the catalogue `tokencost` ships (see
`prices`): what a provider charges is the maintained, public proxy for how large a hosted model
is, and it tells gpt-4o ($12.50 per 1M tokens) from gpt-4o-mini ($0.75), which the names alone
cannot.

The ranking, one total order, so the answer is the same for any order of the request's models:

- `largest`: a model of unknown size first (unknown is not zero: a hosted model is larger than
  any local one; the reference scored unknown as 0 parameters, so its "largest" could never
  pick a cloud model), then the larger size;
- `smallest`: a sized model first (an unknown size is never the smallest while a sized model
  is offered), then the smaller size;
- then, for both, a model the price catalogue knows before one it does not (a fact before
  none), then the higher price for `largest`, the lower for `smallest`;
- then the name (case-insensitively, then exactly). Never the position in the list: a client
  that sends `gpt-4o-mini,gpt-4o` or `gpt-4o,gpt-4o-mini` gets the same model.

`pick_largest` / `pick_smallest` also say why, in words naming the facts that decided between
the winner and the runner-up ("the priciest model (both of unknown size; price stands in for
size): gpt-4o $12.50 per 1M tokens vs gpt-4o-mini $0.75 per 1M tokens"). A claim is only made
when it is true: a size is said to come "from its name" only when the name states that size,
"from the size catalogue" only when `CATALOG` holds it, else it is "as given".

Pure apart from the price catalogue, which is read once per process (`prices.price_of`); every
ranking function takes the price lookup as an argument, so tests pass their own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from habitus.routing.prices import Price, price_of

Sizes = Mapping[str, float | None]

#: a size tag: optional experts ("8x"), a number, "b" or "m"; not glued to a letter, digit or
#: dot on its left (so "v2", "3.2" and "q4" are not sizes) nor to a letter or digit on its right
_SIZE_TAG = re.compile(r"(?<![A-Za-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?![A-Za-z0-9])",
                       re.IGNORECASE)

#: common names whose default tag has no size in it (Ollama's defaults), in billions
CATALOG: Final[Mapping[str, float]] = {
    "codestral": 22.0,
    "mistral": 7.0,
    "mixtral": 56.0,
    "llama3": 8.0,
    "llama3.1": 8.0,
    "llama3.2": 3.0,
    "llama3.3": 70.0,
    "qwen2.5": 7.0,
    "qwen2.5-coder": 7.0,
    "qwen3": 8.0,
    "deepseek-coder-v2": 16.0,
    "deepseek-r1": 8.0,
    "gemma2": 9.0,
    "gemma3": 4.0,
    "phi3": 3.8,
    "phi4": 14.0,
}


def parse_size(name: str) -> float | None:
    """The size a model's name states, in billions; the first size tag wins.

    The first tag is the total: in "mixtral:8x7b" it is 8 experts of 7B, in "…-16b-a3b" the
    second tag is the active share, which says less about cost and quality than the total.
    """
    match = _SIZE_TAG.search(name)
    if match is None:
        return None
    experts, number, unit = match.groups()
    size = float(number) * (int(experts) if experts else 1)
    if unit.lower() == "m":
        size /= 1000.0
    return size if size > 0 else None


def catalog_size(name: str) -> float | None:
    """The catalog's size for a name, ignoring case and a ":latest" tag."""
    key = name.strip().lower()
    if key.endswith(":latest"):
        key = key[: -len(":latest")]
    return CATALOG.get(key)


def given_size(value: Any) -> float | None:
    """A size the request gives, when it is a positive finite number of billions.

    A given 0 (or a negative, NaN, a bool, a string) means the client does not know the size,
    the way the reference writes unknown, so it is no size rather than the smallest one.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and number > 0:
            return number
    return None


def size_of(name: str, given: Any = None) -> float | None:
    """A model's size: `given` when it is a usable size (`given_size`), else its name, else the
    catalog, else unknown."""
    value = given_size(given)
    if value is not None:
        return value
    parsed = parse_size(name)
    if parsed is not None:
        return parsed
    return catalog_size(name)


def resolve(available: Sequence[str | Mapping[str, Any]] | None
            ) -> tuple[tuple[str, ...], dict[str, float | None]]:
    """The request's model names in order (blank and repeated names dropped) and their sizes.

    An entry is a name or `{"name", "parameter_count_b"?}`; an entry with no usable name is
    skipped rather than failing the request. A name listed twice keeps the larger size the
    request gives for it (a size over none), so which copy comes first does not matter.
    """
    names: list[str] = []
    given: dict[str, float | None] = {}
    for entry in available or ():
        raw: Any = None
        if isinstance(entry, str):
            name = entry.strip()
        elif isinstance(entry, Mapping):
            named = entry.get("name")
            if not isinstance(named, str):
                continue
            name = named.strip()
            raw = entry.get("parameter_count_b")
        else:
            continue
        if not name:
            continue
        value = given_size(raw)
        if name not in given:
            names.append(name)
            given[name] = value
        elif value is not None and (given[name] is None or value > (given[name] or 0.0)):
            given[name] = value
    return tuple(names), {name: size_of(name, given[name]) for name in names}


# --------------------------------------------------------------------------- ranking

PriceLookup = Callable[[str], Price | None]
Direction = Literal["largest", "smallest"]


def name_order(name: str) -> tuple[str, str]:
    """How names break ties: case-insensitively, then exactly (a total order)."""
    return name.casefold(), name


@dataclass(frozen=True, slots=True)
class Known:
    """What is known of one offered model: its size (and where it was read), its price."""

    name: str
    size: float | None
    size_from: str | None  # "from its name", "from the size catalogue", "as given"
    price: Price | None


def known(name: str, sizes: Sizes, prices: PriceLookup = price_of) -> Known:
    """The facts of `name`: its size in `sizes` (a size that is not a positive finite number is
    none) with the source that states it, and its catalogue price."""
    size = given_size(sizes.get(name))
    source: str | None = None
    if size is not None:
        if parse_size(name) == size:
            source = "from its name"
        elif catalog_size(name) == size:
            source = "from the size catalogue"
        else:
            source = "as given"
    return Known(name, size, source, prices(name))


def _largest_first(k: Known) -> tuple[bool, float, bool, float, str, str]:
    return (k.size is not None, -(k.size or 0.0), k.price is None,
            -(k.price.per_token if k.price else 0.0), *name_order(k.name))


def _smallest_first(k: Known) -> tuple[bool, float, bool, float, str, str]:
    return (k.size is None, k.size or 0.0, k.price is None,
            k.price.per_token if k.price else 0.0, *name_order(k.name))


def ranked(models: Sequence[str], sizes: Sizes, direction: Direction,
           prices: PriceLookup = price_of) -> list[Known]:
    """The distinct `models`, best first for `direction` (the module docstring's order)."""
    key = _largest_first if direction == "largest" else _smallest_first
    return sorted((known(m, sizes, prices) for m in dict.fromkeys(models)), key=key)


@dataclass(frozen=True, slots=True)
class Pick:
    """The model a ranking put first, and the facts that put it before the runner-up."""

    model: str
    why: str


def pick(models: Sequence[str], sizes: Sizes, direction: Direction,
         prices: PriceLookup = price_of) -> Pick | None:
    """The first model of `ranked` and why; None for no models."""
    order = ranked(models, sizes, direction, prices)
    if not order:
        return None
    return Pick(order[0].name, explain(order, direction))


def pick_largest(models: Sequence[str], sizes: Sizes,
                 prices: PriceLookup = price_of) -> Pick | None:
    return pick(models, sizes, "largest", prices)


def pick_smallest(models: Sequence[str], sizes: Sizes,
                  prices: PriceLookup = price_of) -> Pick | None:
    return pick(models, sizes, "smallest", prices)


def largest(models: Sequence[str], sizes: Sizes, prices: PriceLookup = price_of) -> str | None:
    """The largest model (unknown size first, then size, price, name); None for no models."""
    chosen = pick_largest(models, sizes, prices)
    return chosen.model if chosen is not None else None


def smallest(models: Sequence[str], sizes: Sizes, prices: PriceLookup = price_of) -> str | None:
    """The smallest model (sized first, then size, price, name); None for no models."""
    chosen = pick_smallest(models, sizes, prices)
    return chosen.model if chosen is not None else None


# --------------------------------------------------------------------------- reasons


def _billions(size: float) -> str:
    """A size as short as it reads ("8", "1.5", "0.135") yet exact, so two different sizes
    never print alike."""
    short = f"{size:g}"
    return short if float(short) == size else repr(size)


def _size_text(k: Known) -> str:
    return f"{_billions(k.size)}B {k.size_from}" if k.size is not None else "size unknown"


def _decimals(values: Sequence[float]) -> int:
    """Decimals that show every value with two significant digits at least and tell distinct
    values apart (so "$0.00" or two equal-looking prices never stand for different ones)."""
    digits = 2
    for value in values:
        if 0 < value < 1:
            digits = max(digits, 1 - math.floor(math.log10(value)))
    while digits < 12 and len({f"{v:.{digits}f}" for v in values}) < len(set(values)):
        digits += 1
    return digits


def _price_text(k: Known, digits: int | None = None) -> str:
    if k.price is None:
        return "no catalogue price"
    per_million = k.price.per_million
    shown = digits if digits is not None else _decimals([per_million])
    text = f"${per_million:,.{shown}f} per 1M tokens"
    if k.price.entry.strip().lower() != k.name.strip().lower():
        text += f" (catalogue entry {k.price.entry})"
    return text


def _facts(k: Known) -> str:
    if k.size is None and k.price is None:
        return "no size or price known"
    parts = [_size_text(k)] if k.size is not None else []
    if k.price is not None:
        parts.append(_price_text(k))
    return ", ".join(parts)


def explain(order: Sequence[Known], direction: Direction) -> str:
    """Why `order[0]` comes first: the fact that set it before `order[1]`, both sides named."""
    winner = order[0]
    if len(order) == 1:
        return f"{winner.name}, the only model offered ({_facts(winner)})"
    runner = order[1]
    w, r = winner.name, runner.name
    if (winner.size is None) != (runner.size is None):
        if direction == "largest":
            unknown = "size unknown" + (f", {_price_text(winner)}" if winner.price else "")
            return ("the largest model (a model of unknown size counts as a hosted one, larger "
                    f"than any sized model): {w} {unknown} vs {r} {_size_text(runner)}")
        return ("the smallest model (a sized model goes before any of unknown size): "
                f"{w} {_size_text(winner)} vs {r} size unknown")
    if winner.size is not None and winner.size != runner.size:
        return (f"the {direction} model: {w} {_size_text(winner)} vs "
                f"{r} {_size_text(runner)}")
    basis = ("both of unknown size" if winner.size is None
             else f"both {_billions(winner.size)}B")
    if (winner.price is None) != (runner.price is None):
        return (f"the one the price catalogue knows ({basis}; a known price goes before "
                f"none): {w} {_price_text(winner)} vs {r} no catalogue price")
    if (winner.price is not None and runner.price is not None
            and winner.price.per_token != runner.price.per_token):
        digits = _decimals([winner.price.per_million, runner.price.per_million])
        superlative = "priciest" if direction == "largest" else "cheapest"
        return (f"the {superlative} model ({basis}; price stands in for size): "
                f"{w} {_price_text(winner, digits)} vs {r} {_price_text(runner, digits)}")
    price = "no catalogue price" if winner.price is None else "the same catalogue price"
    return f"the first by name ({basis}, {price}): {w} before {r}"
