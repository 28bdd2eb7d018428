"""kwok plays the engine builder: a build Job's pod runs for a while, then succeeds with the summary line
the real builder writes, for the pod's own cacheKey. A fault label still overrides it."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from engine_builder import versions
from engine_builder.result_format import (
    BuildFailed,
    BuildSucceeded,
    parse_termination_message,
    termination_message,
)
from mmd_operator.vocabulary import labels
from mmd_operator.vocabulary.kinds import GPU_RESOURCE
from mmd_testbed.localcluster.stages import (
    BUILD_DURATION_ANNOTATION,
    DEFAULT_BUILD_DURATION_SECONDS,
    FAULT_EXIT_CODE_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)
from tests.support.kube import Kube, restricted

pytestmark = pytest.mark.cluster


def _container(name: str, gpus: int | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": "registry.invalid/engine-builder:test",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if gpus is not None:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    return container


def build_job(
    name: str,
    cache_key: str | None,
    *,
    containers: list[dict[str, Any]],
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    pod_labels = {**labels.common(labels.ENGINE_BUILD), **(extra_labels or {})}
    if cache_key is not None:
        pod_labels[labels.CACHE_KEY] = cache_key
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(pod_labels)},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations or {}},
                "spec": restricted({"restartPolicy": "Never", "containers": containers}),
            },
        },
    }


def job_condition(kube: Kube, namespace: str, name: str) -> Any:
    def finished() -> Any:
        conditions = kube.batch.read_namespaced_job(name, namespace).status.conditions or []
        done = [c for c in conditions if c.type in ("Complete", "Failed") and c.status == "True"]
        return done[0] if done else None

    return kube.wait_for(f"job {name} to finish", finished)


def job_pod(kube: Kube, namespace: str, name: str) -> Any:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={name}")
    assert len(pods.items) == 1
    return pods.items[0]


def running_pod(kube: Kube, namespace: str, name: str) -> Any:
    def running() -> Any:
        pods = kube.core.list_namespaced_pod(
            namespace, label_selector=f"batch.kubernetes.io/job-name={name}"
        ).items
        return next((p for p in pods if p.status.phase == "Running"), None)

    return kube.wait_for(f"the pod of job {name} to run", running, interval=0.1)


def test_a_build_pod_runs_then_reports_success_for_its_own_cache_key(kube: Kube, namespace: str) -> None:
    cache_key = "0123456789abcdef0123"
    kube.batch.create_namespaced_job(
        namespace, build_job("build", cache_key, containers=[_container("engine-builder", gpus=2)])
    )
    running = running_pod(kube, namespace, "build")
    ready = next(c for c in running.status.conditions if c.type == "Ready")
    assert ready.status == "True"

    assert job_condition(kube, namespace, "build").type == "Complete"
    pod = job_pod(kube, namespace, "build")
    assert pod.status.phase == "Succeeded"
    (status,) = pod.status.container_statuses
    terminated = status.state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    # The build took the default duration from the moment the pod ran (startTime is whole seconds).
    assert terminated.finished_at - pod.status.start_time >= timedelta(seconds=DEFAULT_BUILD_DURATION_SECONDS)

    result = parse_termination_message(terminated.message)
    assert isinstance(result, BuildSucceeded), result
    assert result.cache_key == cache_key
    assert result.cache_hit is False
    assert result.versions.tensorrt_llm == versions.TRTLLM_VERSION
    node = kube.core.read_node(pod.spec.node_name)
    # As nvidia-smi names it (the real builder's source); feature discovery's label has dashes for spaces.
    assert " " in result.gpu.name
    assert result.gpu.name.replace(" ", "-") == node.metadata.labels["nvidia.com/gpu.product"]
    compute = node.metadata.labels["nvidia.com/gpu.compute.major"]
    assert (
        result.gpu.compute_capability == f"{compute}.{node.metadata.labels['nvidia.com/gpu.compute.minor']}"
    )
    assert result.gpu.count == 2
    assert result.total_bytes == sum(result.sizes.values()) > 0
    assert result.seconds >= DEFAULT_BUILD_DURATION_SECONDS - 1
    # What the builder writes is exactly what the operator's format produces.
    assert terminated.message == termination_message(result)


def test_the_build_duration_annotation_sets_how_long_every_container_runs(kube: Kube, namespace: str) -> None:
    cache_key = "fedcba9876543210fedc"
    job = build_job(
        "build-slow",
        cache_key,
        containers=[_container("engine-builder", gpus=1), _container("sidecar", gpus=None)],
        annotations={BUILD_DURATION_ANNOTATION: "5s"},
    )
    kube.batch.create_namespaced_job(namespace, job)
    running_pod(kube, namespace, "build-slow")
    seen_running = time.monotonic()
    time.sleep(2.5)
    assert job_pod(kube, namespace, "build-slow").status.phase == "Running"

    assert job_condition(kube, namespace, "build-slow").type == "Complete"
    assert time.monotonic() - seen_running >= 4
    pod = job_pod(kube, namespace, "build-slow")
    assert pod.status.phase == "Succeeded"
    statuses = {status.name: status for status in pod.status.container_statuses}
    assert set(statuses) == {"engine-builder", "sidecar"}
    for name, gpus in (("engine-builder", 1), ("sidecar", 1)):
        terminated = statuses[name].state.terminated
        assert (terminated.exit_code, terminated.reason) == (0, "Completed")
        assert terminated.finished_at - pod.status.start_time >= timedelta(seconds=5)
        result = parse_termination_message(terminated.message)
        assert isinstance(result, BuildSucceeded), result
        assert (result.cache_key, result.gpu.count) == (cache_key, gpus)
        assert result.seconds >= 5


def test_only_pods_with_both_build_labels_play_the_builder(kube: Kube, namespace: str) -> None:
    # An engine-build pod without a cacheKey is an ordinary Job pod: kwok's pod-complete ends it.
    kube.batch.create_namespaced_job(
        namespace, build_job("not-a-build", None, containers=[_container("main", gpus=None)])
    )
    assert job_condition(kube, namespace, "not-a-build").type == "Complete"
    terminated = job_pod(kube, namespace, "not-a-build").status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0
    assert not terminated.message


def test_a_build_pod_with_a_fault_keeps_its_scripted_failure(kube: Kube, namespace: str) -> None:
    failure = BuildFailed(
        cache_key="0a1b2c3d4e5f6a7b8c9d",
        step="build-llm",
        exit_code=137,
        reason="build-llm killed (likely out of memory)",
    )
    job = build_job(
        "build-fails",
        failure.cache_key,
        containers=[_container("engine-builder", gpus=1)],
        extra_labels={FAULT_LABEL: "fail"},
        annotations={
            FAULT_MESSAGE_ANNOTATION: termination_message(failure),
            FAULT_EXIT_CODE_ANNOTATION: "137",
        },
    )
    kube.batch.create_namespaced_job(namespace, job)
    condition = job_condition(kube, namespace, "build-fails")
    assert (condition.type, condition.reason) == ("Failed", "BackoffLimitExceeded")
    pod = job_pod(kube, namespace, "build-fails")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 137
    assert parse_termination_message(terminated.message) == failure
