"""Arrays go to Postgres in binary.

psycopg writes a text-format array element by element in Python, escaping each one: about
1.5 µs an event id, three arrays for every event a runner applies (docs/benchmarks.md). A
`%b` placeholder sends the same array in binary at a fifth of that. This holds the code that
ships to it: an array parameter written `%s::<type>[]` is reported with its file and line, its
type written out or formatted in (`%s::{t}[]`).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("libs/habitus", "services")
TEXT_ARRAY = re.compile(r"%s::(?:[a-z0-9_ ]+|\{[^}]*\})\[\]")


def text_arrays(paths: list[Path], root: Path = ROOT) -> list[str]:
    return [f"{path.relative_to(root)}:{n}: {match.group()}"
            for path in paths
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for match in TEXT_ARRAY.finditer(line)]


def test_no_array_parameter_is_sent_as_text() -> None:
    paths = sorted(p for folder in CHECKED for p in (ROOT / folder).rglob("*.py")
                   if "__pycache__" not in p.parts)
    assert text_arrays(paths) == []


def test_a_text_array_is_reported_where_it_is(tmp_path: Path) -> None:
    store = tmp_path / "store.py"
    store.write_text('SQL = """SELECT 1"""\n'
                     'CLAIM = "... FROM unnest(%s::text[], %b::int8[]) AS k(e, s)"\n')
    assert text_arrays([store], tmp_path) == ["store.py:2: %s::text[]"]


def test_a_text_array_whose_type_is_formatted_in_is_reported(tmp_path: Path) -> None:
    store = tmp_path / "store.py"
    store.write_text('ROWS = f"unnest({", ".join(f\'%b::{t}[]\' for t in a)})"\n'
                     'MORE = f"unnest({", ".join(f\'%s::{t}[]\' for t in b)})"\n')
    assert text_arrays([store], tmp_path) == ["store.py:2: %s::{t}[]"]
