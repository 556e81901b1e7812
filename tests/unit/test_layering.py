"""The library's layering, checked from its imports (docs/architecture.md, "The library's
layers").

* Every import-linter contract in pyproject.toml holds on the tree: the layers of `habitus`,
  no cycles among sibling modules, services on the runtime library only and independent of
  each other, a library that imports no service.
* The same contracts, run on a copy of the code with a violation planted, break and name the
  contract: a check that cannot fail proves nothing.
* No module of `habitus` or `services` reaches itself again through its imports, module by
  module: the sibling contract compares the modules of one package, so a package's
  `__init__` and one of its own modules importing each other would pass it.

The linter runs as `lint-imports`, the command a developer runs, in a fresh interpreter: only
there does `habitus` resolve to the planted copy rather than to the package this test runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: contract name -> id, as pyproject.toml declares them
CONTRACTS = {c["name"]: c["id"] for c in
             tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]}


def lint(root: Path, pythonpath: Path | None = None) -> tuple[dict[str, bool], str]:
    """Run `lint-imports` with `root`'s pyproject.toml: each contract's id -> kept, and the
    output (to show on failure)."""
    env = {**os.environ, "COLUMNS": "1000"}  # one line per contract: no wrapped names
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", "pyproject.toml"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    results: dict[str, bool] = {}
    for line in output.splitlines():
        name, _, status = line.rstrip().rpartition(" ")
        if status in ("KEPT", "BROKEN") and name in CONTRACTS:
            results[CONTRACTS[name]] = status == "KEPT"
    assert set(results) == set(CONTRACTS.values()), f"not every contract ran:\n{output}"
    assert (done.returncode == 0) == all(results.values()), output
    return results, output


def test_every_contract_is_kept() -> None:
    results, output = lint(ROOT)
    assert all(results.values()), output


#: what is appended to which file of the copy, and the contracts that must then break
PLANTS = {
    "upward": ({"habitus/events/__init__.py": "import habitus.cli\n",
                "services/gateway/__init__.py": "import habitus.demo.scripted_llm\n"},
               {"layers", "services-run-on-the-library"}),
    "cycle": ({"habitus/projection/base.py": "import habitus.projection.runner\n"},
              {"acyclic"}),
    "services": ({"services/extractor/__init__.py": "import services.habits\n",
                  "habitus/ids.py": "import services.gateway\n"},
                 {"services-independent", "library-knows-no-service"}),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_violation_breaks_its_contract(plant: str, tmp_path: Path) -> None:
    additions, expected = PLANTS[plant]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "libs" / "habitus", tmp_path / "habitus", ignore=ignore)
    shutil.copytree(ROOT / "services", tmp_path / "services", ignore=ignore)
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    for path, line in additions.items():
        with (tmp_path / path).open("a") as fh:
            fh.write(f"\n{line}")
    results, output = lint(tmp_path, pythonpath=tmp_path)
    broken = {contract for contract, kept in results.items() if not kept}
    assert expected <= broken, output
    if plant == "cycle":  # a cycle inside one layer breaks no layer, only the cycle contract
        assert broken == expected, output


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start) & modules)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(
                        graph.find_modules_directly_imported_by(child) & modules))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back() -> None:
    graph = grimp.build_graph("habitus", "services", cache_dir=None)
    modules = {m for m in graph.modules if m.split(".")[0] in ("habitus", "services")}
    assert _cycles(graph, modules) == []


def test_the_cycle_search_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg", imported="pkg.a")
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    assert _cycles(graph, set(graph.modules)) == [["pkg", "pkg.a", "pkg.b"]]


# A service process imports every service's descriptor (the data flow needs them all), so what
# those modules import at their top is paid by every process `habitus up` starts. The OpenAI SDK
# and numpy were a third of that; they are imported where a model is called or a vector made.
#: imported only where they are used, never by starting a service
LAZY = ("openai", "numpy")


def test_starting_a_service_imports_neither_the_llm_sdk_nor_numpy() -> None:
    code = ("import sys; from habitus.service import registry; registry.services(); "
            "from habitus.service.host import ServiceHost; "
            f"print(','.join(m for m in {LAZY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == ""
