"""How the serving pods are doing: available, rolling out, or in trouble, and why.

Trouble is named from what Kubernetes itself reports: the scheduler's message for a pod it cannot place
(InsufficientGPUs when it is GPUs, with the spec's and the nodes' figures from `placement`), a pod the
node controller marked not ready because its node stopped reporting (NodeLost), a container the kernel
killed for going over its memory limit (OOMKilled, with the limit), CrashLoopBackOff with
what the container last said, a pod that is still not ready when its startup budget is spent, or the
Deployment controller's own progress deadline. Each state also says, in one sentence for the Ready
condition, what to do or where to look. A ResourceQuota that refuses a missing pod (`quotas`) is trouble
too. Pure: imports the facts, placement and the quotas' reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mmd_operator.facts import DeploymentFacts, Nodes, PodFacts, PodPhase
from mmd_operator.judgement.artifact import JobWords
from mmd_operator.judgement.groups import GroupState
from mmd_operator.judgement.placement import GpuDemand, unschedulable
from mmd_operator.judgement.quotas import QUOTA_EXCEEDED


@dataclass(frozen=True)
class ServingState:
    """The serving Deployment of the resource's current plan."""

    # Pods wanted by the spec.
    desired: int
    # The Deployment exists and runs what the current spec wants (our last apply is this spec's).
    current: bool
    available: bool
    # Every pod runs the current template and is ready, and no old pod is left.
    rolled_out: bool
    reason: str
    message: str
    # One sentence for the Ready condition while serving is not ready: what is wrong and what to do.
    summary: str = ""
    # Something a wait alone may not fix: the phase becomes Degraded.
    trouble: bool = False
    ready_replicas: int = 0
    updated_replicas: int = 0
    replicas: int = 0
    # When to look again if nothing else happens (a pod's startup budget runs out).
    recheck_after: float | None = None


def _crash_summary(pod: PodFacts, crash: str) -> str:
    if "Image" in crash or "ErrImagePull" in crash:
        return (
            f"pod {pod.meta.name}: {crash}: check spec.serving.image and spec.serving.pod.imagePullSecrets."
        )
    return f"pod {pod.meta.name}: {crash}: kubectl logs {pod.meta.name} --previous has the rest."


def _pod_trouble(
    pods: list[PodFacts],
    now: datetime,
    startup_budget: float,
    demand: GpuDemand,
    nodes: Nodes | None,
    waiting_for_gpus: frozenset[str],
) -> tuple[str, str, str] | None:
    """The first problem among `pods`: (reason, message, summary)."""
    for pod in pods:
        if pod.unschedulable and pod.meta.name not in waiting_for_gpus:
            unplaced = unschedulable(pod, demand, nodes)
            return unplaced.reason, unplaced.message, unplaced.summary
    for pod in pods:
        if pod.node_lost:
            message = f"pod {pod.meta.name}: its node {pod.node} stopped reporting; the pod is not ready"
            return (
                "NodeLost",
                message,
                f"{message}: look after the node; the pod moves once the node controller evicts it.",
            )
    for pod in pods:
        if pod.oom_killed and not pod.ready:
            restarted = f", {pod.restarts} restarts" if pod.restarts else ""
            message = f"pod {pod.meta.name}: the kernel killed {pod.oom_killed} (OOMKilled{restarted})"
            summary = (
                f"{message}: raise spec.serving.pod.resources.limits.memory (status.podResources says what "
                "the derived figure is made of), or make the pod hold less: fewer Python model instances, "
                "a smaller spec.serving.sharedMemorySize."
            )
            return "OOMKilled", message, summary
    for pod in pods:
        if pod.crash_loop:
            return "CrashLoop", f"pod {pod.meta.name}: {pod.crash_loop}", _crash_summary(pod, pod.crash_loop)
    for pod in pods:
        if pod.phase is not PodPhase.RUNNING or pod.ready or pod.started is None:
            continue
        waited = (now - pod.started).total_seconds()
        # The message names no elapsed time: an unchanged world must give an unchanged status.
        name = pod.meta.name
        if pod.restarts > 0:
            message = f"pod {name} is not ready and has restarted {pod.restarts} times"
            return "PodsNotReady", message, f"{message}: kubectl logs {name} --previous says why."
        if waited > startup_budget:
            message = f"pod {name} is still not ready after its startup budget of {startup_budget:.0f} s"
            return (
                "PodsNotReady",
                message,
                f"{message}: kubectl logs {name} says why; an engine that loads slowly needs a larger "
                "spec.serving.probes.startupTimeoutSeconds.",
            )
    return None


def _budget_left(pods: list[PodFacts], now: datetime, startup_budget: float) -> float | None:
    """Seconds until the first starting pod's budget runs out (then it is in trouble)."""
    left = [
        startup_budget - (now - pod.started).total_seconds() + 1
        for pod in pods
        if pod.phase is PodPhase.RUNNING and not pod.ready and pod.started is not None
    ]
    return min(left) if left else None


def _scaling(deployment: DeploymentFacts, minimum: int) -> bool:
    """Whether an autoscaler's step is all that differs from what is wanted.

    Every pod is of the current template (no rollout), and the autoscaler's minimum is available (not
    a first start).
    """
    no_rollout = deployment.updated_replicas >= deployment.status_replicas
    return no_rollout and deployment.available_replicas >= max(minimum, 1)


def serving_state(
    deployment: DeploymentFacts | None,
    pods: tuple[PodFacts, ...],
    *,
    desired: int,
    applied: bool,
    artifact_ready: bool,
    now: datetime,
    startup_budget: float,
    demand: GpuDemand,
    waits_for: JobWords,
    nodes: Nodes | None = None,
    autoscaled_from: int | None = None,
    waiting_for_gpus: frozenset[str] = frozenset(),
    groups: Sequence[GroupState] = (),
    refused: tuple[str, str] | None = None,
) -> ServingState:
    """The serving state.

    `waits_for` names what the pods wait for before they exist: the runtime's artifact.
    `applied` says whether the live Deployment is the one the current spec wants, `demand` what the
    serving pods ask of the scheduler and `nodes` what the nodes offer (None: not known).
    `autoscaled_from`: an autoscaler sets the replicas, from this minimum; its steps above it are no
    rollout (see `_scaling`). `waiting_for_gpus` names the rollout's pods that wait for a GPU another of
    its pods will free (`judgement.rollout`): no trouble. `groups`: with a replica across pods, how each
    group is doing; the replicas counted are then groups, and the first group that does not serve is said.
    `refused`: a ResourceQuota refuses a pod the workload lacks (`judgement.quotas`), in the condition's
    words and Ready's.
    """
    if deployment is None:
        if not artifact_ready:
            artifact, condition = waits_for.artifact, waits_for.condition
            reason = f"{artifact.capitalize()}NotReady"
            return ServingState(
                desired, False, False, False, reason, f"waiting for the {artifact}",
                summary=f"waiting for the {artifact}; the {condition} condition says where it is.",
            )  # fmt: skip
        return ServingState(
            desired, False, False, False, "Deploying", "creating the Deployment",
            summary="creating the serving Deployment; nothing to do yet.",
        )  # fmt: skip
    if groups:
        # A LeaderWorkerSet counts a group ready a moment after one of its pods went: the pods say first.
        whole = sum(1 for group in groups if group.whole)
        deployment = dataclasses.replace(
            deployment,
            ready_replicas=min(deployment.ready_replicas, whole),
            available_replicas=min(deployment.available_replicas, whole),
        )
    current = applied and deployment.observed_generation >= deployment.generation
    updated = deployment.updated_replicas if current else 0
    rolled_out = (
        current
        and deployment.updated_replicas == desired
        and deployment.status_replicas == desired
        and deployment.ready_replicas == desired
        and deployment.available_replicas >= desired
    )
    available = deployment.available_replicas >= desired if desired else True

    def state(available: bool, rolled_out: bool, reason: str, message: str, **more: Any) -> ServingState:
        return ServingState(
            desired=desired,
            current=current,
            available=available,
            rolled_out=rolled_out,
            reason=reason,
            message=message,
            ready_replicas=deployment.ready_replicas,
            updated_replicas=updated,
            replicas=deployment.status_replicas,
            **more,
        )

    live = [pod for pod in pods if not pod.meta.deleting]
    problem = _pod_trouble(live, now, startup_budget, demand, nodes, waiting_for_gpus)
    name = deployment.meta.name
    if problem is None and refused is not None:
        problem = (QUOTA_EXCEEDED, *refused)
    if problem is None and deployment.progress_failure:
        failure = deployment.progress_failure
        describe = f"kubectl describe deployment {name}"
        problem = (
            "PodsNotReady",
            failure,
            f"the Deployment {name} made no progress ({failure}): {describe} says why.",
        )
    if problem is not None:
        reason, message, summary = problem
        return state(available, rolled_out, reason, message, summary=summary, trouble=True)
    recheck = _budget_left(live, now, startup_budget)
    ready_now = deployment.ready_replicas
    # A LeaderWorkerSet's replicas are groups: its counts are of groups, said so.
    replicas = "groups" if deployment.group_size > 1 else "pods"
    unit = f"groups of {deployment.group_size} pods" if deployment.group_size > 1 else replicas
    # A surge holds one pod more than wanted for a while.
    ready = (
        f"{ready_now} of {desired} {unit} ready"
        if ready_now <= desired
        else f"{ready_now} {unit} ready, {desired} wanted"
    )
    lacking = next((group for group in groups if not group.whole), None)
    if lacking is not None:
        ready += f" ({lacking.describe()})"
    if rolled_out:
        return state(True, True, "ScaledToZero" if desired == 0 else "AllReplicasAvailable", ready)
    if autoscaled_from is not None and current and _scaling(deployment, autoscaled_from):
        # The autoscaler's step: the pods run this spec's template and serve all along, so the resource
        # stays Ready (a GitOps tool would otherwise see it progress at every step of the load).
        if deployment.status_replicas > desired:
            left, ready_now = deployment.status_replicas, deployment.ready_replicas
            message = f"scaling down to {desired}: {left} {replicas} left, {ready_now} ready"
        else:
            message = f"scaling up to {desired}: {ready}"
        return state(True, True, "Scaling", message, recheck_after=recheck)
    if not current or deployment.updated_replicas < desired or deployment.status_replicas > desired:
        message = f"rolling out: {updated} of {desired} {replicas} updated, {ready}"
        follow = (
            f"kubectl get leaderworkerset {name} -w"
            if deployment.group_size > 1
            else f"kubectl rollout status deployment/{name}"
        )
        summary = f"{message}; {follow} follows it."
        return state(available, False, "RolloutInProgress", message, summary=summary, recheck_after=recheck)
    summary = (
        f"{ready}; the others are starting, with {startup_budget:.0f} s to load the {waits_for.artifact} "
        "(spec.serving.probes.startupTimeoutSeconds): nothing to do yet."
    )
    return state(available, False, "PodsNotReady", ready, summary=summary, recheck_after=recheck)
