"""What the kubelet writes when a pod's Secret or key is missing, as data.

The operator reads no Secret: it learns of a missing token Secret from the kubelet, which holds the Job's
pod and says why. These are the kubelet's words and shapes as its sources (v1.34.10, the version the test
bed's nodes run) write them:

- a variable from a `secretKeyRef`: pkg/kubelet/kubelet_pods.go, `makeEnvironmentVariables`, returns
  the secret manager's NotFound (`secret "<name>" not found`, pkg/kubelet/util/manager) or `couldn't find
  key <key> in Secret <namespace>/<name>`; the container then waits in CreateContainerConfigError with
  that message (pkg/kubelet/kuberuntime, `ErrCreateContainerConfig`), the pod stays Pending;
- a secret volume: pkg/volume/secret/secret.go returns the same NotFound or `references non-existent
  secret key: <key>`; the volume manager posts it as a Warning Event with reason FailedMount,
  `MountVolume.SetUp failed for volume "<volume>" : <error>` (pkg/volume/util/operationexecutor), while
  the pod stays Pending with its containers waiting in ContainerCreating.

Unit tests judge these; cluster tests on kwok nodes write them as the kubelet would (kwok checks no
Secret); `tests/pods` sees a real kubelet write them. Imports nothing.
"""

from __future__ import annotations

from typing import Any


def secret_not_found(name: str) -> str:
    """The secret manager's NotFound for Secret `name`."""
    return f'secret "{name}" not found'


def env_key_not_found(key: str, namespace: str, name: str) -> str:
    """A `secretKeyRef` whose Secret has no such key."""
    return f"couldn't find key {key} in Secret {namespace}/{name}"


def volume_key_not_found(key: str) -> str:
    """A secret volume's item whose key the Secret does not have."""
    return f"references non-existent secret key: {key}"


def failed_mount(volume: str, error: str) -> str:
    """The FailedMount Event's message for `volume`."""
    return f'MountVolume.SetUp failed for volume "{volume}" : {error}'


def _waiting(containers: list[str], reason: str, message: str, image: str) -> list[dict[str, Any]]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return [
        {
            "name": name,
            "image": image,
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"waiting": state},
        }
        for name in containers
    ]


def held_pod_status(
    containers: list[str],
    *,
    reason: str,
    message: str = "",
    image: str = "builder:1",
    node_ip: str | None = "10.0.0.2",
) -> dict[str, Any]:
    """The status the kubelet writes of a scheduled pod whose containers it does not start.

    Without `node_ip`, no addresses: for a kwok node, which assigns its own once it runs the pod (a
    second IPv4 address would be invalid).
    """
    status: dict[str, Any] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
            {"type": "PodScheduled", "status": "True"},
        ],
        # The operator's pods request CPU and memory and limit only memory; the class is immutable.
        "qosClass": "Burstable",
        "containerStatuses": _waiting(containers, reason, message, image),
    }
    if node_ip is not None:
        status |= {
            "hostIP": node_ip,
            "hostIPs": [{"ip": node_ip}],
            "podIP": "10.244.1.7",
            "podIPs": [{"ip": "10.244.1.7"}],
        }
    return status


def config_error_status(
    containers: list[str], message: str, *, node_ip: str | None = "10.0.0.2"
) -> dict[str, Any]:
    """A pod whose container's environment names a missing Secret or key."""
    return held_pod_status(containers, reason="CreateContainerConfigError", message=message, node_ip=node_ip)


def creating_status(containers: list[str], *, node_ip: str | None = "10.0.0.2") -> dict[str, Any]:
    """A pod whose volumes the kubelet has not mounted (yet)."""
    status = held_pod_status(containers, reason="ContainerCreating", node_ip=node_ip)
    # Before the pod's sandbox runs it has no address; the volumes are mounted before.
    for key in ("podIP", "podIPs"):
        status.pop(key, None)
    status["conditions"][0]["status"] = "False"
    return status


def pod(name: str, namespace: str, status: dict[str, Any], *, node: str = "gpu-node-1") -> dict[str, Any]:
    """A scheduled pod as the API server returns it, with the status the kubelet wrote."""
    containers = [{"name": c["name"], "image": c["image"]} for c in status.get("containerStatuses") or []]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": containers},
        "status": status,
    }


def failed_mount_event(
    pod: dict[str, Any], message: str, *, node: str = "node-1", at: str = "2026-01-01T00:00:04Z"
) -> dict[str, Any]:
    """The kubelet's Warning Event about `pod` (a live pod, as the API server returns it), last at `at`."""
    metadata = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{metadata['name']}.{abs(hash((message, at))):x}",
            "namespace": metadata["namespace"],
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
        },
        "type": "Warning",
        "reason": "FailedMount",
        "message": message,
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
        "count": 3,
        "firstTimestamp": at,
        "lastTimestamp": at,
    }
