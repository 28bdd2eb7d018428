"""Detached component processes: start in their own process group, recognise, stop.

Every component runs as the leader of a new session (so its whole group can be signalled and a
terminal's Ctrl-C does not reach it), with stdout and stderr appended to its log file. A record of
the pid and the kernel's start time of the process lets a later `python -m mmd_testbed` call tell a
live component from a dead one, even when the pid has been reused. A component started for a test
session can also be bound to its parent, so that the kernel kills it when the test process dies. An
advisory file lock serialises concurrent `python -m mmd_testbed` calls on one cluster and concurrent
builds of one cache.

Imports: the standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

_PR_SET_PDEATHSIG = 1

# Components this process started, kept so they are reaped through their Popen (no zombies, and no
# "still running" ResourceWarning when a Popen of a deliberately detached process is collected).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcessRecord:
    """What is needed to find a started component again."""

    name: str
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: distinguishes a reused pid
    command: list[str]
    log: str

    def to_json(self) -> dict[str, object]:
        """Return the record as JSON data."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProcessRecord:
        """Read a record written by `to_json`."""
        command = data["command"]
        assert isinstance(command, list)
        return cls(
            name=str(data["name"]),
            pid=int(str(data["pid"])),
            start_ticks=int(str(data["start_ticks"])),
            command=[str(part) for part in command],
            log=str(data["log"]),
        )


@contextmanager
def _lock_file(path: Path) -> Iterator[TextIO]:
    """The open lock file at `path`, whatever lock is taken on it released at the end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def exclusive_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path`; call `on_wait` first if somebody else holds it."""
    with _lock_file(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@contextmanager
def shared_lock(path: Path) -> Iterator[None]:
    """Hold a shared advisory lock on `path` (many holders at once; `lock_if_free` waits for none)."""
    with _lock_file(path) as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        yield


@contextmanager
def lock_if_free(path: Path) -> Iterator[bool]:
    """Take an exclusive advisory lock on `path` if nobody holds it; yield whether it was taken."""
    with _lock_file(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has exited; only its exit status is left
        return None
    return int(fields[19])


def is_alive(record: ProcessRecord) -> bool:
    """Return whether the recorded process is still running (and is the same process)."""
    return _start_ticks(record.pid) == record.start_ticks


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start(
    name: str,
    command: Sequence[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    bind_to_parent: bool = False,
) -> ProcessRecord:
    """Start `command` detached in a new session, logging to `log`; return its record."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as log_file:
        log_file.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
        log_file.flush()
        preexec: Callable[[], None] | None = _die_with_parent if bind_to_parent else None
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=preexec,  # only prctl(), which is safe between fork and exec
        )
    _CHILDREN[process.pid] = process
    ticks = _start_ticks(process.pid)
    return ProcessRecord(
        name=name,
        pid=process.pid,
        start_ticks=ticks if ticks is not None else -1,
        command=list(command),
        log=str(log),
    )


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _reap(pid: int, wait: float = 0.0) -> None:
    # Our own children must be reaped or they linger as zombies; others are reaped by their parent.
    child = _CHILDREN.get(pid)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=wait)
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def stop(record: ProcessRecord, timeout: float = 15.0) -> bool:
    """Stop the component's whole process group: SIGTERM, then SIGKILL after `timeout` seconds.

    Returns whether anything was still running.
    """
    ticks = _start_ticks(record.pid)
    if ticks is not None and ticks != record.start_ticks:
        return False  # the pid now belongs to an unrelated process: never signal it
    if ticks is None and not _group_members(record.pid):
        _reap(record.pid)
        return False
    _signal_group(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not is_alive(record) and not _group_members(record.pid):
            _reap(record.pid, wait=1.0)
            return True
        time.sleep(0.1)
    _kill_group(record)
    return True


def _kill_group(record: ProcessRecord) -> None:
    _signal_group(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and (is_alive(record) or _group_members(record.pid)):
        _reap(record.pid)
        time.sleep(0.05)
    _reap(record.pid, wait=1.0)


def kill(record: ProcessRecord) -> bool:
    """SIGKILL the component's whole process group at once, as a power cut stops it; whether it ran."""
    ticks = _start_ticks(record.pid)
    if ticks is not None and ticks != record.start_ticks:
        return False
    if ticks is None and not _group_members(record.pid):
        _reap(record.pid)
        return False
    _kill_group(record)
    return True
