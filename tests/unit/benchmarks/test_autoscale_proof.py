"""The autoscaling proof's bookkeeping without a cluster: the load generator's bounds, and the timeline's
milestones, table and plot from recorded samples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.autoscale_proof import LoadGenerator, LoadResult, PodLife, ProofSettings, Sample, Timeline
from mmd_operator.scaling_metrics import ScalingMetric

METRIC = "mmd_triton_pending_requests"


def test_the_load_generator_refuses_any_address_outside_the_local_cluster() -> None:
    for url in ("grpc://8.8.8.8:8001", "grpc://10.201.96.5:8001", "grpc://127.0.0.1:8001"):
        with pytest.raises(ValueError, match=re.escape("not in the local cluster's network 10.200.0.0/16")):
            LoadGenerator(url, "m", [], clients=1, max_seconds=1, max_requests=1, allowed="10.200.0.0/16")
    LoadGenerator("grpc://10.200.96.5:8001", "m", [], clients=1, max_seconds=1, max_requests=1,
                  allowed="10.200.0.0/16")  # fmt: skip


def test_targets_are_compared_in_the_custom_metrics_unit() -> None:
    assert ProofSettings(metric=ScalingMetric.QUEUE_TIME_PER_REQUEST, target=500).threshold() == 0.5
    assert ProofSettings(metric=ScalingMetric.PENDING_REQUESTS, target=2).threshold() == 2.0


def _timeline() -> Timeline:
    start = 1000.0
    # One pod saturated, the HPA wants 2 at t=12, the new pod Ready at t=30; load stops at t=60; the HPA
    # wants 1 again at t=80 and the pod is gone at t=86.
    values = {0: 0.0, 5: 3.0, 12: 5.0, 30: 4.0, 40: 2.0, 61: 0.0, 80: 0.0, 86: 0.0}
    desired = {0: 1, 5: 1, 12: 2, 30: 2, 40: 2, 61: 2, 80: 1, 86: 1}
    ready = {0: 1, 5: 1, 12: 1, 30: 2, 40: 2, 61: 2, 80: 2, 86: 1}
    samples = [
        Sample(start + t, {METRIC: values[t]}, desired[t], desired[t], ready[t], ready[t] if t != 80 else 2)
        for t in sorted(values)
    ]
    pods = [
        PodLife("llava-a", start - 100, start - 90, start - 89),
        PodLife("llava-b", start + 13, start + 25, start + 30, start + 86),
    ]
    load = LoadResult(clients=6, sent=100, answered=100, started=start, stopped=start + 60)
    events = [(start + 12.5, "HorizontalPodAutoscaler", "SuccessfulRescale", "New size: 2")]
    return Timeline(METRIC, 2.0, load, samples, pods, events, {"llava-a"})


def test_the_milestones_follow_the_load_the_metric_the_decision_and_the_pods() -> None:
    milestones = _timeline().milestones()
    order = [what.split(":")[0] for _, what in milestones]
    assert order == [
        "load starts (6 clients)",
        f"{METRIC} above target",
        "HPA wants 2 pods",
        "event HorizontalPodAutoscaler SuccessfulRescale",
        "pod llava-b created",
        "pod llava-b started (startup probe passed)",
        "pod llava-b Ready, takes traffic",
        "load stops (100 requests, 100 answered, 0 failed, 1.7/s)",
        f"{METRIC} at or below target",
        "HPA wants 1 pod",
        "pod llava-b removed",
    ]
    assert [round(t) for t, _ in milestones] == [0, 5, 12, 12, 13, 25, 30, 60, 61, 80, 86]
    assert _timeline().peak_pods() == 2


def test_the_table_and_the_plot_are_written(tmp_path: Path) -> None:
    timeline = _timeline()
    table = timeline.table().splitlines()
    assert table[:2] == ["| t (s) | what |", "|---:|---|"] and len(table) == 2 + len(timeline.milestones())
    plot = timeline.plot(tmp_path / "timeline.png")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
