"""The operator's metrics as resources change: phases, per-resource series, Jobs, rollbacks, downloads."""

from __future__ import annotations

from kubernetes import client as k8s
from prometheus_client import REGISTRY

from mmd_operator.api.v1alpha1 import AutoscalingSpec, MultimodalDeploymentStatus, Phase
from mmd_operator.config import OperatorConfig
from mmd_operator.facts import AutoscalerCondition, AutoscalerFacts, Meta
from mmd_operator.knowledge import Runtime
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient
from mmd_operator.metrics import (
    ARTIFACT_METRICS,
    JobSample,
    PhaseTally,
    ResourceSample,
    ResourceSeries,
    resource_sample,
    rollback,
    stop_publishing,
)
from mmd_operator.reconcile import Reconciler


def _published() -> dict[str, float]:
    return {
        str(phase): REGISTRY.get_sample_value("mmd_resources", {"phase": str(phase)}) or 0.0
        for phase in Phase
    }


def test_the_counts_follow_each_resource_s_phase_and_its_deletion() -> None:
    tally = PhaseTally()
    assert set(_published().values()) == {0.0}
    tally.publish(("ml", "a"), Phase.DEPLOYING)
    tally.publish(("ml", "b"), Phase.DEPLOYING)
    tally.publish(("other", "a"), Phase.BUILDING)
    tally.publish(("ml", "a"), Phase.READY)
    tally.publish(("ml", "a"), Phase.READY)  # a reconcile that changed nothing
    tally.publish(("ml", "gone"), None)  # never seen: nothing to take away
    assert {k: v for k, v in _published().items() if v} == {"Deploying": 1, "Building": 1, "Ready": 1}
    tally.publish(("ml", "b"), None)
    tally.publish(("other", "a"), Phase.FAILED)
    assert {k: v for k, v in _published().items() if v} == {"Failed": 1, "Ready": 1}
    assert tally.known() == {("ml", "a"), ("other", "a")}


def _value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def _status(**fields: object) -> MultimodalDeploymentStatus:
    return MultimodalDeploymentStatus.model_validate(fields)


def _phases(namespace: str, name: str) -> dict[str, float]:
    found = {
        str(p): _value("mmd_resource_phase", namespace=namespace, name=name, phase=str(p)) for p in Phase
    }
    return {phase: value for phase, value in found.items() if value is not None}


def _pods(namespace: str, name: str) -> tuple[float | None, ...]:
    return tuple(
        _value("mmd_serving_pods", namespace=namespace, name=name, state=state)
        for state in ("wanted", "ready")
    )


def _bounds(namespace: str, name: str) -> tuple[float | None, ...]:
    return tuple(
        _value("mmd_autoscaler_replicas", namespace=namespace, name=name, bound=bound)
        for bound in ("min", "max", "desired")
    )


def _hpa(desired: int | None, *conditions: tuple[str, str, str]) -> AutoscalerFacts:
    return AutoscalerFacts(
        meta=Meta(name="llava"),
        desired_replicas=desired,
        conditions=tuple(AutoscalerCondition(kind, status, reason) for kind, status, reason in conditions),
    )


def test_a_resource_has_one_phase_series_that_moves_with_its_phase_and_goes_with_it() -> None:
    series = ResourceSeries()
    key = ("phases", "llava")
    series.publish(key, resource_sample(_status(phase="Building"), None, None, ("engine", "build-3f2a")))
    assert _phases(*key) == {"Building": 1.0}
    series.publish(
        key, resource_sample(_status(phase="Deploying", replicas=2, readyReplicas=0), None, None, None)
    )
    series.publish(
        key, resource_sample(_status(phase="Ready", replicas=2, readyReplicas=2), None, None, None)
    )
    assert _phases(*key) == {"Ready": 1.0}
    assert _pods(*key) == (2.0, 2.0)
    series.publish(key, None)  # deleted
    assert _phases(*key) == {}
    assert _pods(*key) == (None, None)
    assert series.known() == set()


def test_serving_pods_wanted_are_the_spec_s_and_ready_the_status_s() -> None:
    series = ResourceSeries()
    key = ("pods", "llava")
    series.publish(key, resource_sample(_status(phase="Building", replicas=3), None, None, None))
    assert _pods(*key) == (3.0, 0.0)  # wanted while the engine builds; none ready
    series.publish(
        key, resource_sample(_status(phase="Degraded", replicas=3, readyReplicas=1), None, None, None)
    )
    assert _pods(*key) == (3.0, 1.0)
    # A first spec refused: the status says nothing of pods, and no series says it either.
    series.publish(key, resource_sample(_status(phase="Failed"), None, None, None))
    assert _pods(*key) == (None, None)


def test_a_replica_across_pods_counts_its_pods_ready_only_while_its_group_is_whole() -> None:
    series = ResourceSeries()
    key = ("groups", "llava-tp16")
    two_groups = _status(phase="Degraded", replicas=2, readyReplicas=1, podsPerReplica=2)
    series.publish(key, resource_sample(two_groups, None, None, None))
    assert _pods(*key) == (4.0, 2.0)


def test_with_autoscaling_the_bounds_and_the_wanted_pods_are_the_autoscaler_s() -> None:
    series = ResourceSeries()
    key = ("scaled", "llava")
    autoscaling = AutoscalingSpec.model_validate(
        {"minReplicas": 1, "maxReplicas": 4, "metric": {"name": "PendingRequests", "target": 4}}
    )
    status = _status(phase="Ready", replicas=2, readyReplicas=2)
    series.publish(key, resource_sample(status, autoscaling, None, None))
    assert _bounds(*key) == (1.0, 4.0, 1.0)  # no autoscaler yet: it starts at its minimum
    assert _value("mmd_autoscaler_saturated", namespace="scaled", name="llava") == 0.0
    at_most = _hpa(
        4, ("ScalingActive", "True", "ValidMetricFound"), ("ScalingLimited", "True", "TooManyReplicas")
    )
    series.publish(key, resource_sample(status, autoscaling, at_most, None))
    assert _bounds(*key) == (1.0, 4.0, 4.0)
    assert _pods(*key) == (4.0, 2.0)
    assert _value("mmd_autoscaler_saturated", namespace="scaled", name="llava") == 1.0
    at_least = _hpa(1, ("ScalingLimited", "True", "TooFewReplicas"))
    series.publish(key, resource_sample(status, autoscaling, at_least, None))
    assert _value("mmd_autoscaler_saturated", namespace="scaled", name="llava") == 0.0
    series.publish(key, resource_sample(status, None, None, None))  # autoscaling taken out of the spec
    assert _bounds(*key) == (None, None, None)
    assert _value("mmd_autoscaler_saturated", namespace="scaled", name="llava") is None
    assert _pods(*key) == (2.0, 2.0)


def test_a_running_job_has_its_stalled_series_and_is_counted_once_however_many_resources_share_it() -> None:
    series = ResourceSeries()
    downloading = _status(phase="Downloading", weights={"job": "download-1"})
    stalled = _status(
        phase="Downloading",
        weights={
            "job": "download-1",
            "progress": {
                "summary": "Stalled 6m",
                "elapsedSeconds": 900,
                "lastProgressTime": "t",
                "stalled": True,
            },
        },
    )
    series.publish(("run", "a"), resource_sample(downloading, None, None, ("weights", "download-1")))
    series.publish(("run", "b"), resource_sample(stalled, None, None, ("weights", "download-1")))
    series.publish(("run", "c"), resource_sample(downloading, None, None, ("weights", "download-2")))
    series.publish(
        ("run", "d"), resource_sample(_status(phase="Building"), None, None, ("engine", "build-9"))
    )
    assert _value("mmd_artifacts_running", artifact="weights") == 2.0
    assert _value("mmd_artifacts_running", artifact="engine") == 1.0
    assert _value("mmd_artifact_stalled", namespace="run", name="a", artifact="weights") == 0.0
    assert _value("mmd_artifact_stalled", namespace="run", name="b", artifact="weights") == 1.0
    series.publish(("run", "c"), resource_sample(_status(phase="Deploying", replicas=1), None, None, None))
    assert _value("mmd_artifact_stalled", namespace="run", name="c", artifact="weights") is None
    series.publish(("run", "a"), None)
    assert _value("mmd_artifacts_running", artifact="weights") == 1.0  # b still runs download-1
    series.publish(("run", "b"), None)
    series.publish(("run", "d"), ResourceSample(phase=Phase.FAILED))
    assert _value("mmd_artifacts_running", artifact="weights") == 0.0
    assert _value("mmd_artifacts_running", artifact="engine") == 0.0


UNDONE = {"generation": 4, "failed": "6c5f7d8b9", "message": "revision 6c5f7d8b9 did not start"}
CANARY = {"revision": "d1e2f3", "generation": 5, "gate": "Prometheus", "verdict": "Failed"}


def test_one_undo_is_counted_once_however_often_a_reconcile_or_a_new_operator_sees_it() -> None:
    series = ResourceSeries()
    key = ("undo", "llava")
    rolling = _status(phase="Deploying", stableRevision={"podTemplateHash": "5d4c"})
    held = rolling.model_copy(update={"phase": Phase.DEGRADED, "rollback": _status(rollback=UNDONE).rollback})
    shown = [rolling, held, held, held]  # the reconcile that undid it, then three that hold it
    for previous, status in zip([None, *shown], shown, strict=False):
        undone = rollback(previous, status)
        if undone is not None:
            series.rolled_back(key, undone)
    assert _value("mmd_rollbacks_total", namespace="undo", name="llava", reason="CannotStart") == 1.0
    # A restarted operator (or a new leader) reads the status that shows it already.
    assert rollback(held, held) is None
    # The same revision tried again with the retry annotation, and undone again: a new undo.
    again = _status(rollback={**UNDONE, "retry": "2"})
    assert rollback(held, again) == "CannotStart"
    assert rollback(held, _status(rollback={**UNDONE, "generation": 6})) == "CannotStart"
    assert rollback(held, _status()) is None


def test_a_failed_canary_is_one_analysis_failed_rollback_and_a_canary_that_cannot_start_is_cannot_start() -> (
    None
):
    failed = _status(canary=CANARY, rollback={**UNDONE, "generation": 5, "failed": "d1e2f3"})
    analysing = _status(canary={**CANARY, "verdict": "Analysing"})
    assert rollback(analysing, failed) == "AnalysisFailed"
    assert rollback(failed, failed) is None
    # Its pod cannot start: undone by its pod-template-hash, not the canary's revision.
    crashed = _status(canary=CANARY, rollback={**UNDONE, "generation": 5, "failed": "7f8e"})
    assert rollback(analysing, crashed) == "CannotStart"
    assert rollback(analysing, _status(canary={**CANARY, "verdict": "Passed"})) is None


def test_the_reconciler_removes_the_series_of_a_resource_deleted_or_gone_from_its_cache() -> None:
    offline = KubeClient(k8s.ApiClient(k8s.Configuration()), field_manager="mmd-operator")
    reconciler = Reconciler(offline, cached.Cache(), OperatorConfig())
    try:
        for name in ("deleted", "missed", "kept"):
            reconciler.series.publish(("cache", name), ResourceSample(phase=Phase.READY, wanted=1, ready=1))
        reconciler.forget("cache", "deleted")
        reconciler.forget_all_but([("cache", "kept")])  # a deletion the watch missed
    finally:
        reconciler.events.close()
    assert [bool(_phases("cache", name)) for name in ("deleted", "missed", "kept")] == [False, False, True]
    assert _pods("cache", "missed") == (None, None)


def test_a_deleted_resource_s_rollbacks_go_with_it() -> None:
    series = ResourceSeries()
    key = ("gone", "llava")
    series.publish(key, ResourceSample(phase=Phase.DEGRADED, wanted=1, ready=1))
    series.rolled_back(key, "AnalysisFailed")
    assert _value("mmd_rollbacks_total", namespace="gone", name="llava", reason="AnalysisFailed") == 1.0
    series.publish(key, None)
    assert _value("mmd_rollbacks_total", namespace="gone", name="llava", reason="AnalysisFailed") is None


def test_a_process_that_stops_publishing_keeps_no_resource_s_series() -> None:
    series = ResourceSeries()
    key = ("leader", "llava")
    series.publish(
        key, ResourceSample(phase=Phase.BUILDING, wanted=1, ready=0, job=JobSample("engine", "build-1"))
    )
    series.rolled_back(key, "CannotStart")
    stop_publishing()
    assert _phases(*key) == {}
    assert _pods(*key) == (None, None)
    assert _value("mmd_rollbacks_total", namespace="leader", name="llava", reason="CannotStart") is None
    assert _value("mmd_artifact_stalled", namespace="leader", name="llava", artifact="engine") is None
    assert _value("mmd_artifacts_running", artifact="engine") == 0.0
    assert series.known() == set()
    # Should it lead again, it publishes every resource afresh.
    series.publish(key, ResourceSample(phase=Phase.BUILDING, wanted=1, ready=0))
    assert _phases(*key) == {"Building": 1.0}


def test_downloads_feed_their_own_outcomes_and_duration_and_every_outcome_exists_from_the_start() -> None:
    for name in ("mmd_builds_total", "mmd_downloads_total"):
        for outcome in ("succeeded", "failed"):
            assert _value(name, outcome=outcome) is not None
    builds = _value("mmd_builds_total", outcome="succeeded")
    before = {
        outcome: _value("mmd_downloads_total", outcome=outcome) or 0.0 for outcome in ("succeeded", "failed")
    }
    timed = _value("mmd_download_duration_seconds_count") or 0.0
    weights = ARTIFACT_METRICS[Runtime.TRTLLM_SERVE]
    assert weights is not None
    weights.finished(succeeded=True, seconds=42.0)
    weights.finished(succeeded=False)
    weights.looked_up(True)  # the weights index's lookups are not the engine cache's
    assert _value("mmd_downloads_total", outcome="succeeded") == before["succeeded"] + 1
    assert _value("mmd_downloads_total", outcome="failed") == before["failed"] + 1
    assert _value("mmd_download_duration_seconds_count") == timed + 1
    assert _value("mmd_builds_total", outcome="succeeded") == builds
