"""Modules stay focused: one of more than `LIMIT` lines says why, at its top.

The reason is a line of the module's docstring that starts with `MARKER` ("Long on purpose: one
table of cue rules, read top to bottom"): a reader opening a long file learns at once whether
its length is the point or a split is overdue. Checked for the code that ships and its examples
(the library, the services, examples/); not for migrations (frozen revision files) nor tests
(a test module is a list of cases about one subject).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500
MARKER = "Long on purpose:"
CHECKED = ("libs/habitus", "services", "examples")


def modules() -> list[Path]:
    return sorted(path for folder in CHECKED for path in (ROOT / folder).rglob("*.py")
                  if "migrations" not in path.parts and "__pycache__" not in path.parts)


def says_why(source: str) -> bool:
    """Whether the module's docstring has a line starting with MARKER."""
    docstring = ast.get_docstring(ast.parse(source), clean=True) or ""
    return any(line.strip().startswith(MARKER) for line in docstring.splitlines())


def long_without_reason(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`<path from root>: <n> lines` for each of `paths` over LIMIT lines that does not say
    why."""
    found = []
    for path in paths:
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > LIMIT and not says_why(source):
            found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_every_long_module_says_why_it_is_long() -> None:
    assert long_without_reason(modules()) == [], (
        f"split it, or say why in its docstring with a line starting {MARKER!r}")


@pytest.mark.parametrize(("docstring", "why"), [
    ('"""A long table.\n\nLong on purpose: the rules are read top to bottom.\n"""', True),
    ('"""A long table.\n\n  Long on purpose: indented is fine.\n"""', True),
    ('"""A long table; long on purpose: not at the start of a line."""', False),
    ('"""A long table."""\n# Long on purpose: a comment is not the docstring', False),
    ("x = 1\n", False),
])
def test_the_reason_is_a_docstring_line(docstring: str, why: bool) -> None:
    assert says_why(docstring) is why


def test_a_long_module_without_a_reason_is_reported(tmp_path: Path) -> None:
    body = "\n".join(f"x{i} = {i}" for i in range(LIMIT + 1))
    silent = tmp_path / "silent.py"
    silent.write_text(f'"""Many names."""\n{body}\n')
    explained = tmp_path / "explained.py"
    explained.write_text(f'"""Many names.\n\n{MARKER} generated, one per line.\n"""\n{body}\n')
    short = tmp_path / "short.py"
    short.write_text('"""Few names."""\nx = 1\n')
    assert long_without_reason([silent, explained, short], tmp_path) == [
        f"silent.py: {LIMIT + 2} lines"]  # the docstring line and the names
