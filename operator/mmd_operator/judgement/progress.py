"""How far a running build or download is, from the last progress line its pod printed; whether it stalled.

The Job's program prints a line every few seconds (`engine_builder.progress_format`); the kube adapter
reads the last one from the pod's log tail. Here it becomes `status.engine.progress` or
`status.weights.progress`, the few words of the PROGRESS column, and a clause for the condition message.
Work that has not moved for the stall window is Stalled, whether its process still prints or not (a
hung process prints nothing, so its last line ages too). The time left is said only when it can be said
honestly: a download past 1 % of its bytes and 30 s, at the last half minute's rate; never for a build,
whose steps differ by orders of magnitude. Pure: imports the api models and the builder's progress format.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from engine_builder.progress_format import BuildProgress, DownloadProgress
from mmd_operator.api.v1alpha1 import ArtifactProgress

# How long work may go without moving before it is Stalled: a download without a byte, a build step
# without a line of output (an engine build can be quiet for many minutes).
DOWNLOAD_STALL_SECONDS = 5 * 60
BUILD_STALL_SECONDS = 30 * 60
# How often the operator reads a running Job's progress: at most one status write per Job this often.
PROGRESS_POLL_SECONDS = 15.0
# A download's time left is estimated past this share of its bytes and this many seconds.
_ESTIMATE_FROM_SHARE = 0.01
_ESTIMATE_FROM_SECONDS = 30.0
_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


@dataclass(frozen=True)
class Assessed:
    """The status block, and the clause the condition message adds after where the Job runs."""

    progress: ArtifactProgress
    clause: str


def _unit(count: float) -> tuple[float, str]:
    return next(((scale, name) for scale, name in _UNITS if count >= scale), (1.0, "B"))


def _amount(count: int, scale: float) -> str:
    value = count / scale
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def size(count: int) -> str:
    """`count` bytes in the largest unit it fills: `57 GB`, `1.5 MB`, `300 B`."""
    scale, name = _unit(count)
    return f"{_amount(count, scale)} {name}"


def duration(seconds: float) -> str:
    """`45s`, `12m`, `1h05m`."""
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _at(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _download(line: DownloadProgress, now: float) -> Assessed:
    total, done = line.bytes_total, line.bytes_done
    percent = min(100, int(100 * done / total)) if total else None
    if total:
        scale, name = _unit(total)
        short = f"{percent}% {_amount(done, scale)}/{_amount(total, scale)} {name}"
        words = f"{percent} % ({size(done)} of {size(total)}"
    else:
        short = size(done)
        words = f"{size(done)} so far (total unknown"
    files = f"{line.files_done} of {line.files_total} files" if line.files_total is not None else None
    words += f", {files})" if files else ")"
    if line.files_total is not None and not total:
        short += f", {line.files_done}/{line.files_total} files"
    elapsed = now - line.started_at
    remaining = None
    rate = line.bytes_per_second
    if total and rate and done >= _ESTIMATE_FROM_SHARE * total and elapsed >= _ESTIMATE_FROM_SECONDS:
        remaining = int(max(total - done, 0) / rate)
    if rate is not None:
        words += f" at {size(int(rate))}/s"
    if remaining is not None:
        words += f", about {duration(remaining)} left"
    stalled = now - line.last_progress_at >= DOWNLOAD_STALL_SECONDS
    progress = ArtifactProgress(
        summary=short,
        percent=percent,
        bytes_done=done,
        bytes_total=total,
        files_done=line.files_done,
        files_total=line.files_total,
        bytes_per_second=None if rate is None else int(rate),
        elapsed_seconds=int(max(elapsed, 0)),
        remaining_seconds=remaining,
        last_progress_time=_at(line.last_progress_at),
        stalled=stalled,
    )
    if stalled:
        return _stalled(progress, words, "no byte arrived", now - line.last_progress_at)
    return Assessed(progress, words)


def _build(line: BuildProgress, now: float) -> Assessed:
    in_step = duration(now - line.step_started_at)
    short = f"step {line.step}/{line.steps} {line.step_name} {in_step}"
    in_all = duration(now - line.started_at)
    words = f"step {line.step} of {line.steps}, {line.step_name}, for {in_step} ({in_all} in all)"
    stalled = now - line.last_progress_at >= BUILD_STALL_SECONDS
    progress = ArtifactProgress(
        summary=short[:64],
        step=line.step,
        steps=line.steps,
        step_name=line.step_name,
        elapsed_seconds=int(max(now - line.started_at, 0)),
        last_progress_time=_at(line.last_progress_at),
        stalled=stalled,
    )
    if stalled:
        return _stalled(progress, words, "the step wrote nothing", now - line.last_progress_at)
    return Assessed(progress, words)


def _stalled(progress: ArtifactProgress, words: str, what: str, still: float) -> Assessed:
    summary = f"Stalled {duration(still)}: {progress.summary}"[:64]
    clause = f"Stalled: {what} for {duration(still)} (since {progress.last_progress_time}); {words}"
    return Assessed(progress.model_copy(update={"summary": summary}), clause)


def assess(line: DownloadProgress | BuildProgress, now: datetime) -> Assessed:
    """`line` as the status says it at `now` (the operator's clock; the line's times are the pod's)."""
    seconds = now.timestamp()
    return _download(line, seconds) if isinstance(line, DownloadProgress) else _build(line, seconds)
