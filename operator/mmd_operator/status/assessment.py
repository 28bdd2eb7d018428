"""What one reconcile found, assembled for `report` after the writes: the assess step.

From the world observed after the writes, the judgement of it and what the decision rendered: whether
the content ConfigMap and the Deployment carry what was decided, how serving is doing (with autoscaling:
against the pods the autoscaler set, and what the autoscaler reports), and the Service's endpoints; the
spec's warnings are carried through. What the status says of the artifact (where it is, what keys it,
the limits derived for it) and the endpoints are the runtime's, looked up once by the plan's runtime
(`RUNTIME_FINDINGS`). Decides nothing to write. Pure: imports the api models, the plan, the facts, the
judgement and the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from engine_builder.weights_format import DownloadSucceeded
from mmd_operator.api.v1alpha1 import (
    CanaryVerdict,
    DerivedLimits,
    Endpoints,
    EngineStatus,
    GpuStatus,
    MultimodalDeployment,
    RevisionStatus,
    WeightsSource,
    WeightsStatus,
)
from mmd_operator.facts import GpuKind, Meta, Observed
from mmd_operator.judgement import Judgement, Rendered
from mmd_operator.judgement.autoscaling import autoscaling_state
from mmd_operator.judgement.availability import serving_state
from mmd_operator.judgement.canary import split
from mmd_operator.judgement.groups import REPLICA_GROUPS
from mmd_operator.judgement.judge import ARTIFACT_WORDS
from mmd_operator.judgement.placement import serving_demand
from mmd_operator.judgement.quotas import serving_refusal
from mmd_operator.judgement.revisions import ROLLED_BACK, revision_of, settled
from mmd_operator.knowledge import Runtime
from mmd_operator.knowledge.engine_path import frozen_notice
from mmd_operator.plan.launch import GRPC_PORT, HTTP_PORT, METRICS_PORT
from mmd_operator.plan.resource_plan import AnyPlan
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.plan.trtllm_serve import TrtllmServePlan
from mmd_operator.status.report import ConfigMapState, Findings
from mmd_operator.vocabulary import labels, names


@dataclass(frozen=True)
class RuntimeFindings:
    """The runtime's part of the findings."""

    validated: str
    endpoints: Endpoints
    artifact_status: Mapping[str, Any] = field(default_factory=dict)
    derived: DerivedLimits | None = None
    # The runtime's standing upstream, where it is worth a condition (`report.FROZEN`).
    frozen: str | None = None


def _carries(meta: Meta | None, digest: str | None) -> bool:
    """Whether a live object carries `digest`: the operator already applied that manifest."""
    return meta is not None and digest is not None and meta.annotation(labels.APPLIED_HASH) == digest


def _live_job(observed: Observed) -> str | None:
    job = observed.job if observed.job is not None and not observed.job.meta.deleting else None
    return job.meta.name if job is not None else None


def _host(instance: str, namespace: str) -> str:
    return f"{names.serving(instance)}.{namespace}.svc"


def _triton(
    plan: TritonPlan, observed: Observed, judgement: Judgement, claim: str, instance: str, namespace: str
) -> RuntimeFindings:
    """The engine (`status.engine`), its limits, and tritonserver's HTTP, gRPC and metrics endpoints."""
    host = _host(instance, namespace)
    engine = EngineStatus(
        cache_key=plan.cache_key,
        claim=claim,
        path=f"/{plan.cache_key}",
        job=_live_job(observed),
        source=judgement.artifact.source,
        progress=judgement.artifact.progress,
        gpu=_gpu(plan.settings.gpu_kind),
        tensorrt_llm_version=plan.settings.release.tensorrt_llm,
    )
    return RuntimeFindings(
        validated=f"engine cacheKey {plan.cache_key}",
        endpoints=Endpoints(
            http=f"http://{host}:{HTTP_PORT}",
            grpc=f"grpc://{host}:{GRPC_PORT}",
            metrics=f"http://{host}:{METRICS_PORT}/metrics",
        ),
        artifact_status={"engine": engine},
        derived=plan.limits,
        frozen=frozen_notice(plan.settings.knowledge.model_type),
    )


def _gpu(kind: GpuKind | None) -> GpuStatus | None:
    if kind is None:
        return None
    return GpuStatus(product=kind.product, compute_capability=kind.compute_capability or None)


def _trtllm_serve(
    plan: TrtllmServePlan, observed: Observed, judgement: Judgement, claim: str, instance: str, namespace: str
) -> RuntimeFindings:
    """The weights, the OpenAI API and the metrics endpoints.

    `status.weights` says the source, the resolved commit and where the snapshot lies.
    """
    host = _host(instance, namespace)
    endpoints = Endpoints(
        http=f"http://{host}:{HTTP_PORT}/v1", metrics=f"http://{host}:{METRICS_PORT}/prometheus/metrics"
    )
    artifact = judgement.artifact
    source = WeightsSource(artifact.source) if artifact.ready and artifact.source else None
    download = plan.download
    if download is None:
        pvc = plan.spec.model.source.pvc
        weights = WeightsStatus(
            claim=pvc.claim_name if pvc else None, path=plan.snapshot_path(None), source=source
        )
        return RuntimeFindings(
            "weights on the model.source.pvc claim", endpoints, artifact_status={"weights": weights}
        )
    key = artifact.location
    record = artifact.record
    commit = observed.resolved_commit or (record.commit if isinstance(record, DownloadSucceeded) else None)
    weights = WeightsStatus(
        repo=download.repo,
        revision=download.revision,
        commit=commit,
        download_key=download.key,
        snapshot_key=key,
        claim=claim,
        path=plan.snapshot_path(key) if key else None,
        job=_live_job(observed),
        source=source,
        progress=artifact.progress,
    )
    return RuntimeFindings(
        f"weights download key {download.key}", endpoints, artifact_status={"weights": weights}
    )


# Each runtime's part of the findings; a third runtime is one function and one row here.
RUNTIME_FINDINGS: Mapping[Runtime, Callable[..., RuntimeFindings]] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: _triton, Runtime.TRTLLM_SERVE: _trtllm_serve}
)


def selector_string(instance: str) -> str:
    """The serving pods' label selector, in the string form of the scale subresource."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.serving_selector(instance).items()))


def assess(
    resource: MultimodalDeployment,
    plan: AnyPlan,
    observed: Observed,
    judgement: Judgement,
    rendered: Rendered,
    *,
    claim: str,
    warnings: Sequence[str] = (),
) -> Findings:
    """The findings of `resource` in the world `observed`, which `judgement` judged, with `warnings`."""
    instance = str(resource.metadata["name"])
    namespace = str(resource.metadata.get("namespace", "default"))
    artifact = judgement.artifact
    live_configmaps = {meta.name: meta for meta in observed.configmaps}
    configmap = ConfigMapState(
        name=rendered.configmap,
        size=rendered.configmap_size,
        too_large=rendered.too_large,
        applied=_carries(live_configmaps.get(rendered.configmap), rendered.configmap_digest),
        held=artifact.message if judgement.blocked else None,
    )
    live_deployment = observed.deployment
    autoscaling_spec = resource.spec.serving.autoscaling
    autoscaling = None
    desired = resource.spec.serving.replicas
    if autoscaling_spec is not None:
        # The autoscaler sets the Deployment's replicas; before there is one, it starts at minReplicas.
        desired = live_deployment.replicas if live_deployment is not None else autoscaling_spec.min_replicas
        autoscaling = autoscaling_state(
            autoscaling_spec, resource.spec.serving_runtime, names.serving(instance), observed.autoscaler
        )
    parallelism = plan.parallelism
    groups = REPLICA_GROUPS[parallelism.shape](observed.serving_pods, parallelism, desired)
    serving = serving_state(
        live_deployment,
        observed.serving_pods,
        desired=desired,
        applied=live_deployment is not None and _carries(live_deployment.meta, rendered.deployment_digest),
        artifact_ready=artifact.ready,
        now=observed.now,
        startup_budget=float(resource.spec.serving.probes.startup_timeout_seconds),
        demand=serving_demand(resource.spec),
        nodes=observed.nodes,
        waits_for=ARTIFACT_WORDS[plan.runtime],
        autoscaled_from=autoscaling_spec.min_replicas if autoscaling_spec is not None else None,
        waiting_for_gpus=judgement.rollout.waiting_for_gpus,
        groups=groups,
        refused=_serving_refusal(resource, plan, observed),
    )
    own = RUNTIME_FINDINGS[plan.runtime](plan, observed, judgement, claim, instance, namespace)
    return Findings(
        generation=int(resource.metadata.get("generation", 1)),
        runtime=plan.runtime,
        validated=own.validated,
        derived=own.derived,
        frozen=own.frozen,
        pod_resources=plan.resources.status(),
        artifact=artifact,
        artifact_status=own.artifact_status,
        configmap=configmap,
        serving=serving,
        endpoints=own.endpoints,
        selector=selector_string(instance),
        warnings=warnings,
        autoscaling=autoscaling,
        rollout=judgement.rollout,
        stable=judgement.stable,
        undo=judgement.undo,
        canary=judgement.canary if resource.spec.serving.rollout.strategy == "Canary" else None,
        revisions=revisions(observed, judgement),
        rollout_words=rollout_words(resource, observed, judgement),
        pods_per_replica=parallelism.pods_per_replica,
        groups=groups,
    )


def _serving_refusal(
    resource: MultimodalDeployment, plan: AnyPlan, observed: Observed
) -> tuple[str, str] | None:
    """What a quota that refuses a serving pod means, in the condition's words and Ready's, or None."""
    refused = serving_refusal(plan.resources, resource.spec, observed)
    if refused is None or observed.deployment is None:
        return None
    workload = observed.deployment
    message = refused.message(f"{workload.kind} {workload.meta.name}")
    if workload.replica_failure:
        message += f" (the ReplicaSet controller: {workload.replica_failure})"
    return message, f"{refused.message(f'{workload.kind} {workload.meta.name}')}: {refused.fix()}."


def revisions(observed: Observed, judgement: Judgement) -> list[RevisionStatus]:
    """The revisions that have live pods: the serving Deployment's (Stable) and a canary's, with shares."""
    canary_pods, stable_pods = split(observed.serving_pods)
    ready_total = sum(1 for pod in canary_pods + stable_pods if pod.ready)
    shown = judgement.canary.status
    rows = []
    for role, pods in (("Stable", stable_pods), ("Canary", canary_pods)):
        if not pods:
            continue
        ready = sum(1 for pod in pods if pod.ready)
        newest = max(pods, key=lambda pod: (pod.meta.created is not None, pod.meta.created, pod.meta.name))
        verdict = shown.verdict if role == "Canary" and shown is not None else None
        rows.append(
            RevisionStatus(
                role=role,
                revision=revision_of(newest),
                cache_key=newest.meta.label(labels.CACHE_KEY),
                content=newest.configmap,
                pods=len(pods),
                ready=ready,
                share=round(100 * ready / ready_total) if ready_total else 0,
                verdict=verdict,
            )
        )
    return rows


def rollout_words(resource: MultimodalDeployment, observed: Observed, judgement: Judgement) -> str:
    """The rollout in a few words, for the printer column."""
    shown, live = judgement.canary.status, observed.deployment
    if judgement.undo is not None:
        return ROLLED_BACK
    if judgement.canary.analysing and shown is not None:
        started = shown.ready_since
        if started is None:
            return "Canary starting"
        elapsed = observed.now - datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        total = resource.spec.serving.rollout.canary.analysis_seconds
        return f"Canary {min(int(elapsed.total_seconds()), total)}/{total}s"
    if observed.canary is not None and shown is not None and shown.verdict is CanaryVerdict.PASSED:
        return "Promoting"
    # Pods of two templates: a rollout (a scale-up alone has one).
    _, stable_pods = split(observed.serving_pods)
    if live is None:
        return "New"  # no serving pods were ever asked for
    if settled(live) or len({revision_of(pod) for pod in stable_pods}) < 2:
        return "Stable"
    return "Surging" if judgement.rollout.surge else "InPlace"
