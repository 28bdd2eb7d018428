"""Nodes that have fallen silent (their kubelet stopped renewing its Lease) and the serving pods on them.

A node that dies says nothing. Kubernetes' node controller notices the silence only after its
`--node-monitor-grace-period` (40 to 50 s by default) and then marks the node's pods not ready; until
then the Service sends new connections to pods that cannot answer. The kubelet renews its Lease in
`kube-node-lease` every 10 s, so the operator can tell sooner and mark its own serving pods on a silent
node not ready, exactly as the node controller would; a kubelet that is alive after all writes its
pods' real readiness back within seconds.

Silence is measured on the operator's own clock, from when it saw a Lease's `renewTime` change, so the
nodes' clocks do not matter. Two guards keep a problem on the operator's side (or the API server's) from
marking pods: some other node must have been heard within the same time, and at most half of the nodes
may be silent at once. Pure: imports the facts and the label vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mmd_operator.facts import PodFacts, PodPhase
from mmd_operator.vocabulary import labels

# The reason the operator writes on the Ready condition of a pod it marks.
REASON = "NodeLeaseExpired"


@dataclass(frozen=True)
class Heard:
    """The last renewal of one node's Lease the operator saw, and when it first saw it."""

    renew_time: str
    # Monotonic seconds of the operator's clock.
    at: float


def heard(before: Mapping[str, Heard], renewals: Mapping[str, str], now: float) -> dict[str, Heard]:
    """The record after a listing of the node Leases (`renewals`: node name to `spec.renewTime`).

    A node seen for the first time counts as heard now; a node whose Lease is gone is forgotten.
    """
    record: dict[str, Heard] = {}
    for node, renew_time in renewals.items():
        last = before.get(node)
        record[node] = last if last is not None and last.renew_time == renew_time else Heard(renew_time, now)
    return record


def silent_nodes(record: Mapping[str, Heard], now: float, after_seconds: float) -> frozenset[str]:
    """Nodes not heard for `after_seconds`, when the rest of the cluster can be heard.

    Nothing is silent unless another node was heard within `after_seconds` and at most half of the
    nodes are silent: a cluster-wide silence is the API server's trouble or the operator's, not the
    nodes'.
    """
    silent = frozenset(node for node, last in record.items() if now - last.at >= after_seconds)
    if not silent or len(silent) * 2 > len(record) or len(silent) == len(record):
        return frozenset()
    return silent


def pods_to_mark(pods: Iterable[tuple[str, PodFacts]], silent: frozenset[str]) -> list[tuple[str, PodFacts]]:
    """The operator's serving pods (with their namespaces) that still count as ready on a silent node.

    A pod its Service selects, only while its resource keeps one on a node that is heard: a resource's
    last ready one is left to the node controller, since taking it out gains nothing if the node is dead
    and stops all serving if the silence was only the Lease's. A group's worker is in no Service (its
    leader is): marked, it changes no serving and lets the status say where the group's rank went, also
    while it is stopping (its group recreated), since its deletion waits for the silent node.
    """
    serving = [
        (namespace, pod)
        for namespace, pod in pods
        if pod.ready
        and pod.phase is PodPhase.RUNNING
        and (not pod.meta.deleting or not _in_service(pod))
        and pod.meta.label(labels.COMPONENT) == labels.SERVING
        and pod.meta.label(labels.MANAGED_BY) == labels.OPERATOR
    ]
    heard_elsewhere = {
        (namespace, pod.meta.label(labels.INSTANCE))
        for namespace, pod in serving
        if pod.node not in silent and _in_service(pod)
    }
    return [
        (namespace, pod)
        for namespace, pod in serving
        if pod.node in silent
        and (not _in_service(pod) or (namespace, pod.meta.label(labels.INSTANCE)) in heard_elsewhere)
    ]


def _in_service(pod: PodFacts) -> bool:
    """Whether the Service selects `pod`: any serving pod but a group's worker (worker 0 leads)."""
    return pod.meta.label(labels.WORKER_INDEX) in (None, "0")


def not_ready_patch(node: str, silent_seconds: float, when: str) -> dict[str, object]:
    """The pod status patch that takes a pod out of its Service: Ready False, as the node controller has it.

    The reason and message say why, with the silence in seconds.
    """
    return {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": REASON,
                    "message": (
                        f"node {node} has not renewed its Lease for {silent_seconds:.0f} s; mmd-operator "
                        "marked the pod not ready so that its Service stops sending to it"
                    ),
                    "lastTransitionTime": when,
                }
            ]
        }
    }
