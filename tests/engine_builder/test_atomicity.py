"""Atomic and idempotent: a killed build leaves nothing that looks complete, a rerun cleans up and finishes,
a complete entry is never built twice, and one builder per cacheKey works at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_builder.__main__ import main
from engine_builder.plan_runner import inspect_entry
from tests.engine_builder.conftest import Toolbox, rendered_plan

KEY = rendered_plan("blip2")["cache_key"]


def builder(toolbox: Toolbox, plan: Path) -> subprocess.Popen[str]:
    """The builder as its own process group, as in a container: killing the group kills its tools too."""
    return subprocess.Popen(
        [sys.executable, "-m", "engine_builder", *toolbox.args(plan)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def progress_lines(process: subprocess.Popen[str]) -> list[str]:
    """All the builder's own lines (tool output is indented), until it exits."""
    assert process.stdout is not None
    return [line for line in process.stdout if not line.startswith("  ")]


def read_until(process: subprocess.Popen[str], count: int) -> None:
    """Return once the builder printed `count + 1` lines of its own."""
    assert process.stdout is not None
    seen = 0
    for line in process.stdout:
        if line.startswith("  "):
            continue
        if seen == count:
            return
        seen += 1


def assert_only_a_complete_entry(toolbox: Toolbox) -> None:
    assert sorted(p.name for p in toolbox.cache.iterdir()) == sorted([KEY, f".lock-{KEY}"])
    manifest, problems = inspect_entry(toolbox.cache / KEY, KEY, hashes=True)
    assert manifest is not None and problems == []


def test_sigkill_at_random_points_never_leaves_an_entry_that_looks_complete(toolbox: Toolbox) -> None:
    plan = toolbox.plan("blip2")
    with builder(toolbox, plan) as whole:
        lines = progress_lines(whole)
    assert whole.returncode == 0
    # Kill points: just after any of the builder's own lines (step starts and ends, removing
    # intermediates, checking, hashing, the rename), plus up to 50 ms; seeded so a failure can be rerun.
    rng = random.Random(5)
    outcomes = []
    for _ in range(7):
        shutil.rmtree(toolbox.cache)
        after, delay = rng.randrange(len(lines) - 1), rng.uniform(0, 0.05)
        with builder(toolbox, plan) as process:
            read_until(process, after)
            time.sleep(delay)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

        entry = toolbox.cache / KEY
        if entry.exists():
            manifest, problems = inspect_entry(entry, KEY, hashes=True)
            assert manifest is not None and problems == [], f"killed after line {after} + {delay:.3f}s"
        outcomes.append((lines[after].split(":")[0].strip(), entry.exists()))
        # The next builder of the key removes what the killed one left and finishes.
        assert toolbox.build(plan) == 0, f"rerun after a kill after line {after} + {delay:.3f}s"
        assert_only_a_complete_entry(toolbox)
    assert any(not complete for _, complete in outcomes), outcomes


def test_a_complete_entry_is_a_cache_hit_that_runs_nothing(
    toolbox: Toolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = toolbox.plan("blip2")
    assert toolbox.build(plan) == 0
    manifest = (toolbox.cache / KEY / "manifest.json").read_bytes()
    calls = len(toolbox.calls())
    capsys.readouterr()

    assert toolbox.build(plan) == 0
    assert "is complete: nothing to build" in capsys.readouterr().out
    assert len(toolbox.calls()) == calls
    assert (toolbox.cache / KEY / "manifest.json").read_bytes() == manifest
    result = toolbox.result()
    assert result["result"] == "succeeded" and result["cache_hit"] is True
    sizes: dict[str, int] = {}
    for path, record in toolbox.manifest(KEY)["files"].items():
        sizes[path.split("/")[0]] = sizes.get(path.split("/")[0], 0) + record["size"]
    assert result["sizes"] == sizes and result["total_bytes"] == sum(sizes.values()) > 0


def test_leftovers_of_dead_builders_and_an_incomplete_entry_are_removed(
    toolbox: Toolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    (toolbox.cache / f".work-{KEY}" / "checkpoint").mkdir(parents=True)
    (toolbox.cache / f".work-{KEY}" / "checkpoint" / "rank0.safetensors").write_bytes(b"partial")
    (toolbox.cache / f".trash-{KEY}.1-2").mkdir()
    (toolbox.cache / KEY / "llm").mkdir(parents=True)
    (toolbox.cache / KEY / "llm" / "config.json").write_text("{}")
    (toolbox.cache / "other-key").mkdir()  # another key's entry is none of this builder's business

    assert toolbox.build(toolbox.plan("blip2")) == 0

    out = capsys.readouterr().out
    assert (
        f"cache entry {toolbox.cache / KEY} is incomplete ({toolbox.cache / KEY} has no manifest.json)" in out
    )
    assert f"removing .work-{KEY}, left by a build of this cacheKey that did not finish" in out
    assert sorted(p.name for p in toolbox.cache.iterdir()) == sorted([KEY, f".lock-{KEY}", "other-key"])
    shutil.rmtree(toolbox.cache / "other-key")
    assert_only_a_complete_entry(toolbox)


def test_an_entry_with_a_missing_file_is_rebuilt(
    toolbox: Toolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = toolbox.plan("blip2")
    assert toolbox.build(plan) == 0
    (toolbox.cache / KEY / "llm" / "rank0.engine").unlink()
    capsys.readouterr()

    assert toolbox.build(plan) == 0
    assert "is incomplete (llm/rank0.engine is missing); building it again" in capsys.readouterr().out
    assert toolbox.result()["cache_hit"] is False
    assert_only_a_complete_entry(toolbox)


def test_verify_reads_every_file_against_the_manifest(
    toolbox: Toolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    assert toolbox.build(toolbox.plan("blip2")) == 0
    verify = ["verify", "--cache-dir", str(toolbox.cache), "--cache-key", KEY]
    assert main(verify) == 0
    engine = toolbox.cache / KEY / "encoder" / "model.engine"
    engine.write_bytes(engine.read_bytes().upper())  # same size, other bytes
    capsys.readouterr()
    assert main(verify) == 1
    assert (
        capsys.readouterr().err == f"{toolbox.cache / KEY}: encoder/model.engine does not match its sha256\n"
    )
    assert main(["verify", "--cache-dir", str(toolbox.cache), "--cache-key", "absent"]) == 1


def test_sigterm_stops_the_running_tool_and_reports_the_step(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOUBLE_SLEEP", "60")
    with builder(toolbox, toolbox.plan("blip2")) as process:
        read_until(process, 1)  # "[1/5] fetch-model: ..."
        time.sleep(0.2)  # the tool has started and sleeps
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 1
    assert time.monotonic() - started < 10
    assert toolbox.result()["reason"] == (
        "step fetch-model (1/6): stopped by SIGTERM (the Job was deleted or its deadline passed)"
    )
    assert [p.name for p in toolbox.cache.iterdir()] == [f".lock-{KEY}"]


def test_a_second_builder_of_the_same_key_waits_and_then_finds_the_entry(toolbox: Toolbox) -> None:
    plan = toolbox.plan("blip2")
    toolbox.cache.mkdir()
    with (toolbox.cache / f".lock-{KEY}").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with builder(toolbox, plan) as process:
            assert process.stdout is not None
            assert "waiting for it to finish" in process.stdout.readline()
            time.sleep(0.3)
            assert toolbox.calls() == [] and process.poll() is None
            fcntl.flock(lock, fcntl.LOCK_UN)
            assert process.wait(timeout=60) == 0
    assert_only_a_complete_entry(toolbox)
