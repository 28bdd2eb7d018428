"""Two Go caches at a time, in their order, every line marked, every failure named after all have run.

The caches' own builds are stood in for by functions that record when they ran: what is under test here
is the scheduling, not `go build` (the cluster and pods tiers build the real caches).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mmd_testbed.localcluster import builds
from mmd_testbed.localcluster.layout import Layout


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.most_at_once = 0
        self.order: list[str] = []
        # The first two builds meet here: they run at once, or the wait fails the build.
        self.first_two = threading.Barrier(2, timeout=30)

    def cache(self, name: str, seconds: float, fails: bool = False) -> object:
        def build(layout: Layout, say: builds.Printer) -> None:
            with self.lock:
                self.order.append(name)
                first_two = len(self.order) <= 2
                self.running.add(name)
                self.most_at_once = max(self.most_at_once, len(self.running))
            if first_two:
                self.first_two.wait()
            say("building")
            time.sleep(seconds)
            with self.lock:
                self.running.discard(name)
            if fails:
                raise RuntimeError(f"{name} would not compile")

        return build


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(repo_root=tmp_path, cache_root=tmp_path / "cache")


def test_two_caches_build_at_once_in_their_order_with_marked_lines(
    monkeypatch: pytest.MonkeyPatch, layout: Layout
) -> None:
    recorder = _Recorder()
    caches = {name: recorder.cache(name, 0.2) for name in builds.CACHES}
    monkeypatch.setattr(builds, "CACHES", caches)
    lines: list[str] = []

    builds.ensure_all(layout, lines.append, ["GitOps checker", "nodes", "control plane"])

    assert recorder.order[:2] == ["control plane", "nodes"]
    assert recorder.order[2] == "GitOps checker"
    assert recorder.most_at_once == builds.LANES
    assert sorted(lines) == ["[GitOps checker] building", "[control plane] building", "[nodes] building"]


def test_every_failure_is_named_once_all_builds_have_run(
    monkeypatch: pytest.MonkeyPatch, layout: Layout
) -> None:
    recorder = _Recorder()
    caches = {name: recorder.cache(name, 0.05, fails=name in ("nodes", "metrics")) for name in builds.CACHES}
    monkeypatch.setattr(builds, "CACHES", caches)

    with pytest.raises(builds.BuildsFailedError) as failed:
        builds.ensure_all(layout, lambda line: None, list(caches))

    assert sorted(recorder.order) == sorted(caches)
    assert str(failed.value).splitlines() == [
        "nodes: nodes would not compile",
        "metrics: metrics would not compile",
    ]


def test_an_unknown_cache_is_refused_before_anything_builds(layout: Layout) -> None:
    with pytest.raises(ValueError, match="no such cache: kind"):
        builds.ensure_all(layout, print, ["control plane", "kind"])
