"""Fault injection for failure tests: a label on a pod makes kwok fail it, crash it or keep it unready."""

from __future__ import annotations

from typing import Any

import pytest

from mmd_testbed.localcluster.stages import (
    FAULT_EXIT_CODE_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)
from tests.support.kube import Kube, restricted

pytestmark = pytest.mark.cluster


def _container(gpus: int = 1) -> dict[str, Any]:
    return {
        "name": "main",
        "image": "registry.invalid/fake:1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }


def test_a_failing_job_pod_fails_the_job_with_its_termination_message(kube: Kube, namespace: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "build"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": {FAULT_LABEL: "fail"},
                    "annotations": {
                        FAULT_MESSAGE_ANNOTATION: "trtllm-build: out of memory",
                        FAULT_EXIT_CODE_ANNOTATION: "137",
                    },
                },
                "spec": restricted({"restartPolicy": "Never", "containers": [_container()]}),
            },
        },
    }
    kube.batch.create_namespaced_job(namespace, job)

    def failed() -> Any:
        conditions = kube.batch.read_namespaced_job("build", namespace).status.conditions or []
        return [c for c in conditions if c.type == "Failed" and c.status == "True"]

    condition = kube.wait_for("job build to fail", failed)[0]
    assert condition.reason == "BackoffLimitExceeded"
    pod = kube.core.list_namespaced_pod(namespace, label_selector="job-name=build").items[0]
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 137
    assert terminated.message == "trtllm-build: out of memory"


def _deployment(name: str, fault: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, FAULT_LABEL: fault}},
                "spec": restricted({"containers": [_container()]}),
            },
        },
    }


@pytest.mark.parametrize("fault", ["never-ready", "crashloop"])
def test_an_unready_pod_keeps_its_deployment_unavailable(kube: Kube, namespace: str, fault: str) -> None:
    kube.apps.create_namespaced_deployment(namespace, _deployment("server", fault))

    def running_pod() -> Any:
        pods = kube.core.list_namespaced_pod(namespace, label_selector="app=server").items
        return [p for p in pods if p.status.phase == "Running"]

    pod = kube.wait_for("the server pod to run", running_pod)[0]
    ready = next(c for c in pod.status.conditions if c.type == "Ready")
    assert ready.status == "False"
    status = pod.status.container_statuses[0]
    assert status.ready is False
    if fault == "crashloop":
        assert status.state.waiting.reason == "CrashLoopBackOff"
        assert status.restart_count > 0
        assert status.last_state.terminated.exit_code == 1
    else:
        assert status.state.running is not None

    deployment = kube.wait_for(
        "the deployment controller to count the unready replica",
        lambda: (lambda d: d if d.status.unavailable_replicas == 1 else None)(
            kube.apps.read_namespaced_deployment("server", namespace)
        ),
    )
    assert not deployment.status.ready_replicas
    available = next(c for c in deployment.status.conditions if c.type == "Available")
    assert available.status == "False"
