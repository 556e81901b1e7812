"""How every `habitus` command prints: the data as it is, and all of it.

* Literal. The console has Rich markup off: a rule's priority shown as `[critical]`, a facet
  value or a user's words in brackets print as they are. With markup on, Rich reads
  `[critical]` as a style tag and drops it, so an operator would see a tool rule without the
  one word that says it is a hard constraint. Colour is given as `style=` or as `Text` spans,
  never inside the text.
* Whole. Off a terminal (a pipe, a file, `watch`, a test capturing the output) there is no
  screen to fit: Rich would fall back to 80 columns (or the width of the terminal stderr is
  on) and squeeze a table until its cells are cut with an ellipsis, so `habitus facets list |
  grep` would miss a value. There the console is `WIDE` columns wide and a table takes the
  width its content needs. A terminal keeps its own width (Rich wraps cells, it cuts only
  words longer than a column).
* JSON is printed with `echo_json`, never through Rich: Rich wraps long lines, which would put
  a newline inside a JSON string.
* Shortened visibly. Where a table cell must be short (an event's payload, a dead letter's
  detail) `cut` ends it with an ellipsis, and `--json` has it whole.
"""

from __future__ import annotations

import datetime
import json
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions

#: the width off a terminal: wider than any row a command prints, so nothing is cut or wrapped
WIDE = 10_000
#: the width of a rendered document (PROFILE.md) off a terminal: Markdown centres headings and
#: rules across the whole width, which at `WIDE` would be thousands of spaces per line
DOCUMENT_WIDTH = 100


class CliConsole(Console):
    """A console with markup and highlighting off that is `WIDE` when not on a terminal.

    The check is made at each print, not once at import: the same console serves a command
    run in a terminal and one whose output a test (Typer's CliRunner) or a pipe captures."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{"markup": False, "highlight": False, **options})
        #: a size set explicitly (`console.size = ...`, `console.width = ...`) wins everywhere
        self._fixed: ConsoleDimensions | None = None

    @property
    def size(self) -> ConsoleDimensions:
        if self._fixed is not None:
            return self._fixed
        measured = super().size
        if self.is_terminal:
            return measured
        return ConsoleDimensions(WIDE, measured.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._fixed = ConsoleDimensions(*new_size)

    @property
    def width(self) -> int:
        return self.size.width

    @width.setter
    def width(self, width: int) -> None:
        self.size = (width, self.size.height)

    @property
    def document_width(self) -> int:
        """The width to render a document at: the terminal's, else `DOCUMENT_WIDTH`."""
        return self.width if self.is_terminal else DOCUMENT_WIDTH


console = CliConsole()


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def echo_json(value: Any) -> None:
    """Print `value` as indented JSON (times as ISO 8601), exactly as given."""
    typer.echo(json.dumps(value, indent=1, ensure_ascii=False, default=_plain))


#: the `--json` flag of the bus commands (`lag`, `dlq list`, `dlq replay`)
AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]


def iso(epoch: float | None) -> str:
    """An epoch as ISO 8601 UTC with milliseconds (`2026-01-02T03:04:05.000Z`), or `-`."""
    if epoch is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def cut(text: str, width: int) -> str:
    """`text`, or its first `width` - 1 characters and an ellipsis: visibly shortened."""
    return text if len(text) <= width else text[:width - 1] + "…"


def short(value: Any, width: int = 100) -> str:
    """Compact JSON on one line, cut to `width` characters (with an ellipsis)."""
    return cut(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str), width)


def or_dash(value: int | None) -> str:
    """A count for a table cell: `-` when there is none to show."""
    return "-" if value is None else str(value)
