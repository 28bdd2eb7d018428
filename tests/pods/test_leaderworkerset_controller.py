"""The real LeaderWorkerSet controller (`cluster up --lws`) on the real nodes: one group of two pods.

LWS's own controller manager, built from the pinned `sigs.k8s.io/lws` module and started on the session's
cluster (`LocalCluster.start_lws`, once), creates the leader pod and its workers' StatefulSet, injects the
group's environment through its pod webhook, gives the group a headless Service the workers are found by,
and recreates the whole group when one of its pods goes. The pods are busybox under Pod Security
`restricted`.

Two things of LWS v0.9.0 this test was written around: the group is recreated only when the controller
sees the worker pod terminating (a deletionTimestamp), so a pod template with
`terminationGracePeriodSeconds: 0` (deleted at once) never triggers `RecreateGroupOnPodRestart`; the
pods here exit on SIGTERM within a 5 s grace period. And busybox's `nslookup` asks for the name as given,
without the pod's DNS search path, which the short `LWS_LEADER_ADDRESS` form relies on; busybox's `ping`
resolves through the C library with that path and prints the address before it fails to open an ICMP
socket (which a `restricted` pod may not), so it shows what a workload's resolver gets.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_testbed.localcluster import addons, leaderworkerset
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from mmd_testbed.localcluster.nodes import NODE_KIND_LABEL, REAL
from mmd_testbed.localcluster.state import REAL_NODE_PREFIX
from tests.support.kube import Kube, Tools, restricted
from tests.support.pods import wait_until

pytestmark = pytest.mark.pods
NAME = "group"
LEADER, WORKER = f"{NAME}-0", f"{NAME}-0-1"


@pytest.fixture(scope="module")
def lws_controller(real_cluster: LocalCluster) -> None:
    """The LWS controller on the session's cluster (idempotent: started once per cluster)."""
    started = time.monotonic()
    real_cluster.start_lws()
    print(f"\nLWS controller ready in {time.monotonic() - started:.1f} s (build included if it was missing)")


@pytest.fixture(scope="module")
def busybox() -> str:
    return addons.image_names(ensure_node_binaries(Layout.discover(), say=print))["busybox"]


def _group(namespace: str, image: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        # Exits on SIGTERM, so a deleted pod is gone within moments of its grace period starting.
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
    }
    pod = restricted({"terminationGracePeriodSeconds": 5, "containers": [container]})
    return {
        "apiVersion": f"{leaderworkerset.GROUP}/{leaderworkerset.VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": {"spec": pod},
            },
        },
    }


def _running(kube: Kube, namespace: str, name: str) -> Any:
    """The pod `name` when it is Running, Ready and not being deleted, else None."""
    pods = kube.core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}").items
    for pod in pods:
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        if pod.status.phase == "Running" and ready and pod.metadata.deletion_timestamp is None:
            return pod
    return None


def _environment(tools: Tools, namespace: str, pod: str) -> dict[str, str]:
    """The LWS_ variables the container's process sees."""
    listing = tools.run("kubectl", "exec", "-n", namespace, pod, "--", "env").stdout
    pairs = (line.split("=", 1) for line in listing.splitlines() if line.startswith("LWS_"))
    return {key: value for key, value in pairs}


def _resolved(tools: Tools, namespace: str, pod: str, name: str) -> str:
    """The address `pod`'s resolver gives `name` (with the pod's search path), empty when none."""
    result = tools.run(
        "kubectl", "exec", "-n", namespace, pod, "--", "ping", "-c", "1", "-W", "1", name, check=False
    )
    found = re.search(rf"^PING {re.escape(name)} \(([0-9.]+)\)", result.stdout, re.MULTILINE)
    return found.group(1) if found else ""


def _available(custom: Any, namespace: str) -> bool:
    group = custom.get_namespaced_custom_object(
        leaderworkerset.GROUP, leaderworkerset.VERSION, namespace, leaderworkerset.PLURAL, NAME
    )
    conditions = (group.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


@pytest.mark.usefixtures("lws_controller")
def test_a_group_of_two_starts_finds_its_worker_and_is_recreated_whole(
    api_client: k8s.ApiClient,
    kube: Kube,
    tools: Tools,
    namespace: str,
    busybox: str,
) -> None:
    custom = k8s.CustomObjectsApi(api_client)
    started = time.monotonic()
    custom.create_namespaced_custom_object(
        leaderworkerset.GROUP,
        leaderworkerset.VERSION,
        namespace,
        leaderworkerset.PLURAL,
        _group(namespace, busybox),
    )
    leader = wait_until(f"leader pod {LEADER} Running", lambda: _running(kube, namespace, LEADER), 120)
    worker = wait_until(f"worker pod {WORKER} Running", lambda: _running(kube, namespace, WORKER), 120)
    print(
        f"\ngroup Running (leader {LEADER}, worker {WORKER}) {time.monotonic() - started:.1f} s after create"
    )
    wait_until("the LeaderWorkerSet Available", lambda: _available(custom, namespace), 60)
    print(f"LeaderWorkerSet Available {time.monotonic() - started:.1f} s after create")

    for pod in (leader, worker):
        assert pod.spec.node_name.startswith(REAL_NODE_PREFIX), pod.spec.node_name
        assert kube.core.read_node(pod.spec.node_name).metadata.labels[NODE_KIND_LABEL] == REAL
        assert pod.metadata.labels[leaderworkerset.LWS_NAME_LABEL] == NAME
    leader_address = f"{LEADER}.{NAME}.{namespace}"
    assert _environment(tools, namespace, LEADER) == {
        "LWS_LEADER_ADDRESS": leader_address,
        "LWS_GROUP_SIZE": "2",
        "LWS_WORKER_INDEX": "0",
    }
    assert _environment(tools, namespace, WORKER) == {
        "LWS_LEADER_ADDRESS": leader_address,
        "LWS_GROUP_SIZE": "2",
        "LWS_WORKER_INDEX": "1",
    }

    # Each by its stable name, through the group's headless Service and the cluster's CoreDNS.
    fqdn = f"{WORKER}.{NAME}.{namespace}"
    wait_until(
        f"{fqdn} to resolve from the leader",
        lambda: _resolved(tools, namespace, LEADER, fqdn) == worker.status.pod_ip,
        30,
        interval=1,
    )
    assert _resolved(tools, namespace, WORKER, leader_address) == leader.status.pod_ip
    print(f"from the leader {fqdn} -> {worker.status.pod_ip}")
    print(f"from the worker {leader_address} -> {leader.status.pod_ip}")

    # RecreateGroupOnPodRestart: losing the worker takes the leader with it, and the group comes back whole.
    deleted = time.monotonic()
    kube.core.delete_namespaced_pod(WORKER, namespace)

    def recreated() -> tuple[Any, Any] | None:
        new_leader, new_worker = _running(kube, namespace, LEADER), _running(kube, namespace, WORKER)
        if new_leader is None or new_worker is None:
            return None
        fresh = (
            new_leader.metadata.uid != leader.metadata.uid and new_worker.metadata.uid != worker.metadata.uid
        )
        return (new_leader, new_worker) if fresh else None

    new_leader, new_worker = wait_until("the whole group recreated", recreated, 120)
    print(
        f"worker deleted -> group recreated and Running in {time.monotonic() - deleted:.1f} s "
        f"(leader UID {leader.metadata.uid[:8]} -> {new_leader.metadata.uid[:8]}, "
        f"worker UID {worker.metadata.uid[:8]} -> {new_worker.metadata.uid[:8]})"
    )
