"""Lowering a process's CPU priority, so that a busy machine serves reads first.

On one machine (`habitus up`) every service competes for the same cores. A process that
answers no reads (the producers, the profile renderer's projection process) loses nothing
that anyone waits on when it runs a few milliseconds later, while the gateway and the RPC
processes answer people: under load the gateway spent more than half its wall time waiting
for a core, and a `/healthz` that costs nothing took 8 ms at the median.

A nice value alone does not do it on Linux: with `sched_autogroup` on (the default of most
distributions), each session is a group of its own and CPU time is shared between groups
first, whatever their processes' nice values. `habitus up` starts every service in a session
of its own, so the group's nice (`/proc/self/autogroup`) is what counts; the process's own
nice is set too, for kernels without autogroups and for containers. The group is changed only
by a process that leads its session, whose group it is alone: a `habitus serve` started from a
shell shares the shell's group, and lowering it would slow the shell and all it runs. Only
lowering is done: raising a priority needs privileges a service should not have.

Without CAP_SYS_ADMIN the kernel takes one change of any group's nice per 100 ms on the whole
machine and refuses the others with EAGAIN, and `habitus up` starts its background processes
within milliseconds of each other: a refused change is tried again, at random moments, for up
to two seconds. The kernel ignores autogroups for a process outside the root CPU cgroup (most
containers): there the process's own nice is what it has.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")
AUTOGROUP_ENABLED = Path("/proc/sys/kernel/sched_autogroup_enabled")
#: how long a group's change refused for the kernel's rate limit is tried again
GROUP_RETRY_SECONDS = 2.0


def autogroup_nice(text: str) -> int | None:
    """The nice value in a `/proc/<pid>/autogroup` line (`/autogroup-42 nice 0`)."""
    parts = text.split()
    if len(parts) == 3 and parts[1] == "nice":
        with contextlib.suppress(ValueError):
            return int(parts[2])
    return None


def lower_priority(nice: int, autogroup: Path = AUTOGROUP,
                   enabled: Path = AUTOGROUP_ENABLED,
                   sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Run this process (and the threads it starts from now on) `nice` steps below the
    default priority, never raising what it has. Returns what was changed and what was
    refused, for the log: a priority is a preference, and a process that cannot have it
    runs anyway.

    Call it before the process starts threads: a thread keeps the nice value it was
    started with."""
    if nice <= 0:
        return []
    changed: list[str] = []
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
            changed.append(f"nice {nice}")
    except OSError as exc:  # a security module may refuse it
        changed.append(f"nice {nice} refused: {exc}")
    try:
        if os.getsid(0) != os.getpid() or enabled.read_text().strip() != "1":
            return changed  # not its own session's group, or no groups
        current = autogroup_nice(autogroup.read_text())
    except OSError:
        return changed  # no /proc, or no autogroups in this kernel
    if current is None or current >= nice:
        return changed
    deadline = time.monotonic() + GROUP_RETRY_SECONDS
    while True:
        try:
            autogroup.write_text(str(nice))
            changed.append(f"its session's group nice {nice}")
            return changed
        except OSError as exc:
            if exc.errno != errno.EAGAIN or time.monotonic() > deadline:
                changed.append(f"its session's group nice {nice} refused: {exc}")
                return changed
        sleep(random.uniform(0.05, 0.2))
