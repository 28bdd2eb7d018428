"""Smoke tests of the local control plane: real scheduling, controllers, GC, apply, helm, volumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from mmd_operator.vocabulary.kinds import GPU_RESOURCE
from mmd_testbed.localcluster.binaries import Binaries
from mmd_testbed.localcluster.components import UNSCHEDULABLE_RETRY_SECONDS
from tests.support.kube import Kube, Tools, restricted

pytestmark = pytest.mark.cluster


def _pod_template(
    labels: dict[str, str], gpus: int = 0, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    resources = {"limits": {GPU_RESOURCE: str(gpus)}} if gpus else {}
    return {
        "metadata": {"labels": labels, "annotations": annotations or {}},
        "spec": restricted(
            {"containers": [{"name": "main", "image": "registry.invalid/fake:1", "resources": resources}]}
        ),
    }


def _deployment(
    name: str, gpus: int = 0, replicas: int = 1, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": _pod_template({**labels, **(extra_labels or {})}, gpus),
        },
    }


def _is_available(deployment: Any) -> bool:
    conditions = deployment.status.conditions or []
    return any(c.type == "Available" and c.status == "True" for c in conditions)


def test_kubectl_reports_the_pinned_server_version(tools: Tools, binaries: Binaries) -> None:
    versions = json.loads(tools.run("kubectl", "version", "-o", "json").stdout)
    assert versions["serverVersion"]["gitVersion"] == binaries.versions.kubernetes
    assert versions["clientVersion"]["gitVersion"] == binaries.versions.kubernetes
    assert versions["serverVersion"]["minor"] == str(binaries.versions.kubernetes_minor)


def test_four_ready_gpu_nodes_with_eight_gpus_each(kube: Kube, tools: Tools) -> None:
    nodes = kube.core.list_node().items
    assert len(nodes) == 4
    for node in nodes:
        assert node.status.allocatable[GPU_RESOURCE] == "8"
        assert node.status.capacity[GPU_RESOURCE] == "8"
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert node.metadata.labels["nvidia.com/gpu.count"] == "8"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert not [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
    # The same, as a person would see it.
    listing = tools.run("kubectl", "get", "nodes", "-o", "wide").stdout
    assert listing.count(" Ready ") == 4


def test_deployment_requesting_two_gpus_becomes_available_on_a_gpu_node(kube: Kube, namespace: str) -> None:
    kube.apps.create_namespaced_deployment(namespace, _deployment("gpu-app", gpus=2))
    kube.wait_for(
        "deployment gpu-app Available",
        lambda: _is_available(kube.apps.read_namespaced_deployment("gpu-app", namespace)),
    )
    pods = kube.core.list_namespaced_pod(namespace, label_selector="app=gpu-app").items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.status.phase == "Running"
    node = kube.core.read_node(pod.spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert pod.spec.containers[0].resources.requests[GPU_RESOURCE] == "2"


def test_job_completes(kube: Kube, namespace: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {
            "backoffLimit": 0,
            "template": {**_pod_template({"app": "once"}), "spec": {
                **_pod_template({})["spec"], "restartPolicy": "Never"}},
        },
    }  # fmt: skip
    kube.batch.create_namespaced_job(namespace, job)
    done = kube.wait_for(
        "job once to complete",
        lambda: (lambda j: j if j.status.succeeded == 1 else None)(
            kube.batch.read_namespaced_job("once", namespace)
        ),
    )
    assert any(c.type == "Complete" and c.status == "True" for c in done.status.conditions)
    pods = kube.core.list_namespaced_pod(namespace, label_selector="job-name=once").items
    assert [pod.status.phase for pod in pods] == ["Succeeded"]
    assert pods[0].status.container_statuses[0].state.terminated.exit_code == 0


def test_deleting_an_owner_garbage_collects_its_children(kube: Kube, namespace: str) -> None:
    kube.apps.create_namespaced_deployment(namespace, _deployment("owner", replicas=2))
    kube.wait_for(
        "deployment owner Available",
        lambda: _is_available(kube.apps.read_namespaced_deployment("owner", namespace)),
    )
    assert len(kube.apps.list_namespaced_replica_set(namespace).items) == 1
    assert len(kube.core.list_namespaced_pod(namespace).items) == 2

    # Background propagation: the garbage collector in kube-controller-manager deletes the
    # ReplicaSet, whose pods kwok then lets go once they are marked for deletion.
    kube.apps.delete_namespaced_deployment("owner", namespace, propagation_policy="Background")
    kube.wait_for(
        "replica sets and pods of the deleted deployment to be collected",
        lambda: (
            not kube.apps.list_namespaced_replica_set(namespace).items
            and not kube.core.list_namespaced_pod(namespace).items
        ),
        timeout=90,
    )


def test_server_side_apply_and_server_dry_run(
    tools: Tools, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"k": "v1"}}
        )
    )
    tools.run(
        "kubectl", "apply", "--server-side", "--field-manager=smoke", "-n", namespace, "-f", str(manifest)
    )
    applied = kube.core.read_namespaced_config_map("applied", namespace)
    assert applied.data == {"k": "v1"}
    assert [m.manager for m in applied.metadata.managed_fields if m.operation == "Apply"] == ["smoke"]

    dry = tmp_path / "dry.yaml"
    dry.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}, "data": {"k": "v"}}
        )
    )
    out = tools.run("kubectl", "apply", "--dry-run=server", "-n", namespace, "-f", str(dry)).stdout
    assert "server dry run" in out
    with pytest.raises(ApiException) as missing:
        kube.core.read_namespaced_config_map("dry", namespace)
    assert missing.value.status == 404

    # The server, not the client, rejects an invalid object in a dry run.
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_Valid_Name"}})
    )
    rejected = tools.run(
        "kubectl", "apply", "--dry-run=server", "-n", namespace, "-f", str(invalid), check=False
    )
    assert rejected.returncode != 0
    assert "Invalid value" in rejected.stderr


def _write_tiny_chart(directory: Path) -> Path:
    chart = directory / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": "tiny", "version": "0.1.0", "kubeVersion": ">=1.34.0-0"})
    )
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\n"
        "data:\n  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n"
    )
    (chart / "templates" / "deployment.yaml").write_text(yaml.safe_dump(_deployment("tiny-app", gpus=1)))
    return chart


def test_helm_install_and_uninstall(
    tools: Tools, kube: Kube, namespace: str, tmp_path: Path, binaries: Binaries
) -> None:
    chart = _write_tiny_chart(tmp_path)
    tools.run("helm", "install", "tiny", str(chart), "-n", namespace, "--wait", "--timeout", "90s")
    config = kube.core.read_namespaced_config_map("tiny-config", namespace)
    # helm saw the real server version (the chart's kubeVersion constraint needs it too).
    assert config.data["kubeVersion"] == binaries.versions.kubernetes
    assert _is_available(kube.apps.read_namespaced_deployment("tiny-app", namespace))
    releases = json.loads(tools.run("helm", "list", "-n", namespace, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("tiny", "deployed")]

    tools.run("helm", "uninstall", "tiny", "-n", namespace, "--wait", "--timeout", "90s")
    assert "tiny-config" not in [
        cm.metadata.name for cm in kube.core.list_namespaced_config_map(namespace).items
    ]
    assert not kube.apps.list_namespaced_deployment(namespace).items
    assert json.loads(tools.run("helm", "list", "-n", namespace, "-o", "json").stdout) == []


def test_more_gpus_than_any_node_has_stays_pending_with_the_schedulers_reason(
    kube: Kube, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "greedy"},
        **{"spec": _pod_template({}, gpus=9)["spec"]},
    }
    kube.core.create_namespaced_pod(namespace, pod)

    def unschedulable() -> Any:
        status = kube.core.read_namespaced_pod("greedy", namespace).status
        return [
            c for c in status.conditions or [] if c.type == "PodScheduled" and c.reason == "Unschedulable"
        ]

    condition = kube.wait_for("the scheduler to give up on pod greedy", unschedulable)[0]
    assert condition.status == "False"
    assert f"Insufficient {GPU_RESOURCE}" in condition.message
    assert kube.core.read_namespaced_pod("greedy", namespace).status.phase == "Pending"
    events = kube.wait_for(
        "a FailedScheduling event",
        lambda: kube.core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items,
    )
    assert f"Insufficient {GPU_RESOURCE}" in events[0].message


def _scheduling_attempts(kube: Kube, namespace: str) -> int:
    """How often the scheduler failed to place a pod of `namespace`, from its FailedScheduling events.

    An attempt like the one before is counted in the event's series; a new event starts when the pod (whose
    version the event names) has changed in between, as the first attempt changes its PodScheduled condition.
    """
    events = kube.core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items
    return sum(event.series.count if event.series else 1 for event in events)


def test_a_pod_set_aside_as_unschedulable_is_tried_again_when_no_event_wakes_it(
    kube: Kube, namespace: str
) -> None:
    """The scheduler may miss the event that makes a pod schedulable: the queue's handler of a PV Add can
    retry a build pod before the volume-binding plugin's own cache has the PV, which sets the pod aside with
    "bound to non-existent pv(s)" and nothing left to wake it. The cluster's scheduler tries such a pod
    again within UNSCHEDULABLE_RETRY_SECONDS plus its 30 s check (upstream: after 5 minutes, past every wait
    of the tests). Here nothing ever wakes the pod: no node will match its selector."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nowhere"},
        "spec": {**_pod_template({})["spec"], "nodeSelector": {"localcluster.mmd.dev/no-such-node": "true"}},
    }
    kube.core.create_namespaced_pod(namespace, pod)
    kube.wait_for("the first attempt", lambda: _scheduling_attempts(kube, namespace) >= 1)
    kube.wait_for(
        "the scheduler to try pod nowhere again",
        lambda: _scheduling_attempts(kube, namespace) >= 2,
        timeout=UNSCHEDULABLE_RETRY_SECONDS + 30 + 20,
        interval=1.0,
    )
    assert kube.core.read_namespaced_pod("nowhere", namespace).spec.node_name is None


def test_a_claim_of_the_local_storage_class_binds_and_its_volume_goes_with_it(
    kube: Kube, namespace: str
) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "engines"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}},
    }
    kube.core.create_namespaced_persistent_volume_claim(namespace, claim)
    bound = kube.wait_for(
        "claim engines Bound",
        lambda: (lambda c: c if c.status.phase == "Bound" else None)(
            kube.core.read_namespaced_persistent_volume_claim("engines", namespace)
        ),
    )
    assert bound.spec.storage_class_name == "local"  # the default class was filled in by admission
    volume = kube.core.read_persistent_volume(bound.spec.volume_name)
    assert volume.status.phase == "Bound"
    assert volume.spec.capacity["storage"] == "5Gi"
    assert volume.spec.claim_ref.uid == bound.metadata.uid

    kube.core.delete_namespaced_persistent_volume_claim("engines", namespace)

    def volume_gone() -> bool:
        try:
            kube.core.read_persistent_volume(bound.spec.volume_name)
        except ApiException as error:
            return error.status == 404
        return False

    kube.wait_for("the released volume to be deleted", volume_gone)
