"""The shape every service keeps, checked on the source so a new service cannot drift from it:
no dispatch on event-type strings, and no SQL on the projection bookkeeping tables outside the
one `CheckpointStore` (migrations create them; nothing else writes or reads them)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("libs/habitus", "services") for p in (ROOT / d).rglob("*.py")
                 if "migrations" not in p.parts)
BOOKKEEPING = re.compile(
    r"projection_checkpoints|projection_members|applied_events\b|dead_letters\b")
#: the helpers that spell those tables' names (a statement built from them is the same leak)
TABLE_NAMES = re.compile(
    r"\b(checkpoint_table|members_table|applied_table|dead_letter_table)\(")
TYPE_DISPATCH = re.compile(r"""\.type\s*(==|!=|in)\s*["'(\[{]|\bmatch\s+[\w.\[\]]*\.type\b""")
#: the store itself, and the DDL helpers the frozen migrations were written from
CHECKPOINT_OWNERS = {"libs/habitus/projection/checkpoints.py",
                     "libs/habitus/projection/tables.py"}


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _code_lines(path: Path) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1)
            if not line.lstrip().startswith("#")]


def test_no_dispatch_on_event_type_names() -> None:
    hits = [f"{_relative(path)}:{n}: {line.strip()}" for path in SOURCES
            for n, line in _code_lines(path) if TYPE_DISPATCH.search(line)]
    # The catalog's fast decoder compares a decoded envelope with its own spec, not a dispatch.
    hits = [h for h in hits if not (h.startswith("libs/habitus/events/catalog.py")
                                    and "spec.type" in h)]
    assert hits == [], "dispatch through a handler table instead"


def test_only_the_checkpoint_store_touches_the_bookkeeping_tables() -> None:
    statement = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|TABLE)\b")
    hits = [f"{_relative(path)}:{n}: {line.strip()}" for path in SOURCES
            if _relative(path) not in CHECKPOINT_OWNERS
            for n, line in _code_lines(path)
            if (BOOKKEEPING.search(line) and statement.search(line))
            or TABLE_NAMES.search(line)]
    assert hits == [], "go through habitus.projection.checkpoints.CheckpointStore"


def test_the_checks_would_see_a_violation() -> None:
    assert TYPE_DISPATCH.search('        if event.type == "CacheRebuilt":')
    assert TYPE_DISPATCH.search("    elif d.event.type in ('A', 'B'):")
    assert TYPE_DISPATCH.search("        match delivered.event.type:")
    assert BOOKKEEPING.search("SELECT last_seq FROM profile.projection_checkpoints")
    assert TABLE_NAMES.search("        self._table = checkpoint_table(projection.schema)")
