"""Where the suite's CPU goes: `pytest -p tests.support.cpu_time` adds a table of CPU seconds per
test module (the test process's own, and that of the child processes it waited for) to the
summary, the heaviest first. docs/testing.md was written from it.

Wall-clock durations (`--durations`) mislead on two cores: a test that waits costs nothing, and a
test whose `habitus up` starts eight service processes costs the other worker its core too. The
CPU of a test's children is counted once they have been reaped, which the tests that start
processes do before they end; servers the session shares are not counted per test.

Works under xdist: each worker puts its figures on the test's report, the controller adds them.
"""

from __future__ import annotations

import resource
from collections import defaultdict
from collections.abc import Generator
from typing import Any

import pytest

_KEY = "cpu_seconds"


def _now() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


_started: dict[str, tuple[float, float]] = {}
_totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, None, None]:
    _started[item.nodeid] = _now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and item.nodeid in _started:
        own0, children0 = _started.pop(item.nodeid)
        own1, children1 = _now()
        report.user_properties.append((_KEY, (own1 - own0, children1 - children0)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == _KEY:
            module = report.nodeid.split("::", 1)[0]
            row = _totals[module]
            row[0] += value[0]
            row[1] += value[1]
            row[2] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _totals:
        return
    write = terminalreporter.write_line
    own = sum(r[0] for r in _totals.values())
    children = sum(r[1] for r in _totals.values())
    terminalreporter.section("CPU seconds per test module")
    write(f"{'total':>8} {'own':>8} {'children':>9} {'tests':>6}  module")
    for module, (o, c, n) in sorted(_totals.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        if o + c < 1.0:
            continue
        write(f"{o + c:8.1f} {o:8.1f} {c:9.1f} {int(n):6d}  {module}")
    write(f"{own + children:8.1f} {own:8.1f} {children:9.1f}  (every module)")
