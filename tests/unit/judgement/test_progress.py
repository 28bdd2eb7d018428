"""A running Job's last progress line as the status says it: column, details, time left, Stalled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine_builder.progress_format import BuildProgress, DownloadProgress
from mmd_operator.judgement.progress import (
    BUILD_STALL_SECONDS,
    DOWNLOAD_STALL_SECONDS,
    assess,
    duration,
    size,
)

START = datetime(2026, 11, 28, 8, 0, tzinfo=UTC)
T0 = START.timestamp()
GB = 10**9


def download(**changes: object) -> DownloadProgress:
    line = DownloadProgress(
        at=T0 + 600,
        started_at=T0,
        last_progress_at=T0 + 600,
        bytes_done=57 * GB,
        bytes_total=140 * GB,
        files_done=12,
        files_total=40,
        bytes_per_second=85e6,
    )
    return line.model_copy(update=changes)


def test_a_download_says_its_share_of_the_total_its_rate_and_the_time_left() -> None:
    seen = assess(download(), START + timedelta(seconds=600))
    assert seen.progress.summary == "40% 57/140 GB"
    assert (seen.progress.percent, seen.progress.files_done, seen.progress.files_total) == (40, 12, 40)
    assert seen.progress.bytes_per_second == 85_000_000
    assert seen.progress.remaining_seconds == int(83 * GB / 85e6)  # 976 s
    assert seen.progress.elapsed_seconds == 600 and not seen.progress.stalled
    assert seen.clause == "40 % (57 GB of 140 GB, 12 of 40 files) at 85 MB/s, about 16m left"


def test_the_time_left_waits_until_it_can_be_told_honestly() -> None:
    early = download(at=T0 + 10, last_progress_at=T0 + 10, bytes_done=5 * GB)
    assert assess(early, START + timedelta(seconds=10)).progress.remaining_seconds is None  # 10 s in
    barely = download(bytes_done=GB // 1000)
    assert assess(barely, START + timedelta(seconds=600)).progress.remaining_seconds is None  # under 1 %
    unknown = download(bytes_total=None, files_total=None, bytes_per_second=None)
    seen = assess(unknown, START + timedelta(seconds=600))
    assert seen.progress.summary == "57 GB" and seen.progress.remaining_seconds is None
    assert seen.clause == "57 GB so far (total unknown)"


def test_a_download_without_a_byte_for_the_window_is_stalled_with_the_time_since_its_last() -> None:
    now = START + timedelta(seconds=600 + DOWNLOAD_STALL_SECONDS + 60)
    seen = assess(download(at=now.timestamp()), now)
    assert seen.progress.stalled
    assert seen.progress.summary == "Stalled 6m: 40% 57/140 GB"
    assert seen.clause.startswith("Stalled: no byte arrived for 6m (since 2026-11-28T08:10:00Z); 40 %")
    assert seen.progress.last_progress_time == "2026-11-28T08:10:00Z"


def test_a_build_says_its_step_and_how_long_it_has_run() -> None:
    line = BuildProgress(
        at=T0 + 900,
        started_at=T0,
        last_progress_at=T0 + 890,
        step=3,
        steps=5,
        step_name="build-llm",
        step_started_at=T0 + 180,
    )
    seen = assess(line, START + timedelta(seconds=900))
    assert seen.progress.summary == "step 3/5 build-llm 12m"
    assert (seen.progress.step, seen.progress.steps, seen.progress.step_name) == (3, 5, "build-llm")
    assert seen.progress.remaining_seconds is None and seen.progress.percent is None
    assert seen.clause == "step 3 of 5, build-llm, for 12m (15m in all)"
    quiet = START + timedelta(seconds=890 + BUILD_STALL_SECONDS)
    stalled = assess(line, quiet)
    assert stalled.progress.stalled and stalled.progress.summary == "Stalled 30m: step 3/5 build-llm 41m"
    assert stalled.clause.startswith("Stalled: the step wrote nothing for 30m")


def test_sizes_and_durations_read_as_people_write_them() -> None:
    assert [size(n) for n in (300, 1_500_000, 57 * GB, 2 * 10**12)] == ["300 B", "1.5 MB", "57 GB", "2 TB"]
    assert [duration(s) for s in (45, 720, 3900, -3)] == ["45s", "12m", "1h05m", "0s"]
