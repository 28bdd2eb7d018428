"""How a change replaces the serving pods: beside the old ones (a surge), or in place, and why.

With `serving.rollout.strategy: SurgeWhenPossible` the Deployment starts each new pod beside the old
ones, which serve until it is ready. When the scheduler cannot place that surge pod for
`surgeWaitSeconds` (no free GPU it may use), waiting longer would stall the change for good, so the
rollout goes on in place: one old pod stops before its replacement loads. That decision is said first
(the status's condition and an Event, with the GPU figures of `placement`), and only the reconcile after
the one that said it tells the Deployment; the live Deployment then keeps it (an annotation with the
reason) until the new pods are available, and the next change surges again. A surge pod that no node
may take at all (selector, taints, size) is no reason to stop an old pod: it would not be placed in
place either. Pure: imports the api models, the facts, placement and the vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from mmd_operator.api.v1alpha1 import MultimodalDeploymentSpec
from mmd_operator.facts import DeploymentFacts, Nodes, PodFacts, PodPlacement
from mmd_operator.judgement.placement import (
    INSUFFICIENT_CPU,
    INSUFFICIENT_GPUS,
    INSUFFICIENT_MEMORY,
    SHAPE_WORDS,
    match,
    scheduling_reason,
    serving_demand,
    unschedulable,
)
from mmd_operator.vocabulary import labels

# The status condition that says whether a change keeps a pod serving, and its reasons.
CONDITION = "ServingThroughChanges"
SURGE = "Surge"
IN_PLACE = "InPlace"
SURGE_UNSCHEDULABLE = "SurgeUnschedulable"
# How soon after saying that a rollout goes on in place the Deployment is told.
ANNOUNCE_SECONDS = 1.0
# The Deployment annotation that holds why the rollout under way goes on in place.
IN_PLACE_BECAUSE = f"{labels.PREFIX}/rolling-in-place"


@dataclass(frozen=True)
class Rollout:
    """How the serving Deployment replaces its pods now."""

    # New pods start beside the old ones.
    surge: bool
    # The condition's reason (SURGE, IN_PLACE by choice, SURGE_UNSCHEDULABLE) and message.
    reason: str
    message: str
    # When to look again: a surge pod's wait for the scheduler runs out.
    recheck_after: float | None = None
    # Pods of the rollout that wait for a GPU another pod of it will free: expected, not trouble.
    waiting_for_gpus: frozenset[str] = frozenset()
    # The status already shows the fall-back (it is said before the Deployment is told).
    announced: bool = True

    @property
    def fell_back(self) -> bool:
        """A surge was wanted but the scheduler cannot place it: the rollout under way goes on in place."""
        return self.reason == SURGE_UNSCHEDULABLE

    @property
    def in_place_now(self) -> bool:
        """The Deployment is to roll in place from this reconcile on: the fall-back was said already."""
        return self.fell_back and self.announced


def _rolling(deployment: DeploymentFacts) -> bool:
    """Whether the Deployment still holds pods of an older template, or lacks pods of the current one."""
    return (
        deployment.status_replicas > deployment.updated_replicas
        or deployment.updated_replicas < deployment.replicas
    )


def _short_of_gpus(pod: PodFacts, nodes: Nodes | None) -> bool:
    """Whether the scheduler cannot place `pod` only for want of what an old pod leaving frees.

    Free GPUs, or the memory or CPU beside them. A pod no node may take at all (its selector, affinity,
    taints, or more GPUs, memory or CPU than a node has) would not be placed in place either: then the
    old pods keep serving and the status says why.
    """
    if scheduling_reason(pod.unschedulable or "") not in (
        INSUFFICIENT_GPUS,
        INSUFFICIENT_MEMORY,
        INSUFFICIENT_CPU,
    ):
        return False
    if nodes is None:
        return True
    return bool(match(pod.placement or PodPlacement(gpus=pod.gpus), nodes).roomy)


def _waiting(pods: tuple[PodFacts, ...], nodes: Nodes | None) -> frozenset[str]:
    """The pods that wait only for a free GPU."""
    return frozenset(
        pod.meta.name
        for pod in pods
        if pod.unschedulable and not pod.meta.deleting and _short_of_gpus(pod, nodes)
    )


def _going(deployment: DeploymentFacts, pods: tuple[PodFacts, ...]) -> str:
    """The old pod that stops first, as the Deployment controller picks it: a not-ready one first."""
    old = [
        pod
        for pod in pods
        if not pod.meta.deleting and not pod.unschedulable and pod.configmap != deployment.configmap
    ]
    old = old or [pod for pod in pods if not pod.meta.deleting and not pod.unschedulable]
    if not old:
        return "an old pod"
    first = min(old, key=lambda pod: (pod.ready, pod.meta.name))
    return f"pod {first.meta.name}"


def _in_place_message(
    spec: MultimodalDeploymentSpec,
    deployment: DeploymentFacts,
    pods: tuple[PodFacts, ...],
    surge_pod: PodFacts,
    nodes: Nodes | None,
) -> str:
    replicas = max(deployment.replicas, 1)
    surge = SHAPE_WORDS[spec.parallelism.shape].surge
    demand = dataclasses.replace(
        serving_demand(spec),
        replicas=replicas + 1,
        pods_field=f"{replicas} replica{'s' if replicas != 1 else ''} + {surge}:",
    )
    why = unschedulable(surge_pod, demand, nodes).message
    ready = sum(1 for pod in pods if pod.ready and not pod.meta.deleting)
    left = max(ready - 1, 0)
    serving = "no pod serves" if left == 0 else f"{left} pod{'s' if left != 1 else ''} serve"
    wait = spec.serving.rollout.surge_wait_seconds
    budget = spec.serving.probes.startup_timeout_seconds
    return (
        f"the surge {why} (waited {wait} s, spec.serving.rollout.surgeWaitSeconds); "
        f"rolling in place: {_going(deployment, pods)} stops before its replacement loads, and {serving} "
        f"until it is ready (up to spec.serving.probes.startupTimeoutSeconds, {budget} s)"
    )


def rollout_state(
    spec: MultimodalDeploymentSpec,
    deployment: DeploymentFacts | None,
    pods: tuple[PodFacts, ...],
    *,
    now: datetime,
    nodes: Nodes | None,
    shown: str | None = None,
) -> Rollout:
    """How the Deployment should replace its pods, given the live one and its `pods`.

    `shown` is the reason of the condition the status shows now.
    """
    rollout = spec.serving.rollout
    if rollout.strategy == "InPlace":
        return Rollout(
            False,
            IN_PLACE,
            "spec.serving.rollout.strategy is InPlace: a change stops each old pod before its replacement "
            "loads, so the cluster never holds GPUs beyond the replicas",
        )
    surging = Rollout(
        True,
        SURGE,
        "a change starts each new pod beside the old ones, which serve until it is ready; with no free GPU "
        "for it, the change goes on in place and says so first",
    )
    if deployment is None:
        return surging
    kept = deployment.meta.annotation(IN_PLACE_BECAUSE)
    # An in-place rollout holds until every new pod is available: the status says why one was down.
    if kept and (_rolling(deployment) or deployment.available_replicas < deployment.replicas):
        return Rollout(False, SURGE_UNSCHEDULABLE, kept, waiting_for_gpus=_waiting(pods, nodes))
    if not _rolling(deployment):
        return surging
    waiting = [pod for pod in pods if pod.meta.name in _waiting(pods, nodes)]
    expected = frozenset(pod.meta.name for pod in waiting)
    if not waiting:
        return surging
    surge_pod = min(waiting, key=lambda pod: (pod.meta.created or now, pod.meta.name))
    waited = (now - (surge_pod.meta.created or now)).total_seconds()
    wait = rollout.surge_wait_seconds
    if waited < wait:
        message = (
            f"the surge pod {surge_pod.meta.name} waits for a free GPU; after {wait} s "
            "(spec.serving.rollout.surgeWaitSeconds) the rollout goes on in place"
        )
        return Rollout(True, SURGE, message, recheck_after=wait - waited + 1, waiting_for_gpus=expected)
    message = _in_place_message(spec, deployment, pods, surge_pod, nodes)
    announced = shown == SURGE_UNSCHEDULABLE
    return Rollout(
        False,
        SURGE_UNSCHEDULABLE,
        message,
        recheck_after=None if announced else ANNOUNCE_SECONDS,
        waiting_for_gpus=expected,
        announced=announced,
    )
