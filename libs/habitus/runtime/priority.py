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
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")
AUTOGROUP_ENABLED = Path("/proc/sys/kernel/sched_autogroup_enabled")


def autogroup_nice(text: str) -> int | None:
    """The nice value in a `/proc/<pid>/autogroup` line (`/autogroup-42 nice 0`)."""
    parts = text.split()
    if len(parts) == 3 and parts[1] == "nice":
        with contextlib.suppress(ValueError):
            return int(parts[2])
    return None


def lower_priority(nice: int, autogroup: Path = AUTOGROUP,
                   enabled: Path = AUTOGROUP_ENABLED) -> list[str]:
    """Run this process (and the threads it starts from now on) `nice` steps below the
    default priority, never raising what it has. Returns what was changed, for the log.

    Call it before the process starts threads: a thread keeps the nice value it was
    started with."""
    if nice <= 0:
        return []
    changed: list[str] = []
    if os.getpriority(os.PRIO_PROCESS, 0) < nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        changed.append(f"nice {nice}")
    with contextlib.suppress(OSError):
        if os.getsid(0) == os.getpid() and enabled.read_text().strip() == "1":
            current = autogroup_nice(autogroup.read_text())
            if current is not None and current < nice:
                autogroup.write_text(str(nice))
                changed.append(f"its session's group nice {nice}")
    return changed
