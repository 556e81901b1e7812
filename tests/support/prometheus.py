"""Prometheus and promtool for the tests: found on PATH, installed when missing, or a clear reason.

`binaries()` looks for `prometheus` and `promtool` on PATH (and /usr/bin, where the Debian
package puts them). When either is missing and we run as root with apt-get available, it
installs the Debian package `prometheus` non-interactively, with a policy-rc.d that forbids
starting the packaged system service (the tests start their own Prometheus on a free port), and
runs `apt-get update` first when the package is not in the local index. When none of that works,
`require()` fails with the reason under CI (CI=true) and skips with it elsewhere.

The Makefile's install step runs the same installation (`python -m tests.support.prometheus`),
so `make test` on a clean clone has promtool before the first test runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TOOLS = ("prometheus", "promtool")
PACKAGE = "prometheus"
POLICY_RC = Path("/usr/sbin/policy-rc.d")
_lock = threading.Lock()
_result: Binaries | str | None = None


@dataclass(frozen=True)
class Binaries:
    prometheus: str
    promtool: str


def find() -> Binaries | None:
    found = {}
    for tool in TOOLS:
        path = shutil.which(tool) or shutil.which(tool, path="/usr/bin:/usr/local/bin")
        if path is None:
            return None
        found[tool] = path
    return Binaries(**found)


def _apt(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "NEEDRESTART_MODE": "a"}
    return subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@contextlib.contextmanager
def _no_service_start() -> Iterator[None]:
    """policy-rc.d exit 101: invoke-rc.d starts no service while the package installs."""
    if POLICY_RC.exists():
        yield None
        return
    POLICY_RC.write_text("#!/bin/sh\n# written by tests/support/prometheus.py\nexit 101\n")
    POLICY_RC.chmod(0o755)
    try:
        yield None
    finally:
        POLICY_RC.unlink(missing_ok=True)


def install() -> str | None:
    """Install the Debian package; None on success, else why it could not be installed."""
    if shutil.which("apt-get") is None:
        return ("apt-get is not available (install Prometheus 2.x so prometheus and promtool "
                "are on PATH)")
    if os.geteuid() != 0:
        return ("not root, so `apt-get install prometheus` cannot run (install it yourself, or "
                "put prometheus and promtool on PATH)")
    with _no_service_start():
        known = _apt(["-q", "install", "-y", "--no-install-recommends", "--simulate", PACKAGE],
                     timeout=120)
        if known.returncode != 0:
            update = _apt(["-q", "update"], timeout=300)
            if update.returncode != 0:
                return f"apt-get update failed: {update.stderr.strip()[-500:]}"
        result = _apt(["-q", "install", "-y", "--no-install-recommends", PACKAGE], timeout=900)
    # A failed service start in post-install is not our concern; the binaries are.
    if find() is None:
        return (f"apt-get install -y {PACKAGE} did not provide prometheus and promtool "
                f"(exit {result.returncode}): {(result.stderr or result.stdout).strip()[-800:]}")
    return None


def ensure() -> Binaries | str:
    """The binaries, installing them once if needed; or the reason they are unavailable."""
    global _result
    with _lock:
        if isinstance(_result, Binaries):
            return _result
        found = find()
        if found is None and _result is None:
            problem = install()
            found = find()
            _result = found or problem or "prometheus/promtool not found after installing"
        elif found is not None:
            _result = found
        return _result


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require() -> Binaries:
    """For a test: the binaries, or fail (under CI) / skip (elsewhere) saying exactly why."""
    got = ensure()
    if isinstance(got, Binaries):
        return got
    message = f"Prometheus is needed and not available: {got}"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def main() -> int:
    got = ensure()
    if isinstance(got, Binaries):
        version = subprocess.run([got.promtool, "--version"], capture_output=True, text=True,
                                 check=False).stdout.splitlines()
        print(f"prometheus: {got.prometheus}, promtool: {got.promtool} "
              f"({version[0] if version else 'unknown version'})")
        return 0
    print(f"prometheus: not installed: {got}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
