"""The fork server's process: import what services import once, then fork a service per request.

A service process spends most of its start importing (every service loads every service's
descriptor, since the data flow needs them all): about a CPU second each, eight times per
`habitus up` and again on every restart. This process, started by `habitus up` through
:class:`habitus.runtime.forkserver.ForkServer`, imports all that once; each service is then a
fork of it that starts with the modules already in memory (the name is Android's, for the process
its apps are forked from).

The protocol is one JSON object per line. After preloading, this process writes
``{"ready": true, "failed": [...]}``; then, for each request line on stdin, ``{"argv": [...],
"module": "habitus.cli", "args": [...], "env": {...}, "log": "...", "parent": <pid>}``, it writes
``{"pid": <pid>}`` or ``{"error": "..."}``. It exits when its stdin closes (its owner stopped
or died).

Each service is forked twice: the middle process exits at once, so the service is re-parented to
its owner (a subreaper, see :func:`habitus.runtime.lifetime.become_subreaper`) and is the owner's
child like any it spawned itself: the owner waits for it, reads its exit status and signals it.
The service then does what a fresh ``python -m module args`` in its own session would: its
environment, stdin from /dev/null, stdout and stderr to its log, a title naming its command (so
`ps` shows ``... serve extractor``, not this process), and a parent-death signal once it is its
owner's child.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import runpy
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from typing import IO, Any

from habitus.runtime.lifetime import arm_death_signal

#: How long a forked service waits to be re-parented to its owner before giving up: the middle
#: process exits right after the fork, so this is only reached if the owner died meanwhile.
REPARENT_TIMEOUT = 10.0


def preload(names: Iterable[str]) -> list[str]:
    """Import each ``module`` (or import ``module`` and call its ``function`` for
    ``module:function``, to fill a cache the services read). Returns what failed, each with
    its error: not fatal, a service that needs it imports it itself and reports its own error."""
    failed: list[str] = []
    for name in names:
        module, _, function = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if function:
                getattr(loaded, function)()
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed


def exit_code(code: object) -> int:
    """The process exit status for ``SystemExit(code)``, as the interpreter would make it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_module(module: str, args: list[str]) -> int:
    """What ``python -m module args`` does, in this process; its exit status."""
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exit_code(exc.code)
    except KeyboardInterrupt:
        finish(None)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def finish(code: int | None) -> None:
    """End the process as the interpreter would at exit: join its non-daemon threads, run the
    exit hooks, flush, then exit with `code` (None: die of SIGINT, as an uncaught Ctrl-C does)."""
    shutdown = getattr(threading, "_shutdown", None)  # what interpreter exit calls first
    with contextlib.suppress(Exception):
        if shutdown is not None:
            shutdown()
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if code is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(1 if code is None else code)


def keep_only_stdio() -> None:
    """Close every descriptor but 0, 1 and 2 (as an exec with close_fds would), and read stdin
    afresh: the parent's reader may hold bytes it had buffered from another pipe."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    sys.stdin = open(0, closefd=False)


def set_title(title: str) -> None:
    """What `ps` shows for this process (its command line would be the zygote's); set before
    the environment is replaced: setting it finds its memory through the environment the
    process started with."""
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except Exception:
        traceback.print_exc()


def _redirect(log_path: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    keep_only_stdio()


def become_service(request: dict[str, Any]) -> None:
    """The forked service's start: never returns."""
    code = 1
    try:
        os.setsid()
        parent = int(request["parent"])
        deadline = time.monotonic() + REPARENT_TIMEOUT
        while os.getppid() != parent:  # the middle process is exiting
            if time.monotonic() > deadline:
                os._exit(1)
            time.sleep(0.0005)
        if not arm_death_signal(signal.SIGTERM, parent):
            os._exit(1)
        _redirect(str(request["log"]))
        set_title(shlex.join(str(a) for a in request["argv"]))  # before the environment
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})
        # Settings are read from the environment once per process and kept; what this process
        # (or the one it was forked from) read is not the service's.
        config = sys.modules.get("habitus.config")
        if config is not None:
            config.get_settings.cache_clear()
        code = run_module(str(request["module"]), [str(a) for a in request["args"]])
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finish(code)


def spawn(request: dict[str, Any]) -> int:
    """Fork the service `request` describes, as a grandchild that is re-parented to its owner
    before this returns; its pid."""
    for key in ("module", "args", "env", "log", "parent", "argv"):
        if key not in request:
            raise ValueError(f"the request has no {key!r}")
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read_end)
            service = os.fork()
            if service == 0:
                os.close(write_end)
                become_service(request)
            os.write(write_end, str(service).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 64):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(middle, 0)  # once it is reaped, the service is the owner's child
    if not chunks:
        raise OSError("the fork failed in the middle process")
    return int(b"".join(chunks))


def _answer(out: IO[bytes], doc: dict[str, Any]) -> None:
    out.write(json.dumps(doc).encode() + b"\n")
    out.flush()


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    failed = preload(names)
    # What was preloaded is kept for the process's life: out of the collector's passes, the
    # forks' first collection (a service host's start) does not visit, and so copy, the pages
    # they share with this process.
    gc.collect()
    gc.freeze()
    out = sys.stdout.buffer
    if threading.active_count() > 1:
        # Forking a process with other threads copies their locks mid-use: refuse, and the
        # owner starts its services the ordinary way.
        _answer(out, {"ready": False, "error": "a preloaded module started a thread"})
        return 1
    _answer(out, {"ready": True, "failed": failed})
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
            _answer(out, {"pid": spawn(request)})
        except Exception as exc:
            _answer(out, {"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
