"""Build results reach the operator through the build pod's termination message, and the engine index
records successes so a later resource with the same cacheKey needs no Job.

The build Job here is a real Job run by the real Job controller; kwok plays the kubelet and ends the pod
with the termination message the engine builder would write (`termination_message`)."""

from __future__ import annotations

from typing import Any

import pytest

from engine_builder.result_format import BuildFailed, BuildSucceeded, Gpu, Versions, termination_message
from mmd_operator.cli.localcluster.stages import (
    FAULT_EXIT_CODE_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)
from mmd_operator.kube.engine_index import (
    ENGINE_INDEX_CONFIGMAP,
    job_build_result,
    read_engine_index,
    record_build,
)

from .conftest import Kube

pytestmark = pytest.mark.cluster


def summary(cache_key: str) -> BuildSucceeded:
    return BuildSucceeded(
        cache_key=cache_key,
        cache_hit=False,
        versions=Versions(tensorrt_llm="0.19.0", tensorrt="10.10.0", cuda="12.9"),
        gpu=Gpu(name="NVIDIA A100-SXM4-80GB", compute_capability="8.0", count=2),
        total_bytes=14_000_000_000,
        sizes={"llm": 13_500_000_000, "encoder": 500_000_000},
        seconds=1234.5,
    )


def build_job(name: str, *, outcome: str, message: str, exit_code: int = 0) -> dict[str, Any]:
    annotations = {FAULT_MESSAGE_ANNOTATION: message}
    if outcome == "fail":
        annotations[FAULT_EXIT_CODE_ANNOTATION] = str(exit_code)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {FAULT_LABEL: outcome}, "annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "engine-builder",
                            "image": "registry.invalid/engine-builder:test",
                            "args": ["build", "--plan", "/plan/build_plan.json", "--cache-dir", "/engines"],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                        }
                    ],
                },
            },
        },
    }


def finished(kube: Kube, namespace: str, name: str) -> Any:
    def done() -> Any:
        status = kube.batch.read_namespaced_job(name, namespace).status
        return status if (status.succeeded or status.failed) else None

    return kube.wait_for(f"job {name} to finish", done)


def test_a_successful_build_is_recorded_and_found_again(kube: Kube, namespace: str) -> None:
    first, second = summary("a" * 20), summary("b" * 20)
    assert read_engine_index(kube.core, namespace=namespace).get(first.cache_key) is None
    for job_name, built in (("build-first", first), ("build-second", second)):
        kube.batch.create_namespaced_job(
            namespace, build_job(job_name, outcome="succeed", message=termination_message(built))
        )
        assert finished(kube, namespace, job_name).succeeded == 1
        result = job_build_result(kube.core, namespace=namespace, job_name=job_name)
        assert result == built
        assert isinstance(result, BuildSucceeded)
        record_build(kube.core, namespace=namespace, summary=result)
    index = read_engine_index(kube.core, namespace=namespace)
    assert index.get(first.cache_key) == first
    assert index.get(second.cache_key) == second
    stored = kube.core.read_namespaced_config_map(ENGINE_INDEX_CONFIGMAP, namespace)
    assert sorted(stored.data) == [first.cache_key, second.cache_key]
    assert stored.metadata.labels["app.kubernetes.io/managed-by"] == "mmd-operator"


def test_recording_a_cache_hit_again_keeps_one_entry(kube: Kube, namespace: str) -> None:
    built = summary("c" * 20)
    record_build(kube.core, namespace=namespace, summary=built)
    record_build(kube.core, namespace=namespace, summary=built.model_copy(update={"cache_hit": True}))
    stored = kube.core.read_namespaced_config_map(ENGINE_INDEX_CONFIGMAP, namespace)
    assert list(stored.data) == [built.cache_key]
    assert read_engine_index(kube.core, namespace=namespace).get(built.cache_key) == built


def test_a_failed_build_reports_its_step_exit_code_and_last_error(kube: Kube, namespace: str) -> None:
    failure = BuildFailed(
        cache_key="d" * 20, step="build-llm", exit_code=137, reason="build-llm killed (likely out of memory)"
    )
    kube.batch.create_namespaced_job(
        namespace,
        build_job("build-fails", outcome="fail", message=termination_message(failure), exit_code=137),
    )
    assert finished(kube, namespace, "build-fails").failed == 1
    assert job_build_result(kube.core, namespace=namespace, job_name="build-fails") == failure
    assert read_engine_index(kube.core, namespace=namespace).get(failure.cache_key) is None


def test_a_crash_without_our_message_still_says_something_true(kube: Kube, namespace: str) -> None:
    log_tail = "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory"
    kube.batch.create_namespaced_job(namespace, build_job("build-crash", outcome="fail", message=log_tail))
    finished(kube, namespace, "build-crash")
    result = job_build_result(kube.core, namespace=namespace, job_name="build-crash")
    assert isinstance(result, BuildFailed)
    assert result.reason == "RuntimeError: CUDA error: out of memory"


def test_no_result_while_the_build_runs(kube: Kube, namespace: str) -> None:
    job = build_job("build-running", outcome="never-ready", message="")
    kube.batch.create_namespaced_job(namespace, job)
    kube.wait_for(
        "the build pod to run",
        lambda: [
            p
            for p in kube.core.list_namespaced_pod(
                namespace, label_selector="batch.kubernetes.io/job-name"
            ).items
            if p.status.phase == "Running"
        ],
    )
    assert job_build_result(kube.core, namespace=namespace, job_name="build-running") is None
