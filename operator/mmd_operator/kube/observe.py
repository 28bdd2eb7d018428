"""Everything one reconcile needs to know about a resource's world, read from the cache.

Children come from the watch-fed cache. The API server is asked directly only for what the operator
does not watch and only while it matters: whether the Hugging Face token Secret (and its key) and the
model source claims exist, before a build Job is created; and the nodes, while a pod cannot be scheduled
(from the node directory's shared listing). A Secret's value is never read into memory beyond the API
response, and never logged. Imports the cache, the client, the node directory and the facts.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from engine_builder.weights_format import DownloadPlan, is_commit, weights_key
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.facts import ClaimFacts, JobFacts, Meta, Missing, MissingReference, Observed, PodFacts
from mmd_operator.knowledge import Runtime
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient
from mmd_operator.kube.engine_index import EngineIndex
from mmd_operator.kube.nodes import NodeDirectory, requested_by_node, scheduler_node_count
from mmd_operator.vocabulary import labels, names


def missing_references(
    client: KubeClient, resource: MultimodalDeployment, namespace: str
) -> list[MissingReference]:
    """Secrets and claims the spec names for the build that do not exist (also `mmctl validate --cluster`)."""
    spec = resource.spec
    missing: list[MissingReference] = []
    hub = spec.model.source.huggingface
    token = hub.token_secret_ref if hub is not None else None
    if token is not None:
        secret = client.get("v1", "Secret", namespace, token.name)
        field = "spec.model.source.huggingface.tokenSecretRef"
        if secret is None:
            missing.append(
                MissingReference(
                    Missing.SECRET,
                    field,
                    f"Secret {token.name} not found in namespace {namespace}",
                    f"create it with kubectl create secret generic {token.name} -n {namespace} "
                    f"--from-literal={token.key}=<your Hugging Face token>",
                )
            )
        elif token.key not in (secret.get("data") or {}) and token.key not in (
            secret.get("stringData") or {}
        ):
            missing.append(
                MissingReference(
                    Missing.SECRET_KEY,
                    field,
                    f"Secret {token.name} has no key {token.key}",
                    f"add the key to the Secret, or name one it has in {field}.key",
                )
            )
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


def observe(
    store: cached.Cache,
    client: KubeClient,
    resource: MultimodalDeployment,
    *,
    cache_key: str,
    claim: str,
    now: datetime,
    nodes: NodeDirectory | None = None,
    download: DownloadPlan | None = None,
) -> Observed:
    """The facts of `resource`, whose current plan has `cache_key` and uses `claim`.

    On trtllm-serve, `download` is the plan's weights download (None for a PersistentVolumeClaim source,
    which has no Job and no index entry). The nodes come from `nodes` while one of the resource's pods
    cannot be scheduled.
    """
    instance = str(resource.metadata["name"])
    namespace = str(resource.metadata["namespace"])
    uid = str(resource.metadata.get("uid", ""))
    claim_facts: ClaimFacts | None = store.get(cached.CLAIMS, namespace, claim)
    index = store.get(cached.CONFIGMAPS, namespace, names.engine_index(claim))
    index = index if isinstance(index, EngineIndex) else EngineIndex()
    serve = resource.spec.serving_runtime is Runtime.TRTLLM_SERVE
    engine = None if serve else index.get(cache_key)
    resolved, weights, job_name = None, None, ""
    if not serve:
        job_name = names.build_job(cache_key, claim)
    elif download is not None:
        job_name = names.download_job(download.key, claim)
        resolved = download.revision if is_commit(download.revision) else index.resolved(download.key)
        weights = index.snapshot(weights_key(download.repo, resolved)) if resolved else None
    job: JobFacts | None = store.get(cached.JOBS, namespace, job_name) if job_name else None
    build_pods: tuple[PodFacts, ...] = (
        tuple(store.pods_of_job(namespace, job_name)) if job is not None else ()
    )
    missing: list[MissingReference] = []
    if engine is None and weights is None and job is None:
        missing = missing_references(client, resource, namespace)
    repositories = tuple(
        value
        for value in store.of_instance(cached.CONFIGMAPS, namespace, instance)
        if isinstance(value, Meta) and value.label(labels.COMPONENT) == labels.MODEL_REPOSITORY
    )
    serving_pods = tuple(
        pod
        for pod in store.of_instance(cached.PODS, namespace, instance)
        if pod.meta.label(labels.COMPONENT) == labels.SERVING
    )
    stuck = next((pod for pod in build_pods + serving_pods if pod.unschedulable), None)
    listed = nodes.nodes(scheduler_node_count(stuck.unschedulable)) if stuck and nodes is not None else None
    if listed is not None:
        listed = dataclasses.replace(listed, requested=requested_by_node(store.all(cached.PODS)))
    stale_jobs = tuple(j for j in store.owned_by(cached.JOBS, namespace, uid) if j.meta.name != job_name)
    # A PersistentVolumeClaim source on trtllm-serve uses no engine-cache claim.
    used_claim = claim if not serve or download is not None else None
    stale_claims = tuple(
        c for c in store.owned_by(cached.CLAIMS, namespace, uid) if c.meta.name != used_claim
    )
    return Observed(
        now=now,
        claim=claim_facts if used_claim is not None else None,
        engine=engine,
        resolved_commit=resolved,
        weights=weights,
        job=job,
        build_pods=build_pods,
        missing=tuple(missing),
        repositories=repositories,
        deployment=store.get(cached.DEPLOYMENTS, namespace, names.serving(instance)),
        serving_pods=serving_pods,
        stale_jobs=stale_jobs,
        stale_claims=stale_claims,
        network_policy=store.get(cached.NETWORK_POLICIES, namespace, names.serving(instance)),
        autoscaler=store.get(cached.AUTOSCALERS, namespace, names.serving(instance)),
        disruption_budget=store.get(cached.DISRUPTION_BUDGETS, namespace, names.serving(instance)),
        nodes=listed,
    )
