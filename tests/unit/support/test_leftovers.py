"""Mounts and directories of dead test sessions are undone, and the shared memory of dead Python stubs;
a live session's are left alone (tmpfs mounts, needs root)."""

from __future__ import annotations

import mmap
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd_testbed.localcluster.nodes import unmount_all
from tests.support.leftovers import remove_dead_sessions, remove_unmapped_stub_memory, unmount_dead_sessions

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting tmpfs needs root")


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _is_mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[dict[str, Path]]:
    holders = {
        "pytest-1": str(_dead_pid()),
        "pytest-2": str(os.getpid()),
        "pytest-3": None,
        "garbage-x": None,
    }
    mounts = {}
    for name, holder in holders.items():
        directory = tmp_path / name
        (directory / "nodes" / "shm").mkdir(parents=True)
        if holder is not None:
            (directory / ".lock").write_text(holder)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(directory / "nodes" / "shm")], check=True)
        mounts[name] = directory / "nodes" / "shm"
        os.utime(directory, (time.time() - 3600,) * 2)  # a directory without a lock is ended once it is old
    yield mounts
    unmount_all(tmp_path)


def test_only_the_mounts_of_dead_sessions_are_undone(tmp_path: Path, sessions: dict[str, Path]) -> None:
    assert unmount_dead_sessions(tmp_path) == 3
    assert {name: _is_mounted(path) for name, path in sessions.items()} == {
        "pytest-1": False,  # its lock names a process that has exited
        "pytest-2": True,  # this process holds it
        "pytest-3": False,  # no lock: the session ended
        "garbage-x": False,  # pytest already judged it dead
    }


def test_the_directories_of_dead_sessions_are_removed_and_a_live_ones_kept(
    tmp_path: Path, sessions: dict[str, Path]
) -> None:
    (tmp_path / "pytest-current").symlink_to(tmp_path / "pytest-2")

    assert remove_dead_sessions(tmp_path) == ["garbage-x", "pytest-1", "pytest-3"]
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["pytest-2", "pytest-current"]
    assert _is_mounted(sessions["pytest-2"])


def test_only_stub_regions_no_process_maps_and_old_enough_are_removed(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    old = time.time() - 3600
    for name in ("prefix0_dead", "triton_python_backend_shm_region_dead", "prefix1_mapped", "prefix2_young"):
        (shm / name).write_bytes(b"\0" * 4096)
    (shm / "postgres.shm").write_bytes(b"\0" * 4096)  # not a stub's
    for name in ("prefix0_dead", "triton_python_backend_shm_region_dead", "prefix1_mapped", "postgres.shm"):
        os.utime(shm / name, (old, old))
    with (shm / "prefix1_mapped").open("r+b") as handle, mmap.mmap(handle.fileno(), 4096):
        removed = remove_unmapped_stub_memory(shm)
    assert removed == ["prefix0_dead", "triton_python_backend_shm_region_dead"]
    kept = sorted(entry.name for entry in shm.iterdir())
    assert kept == ["postgres.shm", "prefix1_mapped", "prefix2_young"]


def test_a_directory_made_a_moment_ago_without_its_lock_yet_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "pytest-7").mkdir()  # pytest writes the lock right after

    assert remove_dead_sessions(tmp_path) == []
    assert (tmp_path / "pytest-7").is_dir()
