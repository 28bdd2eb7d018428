"""How the serving pods are doing: available, rolling out, or in trouble, and why.

Trouble is named from what Kubernetes itself reports: the scheduler's message for a pod it cannot place
(InsufficientGPUs when it is GPUs), a pod the node controller marked not ready because its node stopped
reporting (NodeLost), CrashLoopBackOff with what the container last said, a pod that is
still not ready when its startup budget is spent, or the Deployment controller's own progress deadline.
Pure: imports the facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mmd_operator.facts import DeploymentFacts, PodFacts, PodPhase
from mmd_operator.judgement.engine import scheduling_reason


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
    # Something a wait alone may not fix: the phase becomes Degraded.
    trouble: bool = False
    ready_replicas: int = 0
    updated_replicas: int = 0
    replicas: int = 0
    # When to look again if nothing else happens (a pod's startup budget runs out).
    recheck_after: float | None = None


def _pod_trouble(pods: list[PodFacts], now: datetime, startup_budget: float) -> tuple[str, str] | None:
    """The first problem among `pods`: (reason, message)."""
    for pod in pods:
        if pod.unschedulable:
            return scheduling_reason(pod.unschedulable), f"pod {pod.meta.name}: {pod.unschedulable}"
    for pod in pods:
        if pod.node_lost:
            return (
                "NodeLost",
                f"pod {pod.meta.name}: its node {pod.node} stopped reporting; the pod is not ready",
            )
    for pod in pods:
        if pod.crash_loop:
            return "CrashLoop", f"pod {pod.meta.name}: {pod.crash_loop}"
    for pod in pods:
        if pod.phase is not PodPhase.RUNNING or pod.ready or pod.started is None:
            continue
        waited = (now - pod.started).total_seconds()
        # The message names no elapsed time: an unchanged world must give an unchanged status.
        if pod.restarts > 0:
            return "PodsNotReady", f"pod {pod.meta.name} is not ready and has restarted {pod.restarts} times"
        if waited > startup_budget:
            return (
                "PodsNotReady",
                f"pod {pod.meta.name} is still not ready after its startup budget of {startup_budget:.0f} s",
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


def serving_state(
    deployment: DeploymentFacts | None,
    pods: tuple[PodFacts, ...],
    *,
    desired: int,
    applied: bool,
    engine_ready: bool,
    now: datetime,
    startup_budget: float,
) -> ServingState:
    """The serving state; `applied` says whether the live Deployment is the one the current spec wants."""
    if deployment is None:
        if not engine_ready:
            return ServingState(desired, False, False, False, "EngineNotReady", "waiting for the engine")
        return ServingState(desired, False, False, False, "Deploying", "creating the Deployment")
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
    problem = _pod_trouble(live, now, startup_budget)
    if problem is None and deployment.progress_failure:
        problem = ("PodsNotReady", deployment.progress_failure)
    if problem is not None:
        return state(available, rolled_out, *problem, trouble=True)
    recheck = _budget_left(live, now, startup_budget)
    ready = f"{deployment.ready_replicas} of {desired} pods ready"
    if rolled_out:
        return state(True, True, "ScaledToZero" if desired == 0 else "AllReplicasAvailable", ready)
    if not current or deployment.updated_replicas < desired or deployment.status_replicas > desired:
        message = f"rolling out: {updated} of {desired} pods updated, {ready}"
        return state(available, False, "RolloutInProgress", message, recheck_after=recheck)
    return state(available, False, "PodsNotReady", ready, recheck_after=recheck)
