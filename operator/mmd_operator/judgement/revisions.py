"""Which revision of the serving pods last served in full, and when a new revision is undone.

A revision is a pod template as its controller hashes it: the Deployment controller's
`pod-template-hash` on its pods (its ReplicaSet `<deployment>-<hash>` holds the template), or, for a
replica across pods, the LeaderWorkerSet controller's template-revision-hash on every pod of a group
(its ControllerRevision holds both templates). The stable revision is the last one whose every pod was
ready with nothing else running; the status keeps it. A new revision whose pod cannot start (its
container crash-loops, its image cannot be pulled, or it is still not ready when its startup budget is
spent) is undone without a human: the workload gets the stable revision's template back (its controller
brings the stable pods back), and the resource holds there, Degraded with reason
RolledBack, until the spec changes or the retry annotation takes a new value. A resource that never had
a stable revision is left as it is, and its status says what is wrong as before. Pure: imports the api
models, the facts and the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mmd_operator.api.v1alpha1 import MultimodalDeploymentStatus, ServingRevision
from mmd_operator.facts import DeploymentFacts, PodFacts, PodPhase
from mmd_operator.vocabulary import labels

ROLLED_BACK = "RolledBack"
# Set it to a new value to try the undone revision again without changing the spec.
RETRY_ANNOTATION = f"{labels.PREFIX}/retry-rollout"


@dataclass(frozen=True)
class Undo:
    """The revision to go back to, and why."""

    to: ServingRevision
    failed: str
    message: str
    # This reconcile writes the stable template back; False: an earlier one did, and it holds.
    write: bool
    # The retry annotation's value it was undone under.
    retry: str | None = None


def revision_of(pod: PodFacts) -> str | None:
    """The revision `pod` runs, as its controller labels it (a Deployment's or a LeaderWorkerSet's)."""
    return pod.meta.label(labels.DEPLOYMENT_REVISION) or pod.meta.label(labels.GROUP_REVISION)


def _live(pods: tuple[PodFacts, ...]) -> list[PodFacts]:
    return [pod for pod in pods if not pod.meta.deleting]


def settled(deployment: DeploymentFacts) -> bool:
    """Whether the Deployment's rollout is over: every pod runs its template and is available."""
    return (
        deployment.observed_generation >= deployment.generation
        and deployment.status_replicas == deployment.updated_replicas == deployment.replicas
        and deployment.available_replicas >= deployment.replicas
    )


def stable_revision(
    shown: ServingRevision | None, deployment: DeploymentFacts | None, pods: tuple[PodFacts, ...]
) -> ServingRevision | None:
    """The revision the status keeps: the pods' one when all of them run it and are ready, else `shown`.

    A Deployment at rest at zero pods forgets it: nothing shows that what it would start works, and the
    ConfigMap kept for going back would outlive every pod.
    """
    if deployment is not None and deployment.replicas == 0:
        at_rest = deployment.observed_generation >= deployment.generation and deployment.status_replicas == 0
        return None if at_rest else shown
    live = _live(pods)
    if deployment is None or not live:
        return shown
    hashes = {revision_of(pod) for pod in live}
    if not settled(deployment) or len(hashes) != 1 or not all(pod.ready for pod in live):
        return shown
    (template_hash,) = hashes
    if template_hash is None:
        return shown
    pod = live[0]
    return ServingRevision(
        pod_template_hash=template_hash, cache_key=pod.meta.label(labels.CACHE_KEY), content=pod.configmap
    )


def _cannot_start(pod: PodFacts, now: datetime, startup_budget: float) -> str | None:
    """Why `pod` cannot start, or None."""
    if pod.crash_loop:
        return pod.crash_loop
    starting = pod.phase is PodPhase.RUNNING and not pod.ready and pod.started is not None
    if starting and pod.started is not None and (now - pod.started).total_seconds() > startup_budget:
        return f"still not ready after its startup budget of {startup_budget:.0f} s"
    return None


def undo(
    previous: MultimodalDeploymentStatus | None,
    *,
    generation: int,
    retry: str | None,
    pods: tuple[PodFacts, ...],
    now: datetime,
    startup_budget: float,
) -> Undo | None:
    """Whether to undo (or keep undone) the revision the serving pods roll to, given the status shown."""
    stable = previous.stable_revision if previous is not None else None
    if stable is None:
        return None
    held = previous.rollback if previous is not None else None
    if held is not None and held.generation == generation and held.retry == retry:
        return Undo(to=stable, failed=held.failed, message=held.message, write=False, retry=retry)
    for pod in _live(pods):
        template_hash = revision_of(pod)
        if template_hash is None or template_hash == stable.pod_template_hash:
            continue
        why = _cannot_start(pod, now, startup_budget)
        if why is None:
            continue
        serves = f"revision {stable.pod_template_hash}"
        what = ", ".join(
            part
            for part in (
                f"cacheKey {stable.cache_key}" if stable.cache_key else "",
                f"ConfigMap {stable.content}" if stable.content else "",
            )
            if part
        )
        message = (
            f"revision {template_hash} did not start: pod {pod.meta.name}: {why}; rolled back to {serves}"
            f"{f' ({what})' if what else ''}, which serves: apply a fixed spec, or set the annotation "
            f"{RETRY_ANNOTATION} to a new value to try this revision again"
        )
        return Undo(to=stable, failed=template_hash, message=message, write=True, retry=retry)
    return None
