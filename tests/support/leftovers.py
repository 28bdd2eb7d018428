"""Mounts that dead test sessions left behind under pytest's numbered directories, and their removal.

A session killed mid-way (a stopped CI job, a SIGKILL) never tears down its real nodes, so kubelet volumes,
sandbox `shm` and container root file systems stay mounted inside its numbered directory under
`/tmp/pytest-of-<user>`; pytest later deletes old numbered directories and fails on those mounts. Nor
does pytest delete a killed session's directory for three days (its `.lock` stays behind), several GB
each with the real nodes' image stores: `remove_dead_sessions` does. A tritonserver that died or was
killed leaves its Python stubs' shared memory in /dev/shm (about 1 MB a region, in the machine's memory):
`remove_unmapped_stub_memory` removes the regions no process maps any more. Imports the local cluster's
unmount helper.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from mmd_testbed.localcluster.nodes import unmount_all

# pytest writes a numbered directory's `.lock` right after making it.
_LOCK_SETTLE_SECONDS = 60.0


def sessions_root() -> Path:
    """Where pytest makes its numbered directories for this user."""
    return Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"


def _session_is_dead(numbered_directory: Path) -> bool:
    """True when no live pytest process holds the directory (its `.lock` names the holder's pid)."""
    if numbered_directory.name.startswith("garbage-"):
        return True  # pytest renames a directory to garbage-* only once it judged it dead
    try:
        pid = int((numbered_directory / ".lock").read_text())
    except (OSError, ValueError):
        # Ended, unless pytest made it a moment ago and is about to write its lock.
        with contextlib.suppress(OSError):
            return time.time() - numbered_directory.stat().st_mtime > _LOCK_SETTLE_SECONDS
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def unmount_dead_sessions(root: Path) -> int:
    """Unmount everything under numbered directories of dead sessions in `root`; return how many mounts."""
    if os.geteuid() != 0 or not root.is_dir():
        return 0
    count = 0
    for directory in root.iterdir():
        with contextlib.suppress(OSError):
            if directory.is_dir() and not directory.is_symlink() and _session_is_dead(directory):
                count += unmount_all(directory)
    return count


def remove_dead_sessions(root: Path) -> list[str]:
    """Unmount and delete the numbered directories of dead sessions in `root`; return their names.

    A live session's directory (this one's, or another run's at the same time) stays.
    """
    if not root.is_dir():
        return []
    removed = []
    for directory in sorted(root.iterdir()):
        with contextlib.suppress(OSError):
            numbered = directory.name.startswith(("pytest-", "garbage-"))
            if numbered and directory.is_dir() and not directory.is_symlink() and _session_is_dead(directory):
                if os.geteuid() == 0:
                    unmount_all(directory)
                shutil.rmtree(directory)
                removed.append(directory.name)
    return removed


# The Python backend's region names: the prefix the launch argv gives each rank, or the backend's default.
_STUB_REGION = re.compile(r"^(prefix\d+_|triton_python_backend_shm_region_)")
# A region this young may be between its creation and its first mapping.
_REGION_SETTLE_SECONDS = 600.0


def _mapped(proc: Path) -> set[str]:
    """Every file path some process on this machine maps (the sixth column of its maps)."""
    paths: set[str] = set()
    for maps in proc.glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            for line in maps.read_text().splitlines():
                columns = line.split(maxsplit=5)
                if len(columns) == 6:
                    paths.add(columns[5])
    return paths


def remove_unmapped_stub_memory(shm: Path = Path("/dev/shm"), proc: Path = Path("/proc")) -> list[str]:
    """Remove the Python stubs' regions in `shm` that no process maps and that are older than ten minutes."""
    if not shm.is_dir():
        return []
    in_use = _mapped(proc)
    now = time.time()
    removed = []
    for region in sorted(shm.iterdir()):
        with contextlib.suppress(OSError):
            if (
                _STUB_REGION.match(region.name)
                and str(region) not in in_use
                and now - region.stat().st_mtime > _REGION_SETTLE_SECONDS
            ):
                region.unlink()
                removed.append(region.name)
    return removed
