"""Everything one reconcile needs to know about a resource's world, read from the cache.

Children come from the watch-fed cache. The API server is asked directly only for what the operator does not
watch and only while it matters: whether the model source claims exist and the LeaderWorkerSet API is
served, before an artifact's Job is created; the kubelet's FailedMount Events of a Job pod waiting in
ContainerCreating while the spec names a token Secret (the operator reads no Secret: the kubelet says
when the token Secret or its key is missing, `judgement.token_secret`); the nodes, while a pod cannot be
scheduled (from the node directory's shared listing); the namespace's ResourceQuotas, while the Job or the
serving workload lacks pods (from the quota directory's); what the last Ready revision ran (its
ReplicaSet, or its LeaderWorkerSet's ControllerRevision), to undo a revision that cannot start; and the
tail of a running build or download pod's log, for the last progress line it printed
(`engine_builder.progress_format`). Where the artifact is looked for (its Job, its index entry, its
claim) is the runtime's, looked up once by the plan's runtime; the serving workload (a Deployment, or a
LeaderWorkerSet of groups) is the replica shape's (`_WORKLOADS`). `mmctl validate --cluster` reads the token
Secret with its user's rights (`token_secret_missing`), and keeps no value of it. Imports the cache, the
client, the node and quota directories, the plan, the token Secret's judgement and the facts.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from engine_builder.progress_format import BuildProgress, DownloadProgress, last_progress
from engine_builder.result_format import BuildSucceeded
from engine_builder.weights_format import DownloadSucceeded, is_commit, weights_key
from mmd_operator.api.v1alpha1 import MultimodalDeployment, ReplicaShape
from mmd_operator.facts import (
    ClaimFacts,
    DeploymentFacts,
    JobFacts,
    Meta,
    Missing,
    MissingReference,
    Observed,
    PodFacts,
    PodPhase,
)
from mmd_operator.judgement import token_secret
from mmd_operator.judgement.artifact import newest
from mmd_operator.knowledge import Runtime
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.kube.engine_index import EngineIndex
from mmd_operator.kube.nodes import NodeDirectory, requested_by_node, scheduler_node_count
from mmd_operator.kube.quotas import QuotaDirectory
from mmd_operator.plan.resource_plan import AnyPlan
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.plan.trtllm_serve import TrtllmServePlan
from mmd_operator.vocabulary import kinds, labels, names

_log = logging.getLogger(__name__)
# The builder prints a progress line every 10 s; a build step's output between two of them rarely fills
# this much of the tail.
_LOG_LINES = 200
_LOG_BYTES = 64 * 1024
_LOG_REFUSALS_SAID: set[int] = set()
_EVENT_REFUSALS_SAID: set[int] = set()


def token_secret_missing(
    client: KubeClient, resource: MultimodalDeployment, namespace: str
) -> list[MissingReference]:
    """The token Secret or its key, when missing, read with the caller's rights (`mmctl validate --cluster`).

    The operator never calls this: it reads no Secret, and learns the same from the kubelet
    (`kubelet_refusals`).
    """
    token = token_secret.token_of(resource.spec)
    if token is None:
        return []
    secret = client.get(kinds.SECRET.api_version, kinds.SECRET.kind, namespace, token.name)
    if secret is None:
        return [token_secret.not_found(token, namespace)]
    if token.key not in (secret.get("data") or {}) and token.key not in (secret.get("stringData") or {}):
        return [token_secret.key_not_found(token)]
    return []


def missing_references(
    client: KubeClient, resource: MultimodalDeployment, namespace: str
) -> list[MissingReference]:
    """The source claims the spec names that do not exist, and the LeaderWorkerSet API a group needs.

    Checked before an artifact's Job is created (also by `mmctl validate --cluster`).
    """
    spec = resource.spec
    missing = workload_api_missing(client, resource)
    sources = [("spec.model.source.pvc.claimName", spec.model.source.pvc)]
    if spec.model.lora is not None:
        sources.append(("spec.model.lora.source.pvc.claimName", spec.model.lora.source.pvc))
    for field, source in sources:
        if (
            source is not None
            and client.get("v1", "PersistentVolumeClaim", namespace, source.claim_name) is None
        ):
            missing.append(
                MissingReference(
                    Missing.SOURCE_CLAIM,
                    field,
                    f"PersistentVolumeClaim {source.claim_name} not found in namespace {namespace}",
                    "create the claim with the model in it, or name another",
                )
            )
    return missing


def kubelet_refusals(
    client: KubeClient, resource: MultimodalDeployment, namespace: str, pods: tuple[PodFacts, ...]
) -> tuple[list[MissingReference], bool]:
    """The token Secret or key the kubelet reports missing of the Job's waiting pods, and whether one waits.

    The second value is true while a pod waits in ContainerCreating with the kubelet silent so far.

    The words of a container waiting in CreateContainerConfigError are in the pod's status (watched);
    a secret volume the kubelet cannot mount is only in its FailedMount Events, listed for that pod
    while it waits in ContainerCreating (`judgement.token_secret`).
    """
    token = token_secret.token_of(resource.spec)
    if token is None:
        return [], False
    silent = False
    for pod in token_secret.waiting_pods(pods):
        said = [message for _, message in pod.waiting]
        if token_secret.mounting(pod):
            said += _failed_mounts(client, namespace, pod)
        found = token_secret.refusal(token, namespace, pod.meta.name, said)
        if found is not None:
            return [found], False
        silent = silent or token_secret.mounting(pod)
    return [], silent


def _failed_mounts(client: KubeClient, namespace: str, pod: PodFacts) -> list[str]:
    """The messages of the kubelet's FailedMount Events on `pod`, the newest first."""
    selector = f"involvedObject.kind=Pod,involvedObject.uid={pod.meta.uid},reason={token_secret.FAILED_MOUNT}"
    try:
        events = client.list(kinds.EVENT.api_version, kinds.EVENT.kind, namespace, field_selector=selector)
    except ApiError as error:
        # A courtesy, as a Job's progress is: without `list` on events the pod waits as any other.
        if error.status not in _EVENT_REFUSALS_SAID:
            _EVENT_REFUSALS_SAID.add(error.status)
            _log.warning("Cannot read the Events of pod %s/%s: %s", namespace, pod.meta.name, error)
        return []
    # The newest first: the kubelet's last word on the volume is what holds now.
    events.sort(
        key=lambda event: str(event.get("lastTimestamp") or event.get("eventTime") or ""), reverse=True
    )
    return [str(event.get("message") or "") for event in events]


def workload_api_missing(client: KubeClient, resource: MultimodalDeployment) -> list[MissingReference]:
    """The serving workload's API (a LeaderWorkerSet's), when the cluster does not serve it."""
    parallelism = resource.spec.parallelism
    kind = _WORKLOADS[parallelism.shape].cached
    if not kind.optional or client.serves(kind.api):
        return []
    return [
        MissingReference(
            Missing.WORKLOAD_API,
            "spec.serving.gpusPerPod",
            f"a replica of {parallelism.describe()} is a {kind.kind} group, and this cluster does not serve "
            f"{kind.api_version}",
            "install the LeaderWorkerSet controller (docs/multi-node.md#what-the-cluster-needs); the "
            "operator sees it within a minute",
        )
    ]


def unshared_claims(
    resource: MultimodalDeployment, claims: Mapping[str, ClaimFacts | None]
) -> list[MissingReference]:
    """Claims a replica across pods mounts on several nodes that are not ReadWriteMany, by spec field."""
    parallelism = resource.spec.parallelism
    needed = _WORKLOADS[parallelism.shape].claim_access
    return [
        MissingReference(
            Missing.SHARED_CLAIM,
            field,
            f"PersistentVolumeClaim {claim.meta.name} is {', '.join(claim.access_modes)}, and every pod "
            f"of a replica of {parallelism.describe()} mounts it, each from its own node",
            f"use a {needed} claim (its StorageClass must offer it)",
        )
        for field, claim in claims.items()
        if needed is not None
        and claim is not None
        and claim.access_modes
        and needed not in claim.access_modes
    ]


@dataclass(frozen=True)
class _Lookup:
    """Where a runtime's artifact is looked for: its Job, its index entry, the claim it lives in."""

    job: str | None = None
    artifact: BuildSucceeded | DownloadSucceeded | None = None
    resolved_commit: str | None = None
    claim: str | None = None


def _engine(plan: TritonPlan, index: EngineIndex, claim: str) -> _Lookup:
    return _Lookup(
        job=names.build_job(plan.cache_key, claim), artifact=index.get(plan.cache_key), claim=claim
    )


def _weights(plan: TrtllmServePlan, index: EngineIndex, claim: str) -> _Lookup:
    download = plan.download
    if download is None:  # a PersistentVolumeClaim source: no Job, no index entry, no engine-cache claim
        return _Lookup()
    resolved = download.revision if is_commit(download.revision) else index.resolved(download.key)
    return _Lookup(
        job=names.download_job(download.key, claim),
        artifact=index.snapshot(weights_key(download.repo, resolved)) if resolved else None,
        resolved_commit=resolved,
        claim=claim,
    )


# Each runtime's lookup; a third runtime is one function and one row here.
_LOOKUPS: Mapping[Runtime, Callable[..., _Lookup]] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: _engine, Runtime.TRTLLM_SERVE: _weights}
)


def job_progress(
    client: KubeClient, namespace: str, job: JobFacts | None, pods: tuple[PodFacts, ...]
) -> DownloadProgress | BuildProgress | None:
    """The last progress line the running pod of `job` printed; None when none runs or it printed none."""
    if job is None or job.succeeded or job.failed or job.meta.deleting:
        return None
    running = [pod for pod in pods if pod.phase is PodPhase.RUNNING and not pod.meta.deleting]
    if not running:
        return None
    pod = newest(tuple(running))[0]
    try:
        tail = client.pod_log_tail(namespace, pod.meta.name, lines=_LOG_LINES, limit_bytes=_LOG_BYTES)
    except ApiError as error:
        # Progress is a courtesy: without `pods/log` (or while the kubelet cannot serve it) the status
        # says where the Job runs, as before. Said once per kind of refusal, not at every look.
        if error.status not in _LOG_REFUSALS_SAID:
            _LOG_REFUSALS_SAID.add(error.status)
            _log.warning(
                "Cannot read the log of pod %s/%s for its progress: %s", namespace, pod.meta.name, error
            )
        return None
    return last_progress(tail) if tail else None


def observe(
    store: cached.Cache,
    client: KubeClient,
    resource: MultimodalDeployment,
    plan: AnyPlan,
    *,
    claim: str,
    now: datetime,
    nodes: NodeDirectory | None = None,
    quotas: QuotaDirectory | None = None,
) -> Observed:
    """The facts of `resource`, whose current plan is `plan` and whose spec names `claim`.

    The nodes come from `nodes` while one of the resource's pods cannot be scheduled, the namespace's
    ResourceQuotas from `quotas` while the Job or the serving workload lacks pods.
    """
    instance = str(resource.metadata["name"])
    namespace = str(resource.metadata["namespace"])
    uid = str(resource.metadata.get("uid", ""))
    index = store.get(cached.CONFIGMAPS, namespace, names.engine_index(claim))
    index = index if isinstance(index, EngineIndex) else EngineIndex()
    lookup = _LOOKUPS[plan.runtime](plan, index, claim)
    job: JobFacts | None = store.get(cached.JOBS, namespace, lookup.job) if lookup.job else None
    job_pods: tuple[PodFacts, ...] = (
        tuple(store.pods_of_job(namespace, lookup.job)) if job and lookup.job else ()
    )
    progress = job_progress(client, namespace, job, job_pods) if lookup.artifact is None else None
    mounting = False
    if lookup.artifact is None and job is None:
        missing = missing_references(client, resource, namespace)
    else:
        missing = workload_api_missing(client, resource)
        if lookup.artifact is None:
            refused, mounting = kubelet_refusals(client, resource, namespace, job_pods)
            missing += refused
    configmaps = tuple(
        value
        for value in store.of_instance(cached.CONFIGMAPS, namespace, instance)
        if isinstance(value, Meta) and value.label(labels.COMPONENT) == labels.MODEL_REPOSITORY
    )
    serving_pods = tuple(
        pod
        for pod in store.of_instance(cached.PODS, namespace, instance)
        if pod.meta.label(labels.COMPONENT) == labels.SERVING
    )
    stuck = next((pod for pod in job_pods + serving_pods if pod.unschedulable), None)
    listed = nodes.nodes(scheduler_node_count(stuck.unschedulable)) if stuck and nodes is not None else None
    if listed is not None:
        listed = dataclasses.replace(listed, requested=requested_by_node(store.all(cached.PODS)))
    stale_jobs = tuple(j for j in store.owned_by(cached.JOBS, namespace, uid) if j.meta.name != lookup.job)
    stale_claims = tuple(
        c for c in store.owned_by(cached.CLAIMS, namespace, uid) if c.meta.name != lookup.claim
    )
    claim_facts: ClaimFacts | None = store.get(cached.CLAIMS, namespace, claim) if lookup.claim else None
    source = resource.spec.model.source.pvc
    missing += unshared_claims(
        resource,
        {
            "spec.engineCache": claim_facts,
            "spec.model.source.pvc.claimName": (
                store.get(cached.CLAIMS, namespace, source.claim_name) if source is not None else None
            ),
        },
    )
    workload = _WORKLOADS[plan.parallelism.shape]
    # The workload of another shape: the spec changed how many pods a replica takes.
    retired = (
        store.get(w.cached, namespace, w.name(instance)) for w in _WORKLOADS.values() if w is not workload
    )
    serving = store.get(workload.cached, namespace, workload.name(instance))
    lacking = (job is not None and not (job.succeeded or job.failed) and not job_pods) or (
        serving is not None
        and (serving.replica_failure is not None or len(serving_pods) < serving.replicas * serving.group_size)
    )
    return Observed(
        now=now,
        claim=claim_facts,
        artifact=lookup.artifact,
        resolved_commit=lookup.resolved_commit,
        job=job,
        job_pods=job_pods,
        job_progress=progress,
        job_pod_mounting=mounting,
        missing=tuple(missing),
        configmaps=configmaps,
        deployment=serving,
        retired_workload=next((found for found in retired if found is not None), None),
        serving_pods=serving_pods,
        stale_jobs=stale_jobs,
        stale_claims=stale_claims,
        claim_templates=tuple(store.of_instance(cached.CLAIM_TEMPLATES, namespace, instance)),
        network_policy=store.get(cached.NETWORK_POLICIES, namespace, names.serving(instance)),
        autoscaler=store.get(cached.AUTOSCALERS, namespace, names.serving(instance)),
        disruption_budget=store.get(cached.DISRUPTION_BUDGETS, namespace, names.serving(instance)),
        canary=store.get(workload.cached, namespace, names.canary(instance)),
        nodes=listed,
        quotas=quotas.quotas(namespace) if lacking and quotas is not None else None,
    )


def revision_template(
    client: KubeClient, namespace: str, workload: DeploymentFacts, revision: str
) -> dict[str, Any] | None:
    """What the serving workload ran at `revision`; None when its controller no longer keeps it.

    Read only to undo a revision that cannot start (`judgement.revisions`). A Deployment's is the pod
    template of its ReplicaSet `<deployment>-<revision>` (read by name), without the hash label the
    Deployment controller sets, as `kubectl rollout undo` takes it back. A LeaderWorkerSet's is the
    `leaderWorkerTemplate` its controller recorded in the ControllerRevision of that revision (listed by
    label): both pod templates, the group's size and its restart policy.
    """
    return _BY_KIND[workload.kind].template(client, namespace, workload, revision)


def _group_template(
    client: KubeClient, namespace: str, workload: DeploymentFacts, revision: str
) -> dict[str, Any] | None:
    kind = kinds.CONTROLLER_REVISION
    selector = f"{labels.GROUP_SET}={workload.meta.name},{labels.GROUP_REVISION}={revision}"
    # Its StatefulSets' revisions carry the same labels (their pods' template has them): the set's own
    # is the one it owns.
    recorded = [
        found
        for found in client.list(kind.api_version, kind.kind, namespace, label_selector=selector)
        if any(
            owner.get("kind") == workload.kind and owner.get("name") == workload.meta.name
            for owner in (found.get("metadata") or {}).get("ownerReferences") or []
        )
    ]
    if not recorded:
        return None
    group = dict(((recorded[0].get("data") or {}).get("spec") or {}).get("leaderWorkerTemplate") or {})
    group.pop("$patch", None)  # the controller's strategic-merge directive, not part of the template
    return group or None


def _replica_set_template(
    client: KubeClient, namespace: str, workload: DeploymentFacts, revision: str
) -> dict[str, Any] | None:
    kind = kinds.REPLICA_SET
    found = client.get(kind.api_version, kind.kind, namespace, f"{workload.meta.name}-{revision}")
    if found is None:
        return None
    template: dict[str, Any] = dict((found.get("spec") or {}).get("template") or {})
    metadata = {key: value for key, value in (template.get("metadata") or {}).items() if value is not None}
    metadata["labels"] = {
        key: value
        for key, value in (metadata.get("labels") or {}).items()
        if key != labels.DEPLOYMENT_REVISION
    }
    return {**template, "metadata": metadata}


@dataclass(frozen=True)
class _Workload:
    """One replica shape's serving workload, as the adapter finds it and reads its revisions back."""

    # Its kind in the cache (optional: a kind the cluster may not serve).
    cached: cached.CachedKind
    # Its name, from the instance's.
    name: Callable[[str], str]
    # The access mode every claim a replica mounts needs (a group's pods mount them from several nodes).
    claim_access: str | None
    # What it ran at a revision (`revision_template`).
    template: Callable[[KubeClient, str, DeploymentFacts, str], dict[str, Any] | None]


# Each replica shape's serving workload.
_WORKLOADS: Mapping[ReplicaShape, _Workload] = MappingProxyType(
    {
        ReplicaShape.ONE_POD: _Workload(cached.DEPLOYMENTS, names.serving, None, _replica_set_template),
        ReplicaShape.GROUP: _Workload(
            cached.LEADER_WORKER_SETS, names.group_set, "ReadWriteMany", _group_template
        ),
    }
)
_BY_KIND = MappingProxyType({workload.cached.kind: workload for workload in _WORKLOADS.values()})
