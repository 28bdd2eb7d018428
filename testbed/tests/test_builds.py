"""Two Go caches at a time, in their order, every line marked, every failure named after all have run;
Go's own caches removed after a run in which every build succeeded; a new build replaces its earlier ones.

The caches' own builds are stood in for by functions that record when they ran: what is under test here
is the scheduling, not `go build` (the cluster and pods tiers build the real caches).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from mmd_testbed.localcluster import builds
from mmd_testbed.localcluster.binaries import go_caches, put_in_place
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.processes import shared_lock


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


def _fills_gos_caches(layout: Layout, say: builds.Printer) -> None:
    """Stands in for a build: leaves a compiled package and a read-only module in Go's caches."""
    caches = go_caches(layout.cache_root)
    (caches / "build" / "0a").mkdir(parents=True, exist_ok=True)
    (caches / "build" / "0a" / "0a1b-d").write_bytes(b"\0" * 4096)
    module = caches / "mod" / "example.com" / "m@v1.0.0"
    module.mkdir(parents=True, exist_ok=True)
    (module / "go.mod").write_text("module example.com/m\n")
    (module / "go.mod").chmod(0o444)
    module.chmod(0o555)


def test_gos_caches_are_removed_once_every_build_succeeded(
    monkeypatch: pytest.MonkeyPatch, layout: Layout, tmp_path: Path
) -> None:
    # Another cache root's Go caches (the default's here) are not the layout's to remove.
    monkeypatch.setenv("MMD_CONTROLPLANE_CACHE", str(tmp_path / "default" / "controlplane"))
    elsewhere = go_caches() / "mod" / "example.com" / "kept@v1.0.0" / "go.mod"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_text("module example.com/kept\n")
    monkeypatch.setattr(builds, "CACHES", {"nodes": _fills_gos_caches})
    lines: list[str] = []

    builds.ensure_all(layout, lines.append, ["nodes"])

    caches = go_caches(layout.cache_root)
    assert [entry.name for entry in caches.iterdir()] == [".lock"]
    assert any("removed Go's build and module caches" in line for line in lines), lines
    assert elsewhere.is_file()


def test_gos_caches_in_use_by_another_build_or_after_a_failure_are_kept(
    monkeypatch: pytest.MonkeyPatch, layout: Layout
) -> None:
    caches = go_caches(layout.cache_root)
    monkeypatch.setattr(builds, "CACHES", {"nodes": _fills_gos_caches})
    lines: list[str] = []
    with shared_lock(caches / ".lock"):  # a `go` command of another build
        builds.ensure_all(layout, lines.append, ["nodes"])
    assert (caches / "build" / "0a" / "0a1b-d").is_file()
    assert any("in use by another build; kept" in line for line in lines), lines

    def fails(layout: Layout, say: builds.Printer) -> None:
        _fills_gos_caches(layout, say)
        raise RuntimeError("would not compile")

    monkeypatch.setattr(builds, "CACHES", {"nodes": fails})
    with pytest.raises(builds.BuildsFailedError):
        builds.ensure_all(layout, lines.append, ["nodes"])
    assert (caches / "mod" / "example.com" / "m@v1.0.0" / "go.mod").is_file()


def test_a_finished_build_replaces_the_earlier_builds_of_its_kind_only(tmp_path: Path) -> None:
    for name in (
        "k8s-v1.34.10_go1.26.8_4e5d32b5e9a7",  # the same binaries, an earlier recipe
        "k8s-v1.33.2_go1.26.8_0f0f0f0f0f0f",  # an earlier version
        f"k8s-v1.34.10_go1.26.8_9a9a9a9a9a9a.partial-{os.getpid()}",  # a running process's build
        "k8s-v1.34.10_go1.26.8_9a9a9a9a9a9a.partial-999999999",  # a dead one's
        "gitops-check-41ee43ecd1e8",  # another kind
    ):
        (tmp_path / name / "bin").mkdir(parents=True)
    scratch = tmp_path / "k8s-v1.34.10_go1.26.8_5c582814b9c4.partial-1"
    (scratch / "bin").mkdir(parents=True)
    (scratch / "manifest.json").write_text("{}")

    put_in_place(scratch, tmp_path / "k8s-v1.34.10_go1.26.8_5c582814b9c4")

    assert sorted(entry.name for entry in tmp_path.iterdir()) == [
        "gitops-check-41ee43ecd1e8",
        "k8s-v1.34.10_go1.26.8_5c582814b9c4",
        f"k8s-v1.34.10_go1.26.8_9a9a9a9a9a9a.partial-{os.getpid()}",
    ]
    assert (tmp_path / "k8s-v1.34.10_go1.26.8_5c582814b9c4" / "manifest.json").is_file()
