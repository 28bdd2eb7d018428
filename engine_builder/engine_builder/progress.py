"""Measure a running build or download and print its progress line every few seconds (`progress_format`).

`DownloadMeter` counts what is on disk under the download's directory (huggingface_hub writes each file
as `<name>.incomplete` under its `.cache`, then moves it into place), so it needs nothing from the Hub's
library while it runs. `BuildMeter` knows the step and when the step last wrote a line. `beating` prints
a meter's line at once, then every `PROGRESS_SECONDS` from a thread, and once more at the end. Imports
the progress format and the standard library.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from engine_builder.progress_format import (
    PROGRESS_SECONDS,
    BuildProgress,
    DownloadProgress,
    progress_line,
)

Log = Callable[[str], None]
Clock = Callable[[], float]
# The rate is taken over this many seconds, and only once this many were seen.
_RATE_WINDOW = 30.0
_RATE_LEAST = 3.0


class DownloadMeter:
    """The bytes and files of a download so far, read from `root` (the Hub library's metadata aside)."""

    def __init__(
        self,
        root: Path,
        *,
        bytes_total: int | None,
        files_total: int | None,
        metadata: str,
        clock: Clock = time.time,
    ) -> None:
        self._root, self._metadata, self._clock = root, metadata, clock
        self._bytes_total, self._files_total = bytes_total, files_total
        self._started = self._last_moved = clock()
        self._seen: deque[tuple[float, int]] = deque()

    def _on_disk(self) -> tuple[int, int]:
        done = files = 0
        for path in self._root.rglob("*") if self._root.exists() else ():
            with contextlib.suppress(OSError):  # moved into place between the listing and the stat
                if not path.is_file():
                    continue
                if self._metadata not in path.relative_to(self._root).parts:
                    done, files = done + path.stat().st_size, files + 1
                elif path.name.endswith(".incomplete"):  # a file on its way; the rest is the library's
                    done += path.stat().st_size
        return done, files

    def sample(self) -> DownloadProgress:
        """Where the download is now."""
        now = self._clock()
        done, files = self._on_disk()
        if self._seen and done > self._seen[-1][1]:
            self._last_moved = now
        self._seen.append((now, done))
        # The baseline is the last sample at least a window old, so sparse samples still give a rate.
        while len(self._seen) > 1 and now - self._seen[1][0] >= _RATE_WINDOW:
            self._seen.popleft()
        since, then = self._seen[0]
        rate = (done - then) / (now - since) if now - since >= _RATE_LEAST else None
        return DownloadProgress(
            at=now,
            started_at=self._started,
            last_progress_at=self._last_moved,
            bytes_done=done,
            bytes_total=self._bytes_total,
            files_done=files,
            files_total=self._files_total,
            bytes_per_second=None if rate is None else round(max(rate, 0.0), 1),
        )


class BuildMeter:
    """The step a build runs, and when it last moved (began, or wrote a line)."""

    def __init__(self, steps: int, *, clock: Clock = time.time) -> None:
        self._steps, self._clock = steps, clock
        self._started = self._last_moved = self._step_started = clock()
        self._step, self._name = 1, ""
        self._lock = threading.Lock()

    def begin(self, step: int, name: str) -> None:
        """Step `step` (1-based), called `name`, begins."""
        with self._lock:
            self._step, self._name = step, name
            self._step_started = self._last_moved = self._clock()

    def moved(self) -> None:
        """The step wrote a line of output."""
        with self._lock:
            self._last_moved = self._clock()

    def sample(self) -> BuildProgress:
        """Where the build is now."""
        with self._lock:
            return BuildProgress(
                at=self._clock(),
                started_at=self._started,
                last_progress_at=self._last_moved,
                step=self._step,
                steps=self._steps,
                step_name=self._name,
                step_started_at=self._step_started,
            )


@contextlib.contextmanager
def beating(
    sample: Callable[[], DownloadProgress | BuildProgress], log: Log, every: float = PROGRESS_SECONDS
) -> Iterator[Callable[[], None]]:
    """Print `sample()`'s line now, every `every` seconds while the block runs, and at its end.

    Yields a function that prints one more line at once (a build step that begins).
    """
    stop = threading.Event()

    def say() -> None:
        log(progress_line(sample()))

    def beat() -> None:
        while not stop.wait(every):
            say()

    say()
    thread = threading.Thread(target=beat, name="progress", daemon=True)
    thread.start()
    try:
        yield say
    finally:
        stop.set()
        thread.join()
        say()
