"""Processes that answer no reads run below the default CPU priority (habitus.runtime.priority);
`habitus up` decides which (habitus.runtime.up.answers_reads).

Lowering a priority cannot be undone without privileges, so every change is made in a child
process started in a session of its own: its session's scheduling group is its alone, and
this process and its session keep theirs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from habitus.runtime.priority import autogroup_nice
from habitus.runtime.up import answers_reads

REPO = Path(__file__).resolve().parents[2]


def _in_child(code: str, *, preexec_nice: int = 0) -> dict[str, object]:
    """Run `code` (which prints one JSON line) in a fresh session at `preexec_nice`."""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
        start_new_session=True, check=True,
        preexec_fn=(lambda: os.nice(preexec_nice)) if preexec_nice else None)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


CHILD = """
import json, os, threading
from pathlib import Path
from habitus.runtime.priority import lower_priority
changed = lower_priority({nice})
seen = []
t = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, 0)))
t.start(); t.join()
group = Path("/proc/self/autogroup")
print(json.dumps({{"changed": changed, "nice": os.getpriority(os.PRIO_PROCESS, 0),
                  "thread": seen[0],
                  "group": group.read_text() if group.exists() else None}}))
"""


def _autogroups() -> bool:
    path = Path("/proc/sys/kernel/sched_autogroup_enabled")
    return path.exists() and path.read_text().strip() == "1"


def test_a_process_and_the_threads_it_starts_run_lower_and_so_does_its_session() -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) >= 10:
        pytest.skip("this process already runs at nice 10 or lower")
    got = _in_child(CHILD.format(nice=10))
    assert got["nice"] == 10 and got["thread"] == 10
    assert "nice 10" in got["changed"]  # type: ignore[operator]
    if _autogroups():
        assert autogroup_nice(str(got["group"])) == 10
        assert "its session's group nice 10" in got["changed"]  # type: ignore[operator]


def test_a_priority_already_lower_is_kept_and_zero_changes_nothing() -> None:
    lower = _in_child(CHILD.format(nice=5), preexec_nice=12)
    assert lower["nice"] == 12 and "nice 5" not in lower["changed"]  # type: ignore[operator]
    same = _in_child(CHILD.format(nice=0))
    assert same["changed"] == [] and same["nice"] == os.getpriority(os.PRIO_PROCESS, 0)


def test_the_group_is_left_alone_where_autogroups_are_off(tmp_path: Path) -> None:
    group = tmp_path / "autogroup"
    group.write_text("/autogroup-7 nice 0\n")
    enabled = tmp_path / "enabled"
    enabled.write_text("0\n")
    code = (f"import json; from pathlib import Path; from habitus.runtime.priority import "
            f"lower_priority; print(json.dumps({{'changed': lower_priority(6, "
            f"Path({str(group)!r}), Path({str(enabled)!r}))}}))")
    assert _in_child(code)["changed"] == ["nice 6"]
    assert group.read_text() == "/autogroup-7 nice 0\n"
    enabled.write_text("1\n")
    assert _in_child(code)["changed"] == ["nice 6", "its session's group nice 6"]
    assert group.read_text() == "6"


@pytest.mark.parametrize(("text", "nice"), [
    ("/autogroup-42 nice 0\n", 0), ("/autogroup-3 nice 10", 10), ("/autogroup-3 nice -5", -5),
    ("", None), ("/autogroup-3 nice high", None), ("/autogroup-3 weight 10", None),
])
def test_an_autogroup_line_is_read(text: str, nice: int | None) -> None:
    assert autogroup_nice(text) == nice


@pytest.mark.parametrize(("service", "role", "answers"), [
    ("gateway", "all", True),                     # the public API
    ("producers", "all", False),                  # no RPC methods: it only applies events
    ("profile_renderer", "projections", False),   # its RPC runs apart
    ("profile_renderer", "rpc", True),            # `prompt.context`
    ("stability_detector", "all", True),          # `learning.*` in the same process
    ("stability_detector", "projections", False),  # `habitus up`: its RPC apart
    ("tool_memory", "all", True),
])
def test_what_answers_reads_keeps_the_default_priority(service: str, role: str,
                                                       answers: bool) -> None:
    assert answers_reads(service, role) is answers


def test_a_process_that_does_not_lead_its_session_leaves_the_group_alone() -> None:
    """`habitus serve` started from a shell shares the shell's group: lowering the group would
    slow the shell. Here a session of its own stands for the shell, and a process forked in it
    (no leader) lowers its own priority only."""
    code = """
import json, os
from pathlib import Path
from habitus.runtime.priority import lower_priority
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, json.dumps(lower_priority(9)).encode())
    os._exit(0)
os.waitpid(pid, 0)
changed = json.loads(os.read(r, 4096))
group = Path("/proc/self/autogroup")
print(json.dumps({"changed": changed, "group": group.read_text() if group.exists() else None,
                  "nice": os.getpriority(os.PRIO_PROCESS, 0)}))
"""
    got = _in_child(code)
    assert got["changed"] == ["nice 9"] and got["nice"] == os.getpriority(os.PRIO_PROCESS, 0)
    if _autogroups():
        assert autogroup_nice(str(got["group"])) == 0


def test_a_group_change_the_kernel_refuses_for_its_rate_limit_is_tried_again(
        tmp_path: Path) -> None:
    """Without CAP_SYS_ADMIN the kernel takes one group change per 100 ms machine-wide and
    answers the rest EAGAIN: two refusals, then the change; any other refusal is reported."""
    enabled = tmp_path / "enabled"
    enabled.write_text("1\n")
    code = f"""
import errno, json
from pathlib import Path
from habitus.runtime.priority import lower_priority

class Group:
    def __init__(self, refusals, error):
        self.refusals, self.error, self.written, self.waits = refusals, error, [], []
    def read_text(self):
        return "/autogroup-5 nice 0"
    def write_text(self, text):
        if self.refusals:
            self.refusals -= 1
            raise OSError(self.error, "refused")
        self.written.append(text)

busy = Group(2, errno.EAGAIN)
got = lower_priority(4, busy, Path({str(enabled)!r}), sleep=busy.waits.append)
denied = Group(1, errno.EPERM)
other = lower_priority(4, denied, Path({str(enabled)!r}), sleep=denied.waits.append)
print(json.dumps({{"got": got, "written": busy.written, "waits": len(busy.waits),
                  "other": other, "other_waits": len(denied.waits)}}))
"""
    result = _in_child(code)
    assert result["written"] == ["4"] and result["waits"] == 2
    assert result["got"] == ["nice 4", "its session's group nice 4"]
    assert result["other_waits"] == 0
    assert result["other"] == ["its session's group nice 4 refused: [Errno 1] refused"]
