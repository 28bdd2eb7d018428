"""The progress lines a running build or download prints, and how the operator's side reads them back."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engine_builder.progress import BuildMeter, DownloadMeter, beating
from engine_builder.progress_format import (
    PREFIX,
    BuildProgress,
    DownloadProgress,
    last_progress,
    progress_line,
)
from mmd_testbed.build_tools.hub import HubServer
from tests.engine_builder.conftest import Toolbox
from tests.engine_builder.test_weights import MAIN, REPO, files, hub, run  # noqa: F401 (the fixture)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _lines(output: str) -> list[DownloadProgress | BuildProgress]:
    read = [last_progress(line) for line in output.splitlines() if line.startswith(PREFIX)]
    return [progress for progress in read if progress is not None]


def test_the_last_well_formed_line_is_read_and_anything_else_is_skipped() -> None:
    first = BuildProgress(
        at=3, started_at=1, last_progress_at=2, step=1, steps=3, step_name="a", step_started_at=1
    )
    second = first.model_copy(update={"step": 2, "step_name": "b"})
    tail = "\n".join(
        [
            progress_line(first),
            progress_line(second),
            # A step's own output is indented in the log, so it cannot pass for a progress line.
            "  " + progress_line(first.model_copy(update={"step": 3})),
            PREFIX + '{"kind": "build", "step": "not a number"}',
            "[2/3] b: converting",
        ]
    )
    assert last_progress(tail) == second
    assert last_progress("no progress here\n") is None
    assert last_progress("") is None


def test_a_download_counts_its_files_and_the_bytes_of_those_on_their_way(tmp_path: Path) -> None:
    clock = Clock()
    meter = DownloadMeter(tmp_path, bytes_total=1_000, files_total=3, metadata=".cache", clock=clock)
    assert meter.sample() == DownloadProgress(
        at=1_000.0, started_at=1_000.0, last_progress_at=1_000.0, bytes_done=0, bytes_total=1_000,
        files_done=0, files_total=3,
    )  # fmt: skip
    incoming = tmp_path / ".cache" / "huggingface" / "download"
    incoming.mkdir(parents=True)
    (incoming / "model.safetensors.metadata").write_text("the library's own")
    (incoming / "model.safetensors.incomplete").write_bytes(b"x" * 300)
    (tmp_path / "config.json").write_bytes(b"y" * 100)
    clock.now += 4
    moved = meter.sample()
    assert (moved.bytes_done, moved.files_done, moved.last_progress_at) == (400, 1, 1_004.0)
    assert moved.bytes_per_second == 100.0
    # Nothing more arrives: it still reports, but the time it last moved stays.
    clock.now += 20
    still = meter.sample()
    assert (still.bytes_done, still.last_progress_at, still.at) == (400, 1_004.0, 1_024.0)
    assert still.bytes_per_second == pytest.approx(400 / 24, abs=0.1)
    # The rate forgets what is older than half a minute.
    clock.now += 40
    assert meter.sample().bytes_per_second == 0.0


def test_a_build_moves_when_a_step_begins_or_writes_a_line() -> None:
    clock = Clock()
    meter = BuildMeter(3, clock=clock)
    meter.begin(1, "convert")
    clock.now += 5
    meter.moved()
    clock.now += 60
    seen = meter.sample()
    assert (seen.step, seen.steps, seen.step_name, seen.last_progress_at, seen.at) == (
        1,
        3,
        "convert",
        1_005,
        1_065,
    )
    meter.begin(2, "build-llm")
    later = meter.sample()
    assert (later.step, later.step_name, later.step_started_at, later.last_progress_at) == (
        2,
        "build-llm",
        1_065,
        1_065,
    )


def test_beating_says_where_it_is_at_once_on_every_beat_and_at_the_end() -> None:
    said: list[str] = []
    beats = threading.Event()
    count = iter(range(100))

    def sample() -> BuildProgress:
        number = next(count)
        if number >= 3:
            beats.set()
        return BuildProgress(
            at=number, started_at=0, last_progress_at=0, step=1, steps=1, step_name="s", step_started_at=0
        )

    with beating(sample, said.append, every=0.02) as say:
        say()
        assert beats.wait(5)
    at = [json.loads(line.removeprefix(PREFIX))["at"] for line in said]
    assert at == sorted(at) and at[0] == 0 and len(at) >= 5


def test_a_download_says_its_totals_before_the_first_byte_and_ends_complete(
    hub: HubServer,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    code, output, _ = run(hub, tmp_path, REPO, MAIN)
    assert code == 0, output
    seen = [p for p in _lines(output) if isinstance(p, DownloadProgress)]
    snapshot = files("main")
    total = sum(len(content) for content in snapshot.values())
    assert (seen[0].bytes_done, seen[0].bytes_total, seen[0].files_total) == (0, total, len(snapshot))
    assert (seen[-1].bytes_done, seen[-1].files_done) == (total, len(snapshot))


def test_a_build_says_each_step_of_its_plan_in_order(
    toolbox: Toolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_path = toolbox.plan("llava")
    names = [step["name"] for step in json.loads(plan_path.read_text())["steps"]]
    assert toolbox.build(plan_path) == 0
    seen = [p for p in _lines(capsys.readouterr().out) if isinstance(p, BuildProgress)]
    steps = [(p.step, p.step_name) for p in seen]
    assert sorted(set(steps)) == list(enumerate(names, 1))
    assert steps == sorted(steps) and all(p.steps == len(names) for p in seen)
