"""Build results reach the operator through the build pod's termination message, and the engine index
records successes so a later resource with the same cacheKey needs no Job.

The build Job here is a real Job run by the real Job controller; kwok plays the kubelet and ends the pod
with the termination message the engine builder would write (`termination_message`). The pods are read
and judged the way the operator reads them (`kube.object_facts.pod`, `judgement.engine.pod_result`), and the
index is written by the operator's own `record_build`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from engine_builder.result_format import BuildFailed, BuildSucceeded, termination_message
from mmd_operator.judgement.triton import pod_result
from mmd_operator.kube import object_facts
from mmd_operator.kube.client import KubeClient
from mmd_operator.kube.engine_index import EngineIndex, record_build
from mmd_operator.vocabulary import names
from mmd_testbed.localcluster.stages import (
    FAULT_EXIT_CODE_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)
from tests.support.builds import summary
from tests.support.kube import Kube, restricted

CLAIM = "mmd-engine-cache"
INDEX = names.engine_index(CLAIM)


@pytest.fixture
def client(api_client: k8s.ApiClient) -> Iterator[KubeClient]:
    # A client of its own: KubeClient sets the user agent of the ApiClient it is given, and the session's
    # is shared with every other test of this worker (whose requests must not pass for the operator's).
    with k8s.ApiClient(api_client.configuration) as own:
        yield KubeClient(own, field_manager="mmd-operator-test", agent="mmd-operator-test/1")


def job_build_result(
    client: KubeClient, *, namespace: str, job_name: str
) -> BuildSucceeded | BuildFailed | None:
    """What the newest finished pod of the Job reported, judged as the operator judges it."""
    pods = [
        object_facts.pod(item)
        for item in client.list(
            "v1", "Pod", namespace, label_selector=f"{object_facts.JOB_NAME_LABEL}={job_name}"
        )
    ]
    for pod in sorted(pods, key=lambda p: p.meta.created.isoformat() if p.meta.created else "", reverse=True):
        result = pod_result(pod)
        if result is not None:
            return result
    return None


def read_engine_index(client: KubeClient, *, namespace: str) -> EngineIndex:
    stored = client.get("v1", "ConfigMap", namespace, INDEX)
    return EngineIndex.from_configmap_data(stored.get("data") if stored else None)


def record(client: KubeClient, namespace: str, summary: BuildSucceeded) -> None:
    record_build(client, namespace=namespace, claim=CLAIM, claim_uid=None, summary=summary)


pytestmark = pytest.mark.cluster


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
                "spec": restricted(
                    {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "engine-builder",
                                "image": "registry.invalid/engine-builder:test",
                                "args": [
                                    "build",
                                    "--plan",
                                    "/plan/build_plan.json",
                                    "--cache-dir",
                                    "/engines",
                                ],
                                "terminationMessagePolicy": "FallbackToLogsOnError",
                            }
                        ],
                    }
                ),
            },
        },
    }


def finished(kube: Kube, namespace: str, name: str) -> Any:
    def done() -> Any:
        status = kube.batch.read_namespaced_job(name, namespace).status
        return status if (status.succeeded or status.failed) else None

    return kube.wait_for(f"job {name} to finish", done)


def test_a_successful_build_is_recorded_and_found_again(
    kube: Kube, client: KubeClient, namespace: str
) -> None:
    first, second = summary("a" * 20), summary("b" * 20)
    assert read_engine_index(client, namespace=namespace).get(first.cache_key) is None
    for job_name, built in (("build-first", first), ("build-second", second)):
        kube.batch.create_namespaced_job(
            namespace, build_job(job_name, outcome="succeed", message=termination_message(built))
        )
        assert finished(kube, namespace, job_name).succeeded == 1
        result = job_build_result(client, namespace=namespace, job_name=job_name)
        assert result == built
        assert isinstance(result, BuildSucceeded)
        record(client, namespace, result)
    index = read_engine_index(client, namespace=namespace)
    assert index.get(first.cache_key) == first
    assert index.get(second.cache_key) == second
    stored = kube.core.read_namespaced_config_map(INDEX, namespace)
    assert sorted(stored.data) == [first.cache_key, second.cache_key]
    assert stored.metadata.labels["app.kubernetes.io/managed-by"] == "mmd-operator"


def test_recording_a_cache_hit_again_keeps_one_entry(kube: Kube, client: KubeClient, namespace: str) -> None:
    built = summary("c" * 20)
    record(client, namespace, built)
    record(client, namespace, built.model_copy(update={"cache_hit": True}))
    stored = kube.core.read_namespaced_config_map(INDEX, namespace)
    assert list(stored.data) == [built.cache_key]
    assert read_engine_index(client, namespace=namespace).get(built.cache_key) == built


def test_a_failed_build_reports_its_step_exit_code_and_last_error(
    kube: Kube, client: KubeClient, namespace: str
) -> None:
    failure = BuildFailed(
        cache_key="d" * 20, step="build-llm", exit_code=137, reason="build-llm killed (likely out of memory)"
    )
    kube.batch.create_namespaced_job(
        namespace,
        build_job("build-fails", outcome="fail", message=termination_message(failure), exit_code=137),
    )
    assert finished(kube, namespace, "build-fails").failed == 1
    assert job_build_result(client, namespace=namespace, job_name="build-fails") == failure
    assert read_engine_index(client, namespace=namespace).get(failure.cache_key) is None


def test_a_crash_without_our_message_still_says_something_true(
    kube: Kube, client: KubeClient, namespace: str
) -> None:
    log_tail = "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory"
    kube.batch.create_namespaced_job(namespace, build_job("build-crash", outcome="fail", message=log_tail))
    finished(kube, namespace, "build-crash")
    result = job_build_result(client, namespace=namespace, job_name="build-crash")
    assert isinstance(result, BuildFailed)
    assert result.reason == "RuntimeError: CUDA error: out of memory"


def test_no_result_while_the_build_runs(kube: Kube, client: KubeClient, namespace: str) -> None:
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
    assert job_build_result(client, namespace=namespace, job_name="build-running") is None
