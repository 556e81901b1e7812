"""A command the fork-server tests start with ``python -m tests.support.forked_child``.

It reports, as one JSON line on stdout (its log), what a service would find at its start: its
parent, session, environment, title, arguments and whether the preloaded modules were already in
memory; then it exits with the status its first argument names, or sleeps ("sleep").
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _metrics_port() -> int | None:
    config = sys.modules.get("habitus.config")  # only where the owner had read its settings
    return None if config is None else int(config.get_settings().metrics_port)


def main() -> int:
    report = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "session_leader": os.getsid(0) == os.getpid(),
        "probe": os.environ.get("FORKED_PROBE"),
        "inherited": os.environ.get("FORKED_ONLY_IN_OWNER"),
        "argv": sys.argv[1:],
        "cmdline": Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip(),
        "preloaded": "csv" in sys.modules,  # what the tests preload
        "stdin": sys.stdin.read(),
        # the settings as the service would read them (its environment, not its parent's)
        "metrics_port": _metrics_port(),
    }
    print(json.dumps(report), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    what = sys.argv[1] if len(sys.argv) > 1 else "0"
    if what == "sleep":
        time.sleep(600)
        return 0
    if what == "raise":
        raise RuntimeError("a service that fails at start")
    return int(what)


if __name__ == "__main__":
    raise SystemExit(main())
