"""The pods' CPU and memory on the real API server: ResourceQuotas, and the kernel's OOM killer.

A namespace with a ResourceQuota on requests.cpu, requests.memory and limits.memory: its quota admission
refuses a pod that names no request or limit for a resource the quota counts (so every container the
operator creates must), and one that would take the namespace past the quota. A resource of each
runtime goes to Ready under a quota with room for it, every pod admitted and counted; under a quota too
small, the status names the quota, the pod it refuses (the Job's, which the Job reports only in an Event;
a serving pod, which the Deployment reports in its ReplicaFailure condition), the figures and the field,
and the resource goes on once the quota is raised.

A container the kernel killed at its memory limit (kwok writes the kubelet's OOMKilled, by a fault
annotation) is said as such, with its limit and the field to raise: a serving pod's and a build's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from engine_builder.result_format import BuildFailed, termination_message
from mmctl.preflight import Severity, preflight
from mmd_operator.api import quantities
from mmd_operator.kube import quotas as quota_directory
from mmd_operator.kube.client import KubeClient
from mmd_operator.kube.quotas import QuotaDirectory
from mmd_operator.plan.resource_plan import plan_resource
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.stages import (
    FAULT_EXIT_CODE_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
    FAULT_REASON_ANNOTATION,
)
from tests.support.kube import Kube, Resources, Tools, unprivileged_kubeconfig

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUOTA = "compute"


def example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    return document


def set_quota(kube: Kube, namespace: str, cpu: str, memory: str) -> None:
    """The namespace's quota on requests.cpu, requests.memory and limits.memory, created or replaced."""
    body = {
        "metadata": {"name": QUOTA},
        "spec": {"hard": {"requests.cpu": cpu, "requests.memory": memory, "limits.memory": memory}},
    }
    existing = kube.core.list_namespaced_resource_quota(namespace).items
    if existing:
        kube.core.patch_namespaced_resource_quota(QUOTA, namespace, body)
    else:
        kube.core.create_namespaced_resource_quota(namespace, body)


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == kind)


def events(kube: Kube, namespace: str, name: str) -> list[str]:
    """What the controllers said about object `name`."""
    found = kube.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [f"{event.reason}: {event.message}" for event in found]


@pytest.mark.parametrize("name", ["llava", "qwen2_5_vl"])
def test_under_a_quota_with_room_every_pod_is_admitted_and_counted(
    kube: Kube, resources: Resources, namespace: str, name: str
) -> None:
    set_quota(kube, namespace, cpu="64", memory="256Gi")
    document = example(name)
    resources.apply(document)
    ready = resources.wait_phase(document["metadata"]["name"], "Ready", timeout=120)
    pods = {entry["pod"]: entry for entry in ready["status"]["podResources"]}
    serving = pods["Serving"]
    assert serving["limits"]["memory"] == serving["requests"]["memory"]
    # Every container of every pod names what the quota counts: the quota admitted them all.
    made = kube.core.list_namespaced_pod(namespace).items
    assert made
    for pod in made:
        assert pod.spec.automount_service_account_token is False
        for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
            assert {"cpu", "memory"} <= set(container.resources.requests), container.name
            assert "memory" in container.resources.limits, container.name
    used = kube.wait_for(
        "the quota counting the serving pod",
        lambda: (
            (kube.core.read_namespaced_resource_quota(QUOTA, namespace).status.used or {}).get(
                "requests.memory"
            )
            not in (None, "0")
            and kube.core.read_namespaced_resource_quota(QUOTA, namespace).status.used
        ),
    )
    assert quantities.parse(used["requests.memory"]) >= quantities.parse(serving["requests"]["memory"])


def test_a_quota_too_small_for_the_build_pod_is_named_with_its_figures_until_it_is_raised(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    set_quota(kube, namespace, cpu="64", memory="16Gi")
    resources.apply(example("llava"))
    body = resources.wait_phase("llava", "Building")
    job = body["status"]["engine"]["job"]
    build = next(entry for entry in body["status"]["podResources"] if entry["pod"] == "Build")
    asked = build["requests"]["memory"]
    short = quantities.memory(quantities.parse(asked) - quantities.parse("16Gi"))

    def refused() -> dict[str, Any] | None:
        found = resources.get("llava")
        engine = condition(found, "EngineReady")
        return found if engine["reason"] == "QuotaExceeded" else None

    body = kube.wait_for("the build's quota named", refused, timeout=60)
    engine = condition(body, "EngineReady")
    assert engine["message"] == (
        f"ResourceQuota {QUOTA} refuses the build pod of Job {job}: it asks limits.memory {asked}, with 0 of "
        f"16Gi used: {short} short; requests.memory {asked}, with 0 of 16Gi used: {short} short"
    )
    ready = condition(body, "Ready")
    assert ready["message"].endswith(
        f"raise the quota (kubectl describe resourcequota {QUOTA}) or lower "
        "spec.build.pod.resources.limits.memory and spec.build.pod.resources.requests.memory; its controller "
        "creates the pod once it fits."
    )
    # What the Job itself says: nothing in its status, an Event with the API server's words.
    status = kube.batch.read_namespaced_job(job, body["metadata"]["namespace"]).status
    assert not status.active and not status.conditions
    said = kube.wait_for("the Job's FailedCreate event", lambda: events(kube, namespace, job))
    assert any("exceeded quota: compute" in line and line.startswith("FailedCreate") for line in said), said
    # Room for the build pod: the Job creates it on its next try, and the engine is built.
    set_quota(kube, namespace, cpu="64", memory="256Gi")
    resources.wait_phase("llava", "Ready", timeout=180)


def test_a_quota_too_small_for_a_serving_pod_degrades_the_resource_naming_quota_pod_and_figures(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    # Room for the download pod (2Gi), none for the serving pod.
    set_quota(kube, namespace, cpu="64", memory="10Gi")
    resources.apply(example("qwen2_5_vl"))
    body = resources.wait_phase("qwen2-5-vl", "Degraded", timeout=120)
    serving = next(entry for entry in body["status"]["podResources"] if entry["pod"] == "Serving")
    asked = serving["requests"]["memory"]
    short = quantities.memory(quantities.parse(asked) - quantities.parse("10Gi"))
    expected = (
        f"ResourceQuota {QUOTA} refuses the serving pod of Deployment qwen2-5-vl: it asks limits.memory "
        f"{asked}, with 0 of 10Gi used: {short} short; requests.memory {asked}, with 0 of 10Gi used: {short} "
        "short (the ReplicaSet controller: "
    )
    # The quota controller counts the finished download pod's 2Gi as used for a moment after it ends, and
    # the status says so while it does: wait for the figures without it.
    shown: list[str] = []

    def settled() -> bool:
        available = resources.condition("qwen2-5-vl", "Available")
        shown[:] = [f"{available.get('reason')}: {available.get('message')}"]
        return available.get("reason") == "QuotaExceeded" and available["message"].startswith(expected)

    kube.wait_for("the figures without the download pod", settled, timeout=60, explain=lambda: shown[0])
    assert "exceeded quota: compute" in shown[0]
    set_quota(kube, namespace, cpu="64", memory="64Gi")
    resources.wait_phase("qwen2-5-vl", "Ready", timeout=180)


def _killed_at_the_limit(fault: str, message: str) -> dict[str, Any]:
    """Pod settings that make kwok end the pod's containers as the kubelet does after an OOM kill."""
    return {
        "labels": {FAULT_LABEL: fault},
        "annotations": {
            FAULT_REASON_ANNOTATION: "OOMKilled",
            FAULT_EXIT_CODE_ANNOTATION: "137",
            FAULT_MESSAGE_ANNOTATION: message,
        },
    }


def test_a_serving_container_killed_at_its_memory_limit_is_oomkilled_with_the_limit(
    resources: Resources,
) -> None:
    document = example("llava")
    document["spec"].setdefault("serving", {})["pod"] = _killed_at_the_limit("crashloop", "")
    resources.apply(document)
    degraded = resources.wait_phase("llava", "Degraded", timeout=90)
    limit = next(e for e in degraded["status"]["podResources"] if e["pod"] == "Serving")["limits"]["memory"]
    available = condition(degraded, "Available")
    assert available["reason"] == "OOMKilled"
    killed = (
        f"the kernel killed container tritonserver, over its memory limit of {limit} (OOMKilled, 3 restarts)"
    )
    assert available["message"].startswith("pod llava-") and available["message"].endswith(f": {killed}")
    assert "raise spec.serving.pod.resources.limits.memory" in condition(degraded, "Ready")["message"]
    resources.apply(example("llava"))
    resources.wait_phase("llava", "Ready", timeout=90)


def test_a_build_killed_at_its_memory_limit_fails_saying_oomkilled_with_the_limit(
    resources: Resources,
) -> None:
    document = example("llava")
    reported = termination_message(BuildFailed(step="convert-llm", exit_code=137, reason="Killed"))
    document["spec"]["build"] = {"backoffLimit": 0, "pod": _killed_at_the_limit("fail", reported)}
    resources.apply(document)
    failed = resources.wait_phase("llava", "Failed", timeout=90)
    limit = next(e for e in failed["status"]["podResources"] if e["pod"] == "Build")["limits"]["memory"]
    assert condition(failed, "EngineReady")["message"] == (
        f"the builder was OOMKilled: the kernel killed container engine-builder, over its memory limit of "
        f"{limit} (exit code 137); in step convert-llm; raise spec.build.pod.resources.limits.memory "
        "(status.podResources says what the derived figure rests on)"
    )


def test_the_quota_directory_lists_once_per_namespace_and_asks_a_refusal_again_only_much_later(
    local_cluster: LocalCluster, kube: Kube, tools: Tools, namespace: str, tmp_path: Path
) -> None:
    set_quota(kube, namespace, cpu="8", memory="16Gi")
    now = [0.0]
    client = KubeClient.from_kubeconfig(str(local_cluster.kubeconfig), field_manager="quota-directory-test")

    def gets() -> float:
        return REGISTRY.get_sample_value("mmd_api_requests_total", {"method": "GET"}) or 0.0

    def listed(directory: QuotaDirectory) -> tuple[Any, float]:
        before = gets()
        return directory.quotas(namespace), gets() - before

    directory = QuotaDirectory(client, clock=lambda: now[0])
    quotas, requests = listed(directory)
    assert requests == 1 and quotas is not None
    (found,) = quotas
    assert found.name == QUOTA and dict(found.hard)["requests.memory"] == "16Gi"
    for _ in range(50):  # a burst of reconciles in the namespace: one listing serves them all
        assert listed(directory) == (quotas, 0)
    now[0] += quota_directory.MAX_AGE
    assert listed(directory)[1] == 1

    # A ServiceAccount that may not list quotas: None, once asked, then not again for FORBIDDEN_RETRY.
    kubeconfig = unprivileged_kubeconfig(kube, tools, local_cluster, namespace, "no-quotas", tmp_path)
    refused_client = KubeClient.from_kubeconfig(str(kubeconfig), field_manager="t")
    refused = QuotaDirectory(refused_client, clock=lambda: now[0])
    assert listed(refused) == (None, 1)
    for _ in range(20):
        assert listed(refused) == (None, 0)
    now[0] += quota_directory.FORBIDDEN_RETRY
    assert listed(refused) == (None, 1)


def test_mmctl_validate_cluster_warns_of_a_quota_without_room_for_the_pods(
    local_cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    set_quota(kube, namespace, cpu="64", memory="64Gi")
    client = KubeClient.from_kubeconfig(str(local_cluster.kubeconfig), field_manager="mmctl")
    document = example("llava")
    document["spec"]["serving"] = {"replicas": 3}
    resource, plan = plan_resource(document)
    findings = [f for f in preflight(resource, plan, namespace, client) if "resources" in f.field]
    # The build pod (45Gi) fits; three serving pods of 28Gi do not.
    assert [(f.severity, f.field) for f in findings] == [(Severity.WARNING, "spec.serving.pod.resources")]
    assert findings[0].message.startswith(
        f"ResourceQuota {QUOTA} refuses the 3 serving pods of MultimodalDeployment llava: it asks "
        "limits.memory 84Gi, with 0 of 64Gi used: 20Gi short; requests.memory 84Gi, with 0 of 64Gi used: "
        "20Gi short: raise the quota"
    )
