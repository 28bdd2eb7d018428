"""What one reconcile found, assembled for `report` after the writes: the assess step.

From the world observed after the writes, the judgement of it and what the decision rendered: whether
the repository ConfigMap and the Deployment carry what was decided, how serving is doing (with
autoscaling: against the pods the autoscaler set, and what the autoscaler reports), and the Service's
endpoints; the spec's warnings are carried through. Decides nothing to write. Pure: imports
the api models, the plan, the facts, the judgement and the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_builder.weights_format import DownloadSucceeded
from mmd_operator.api.v1alpha1 import Endpoints, MultimodalDeployment, WeightsSource, WeightsStatus
from mmd_operator.facts import Meta, Observed
from mmd_operator.judgement import Judgement, Rendered, snapshot_key
from mmd_operator.judgement.autoscaling import autoscaling_state
from mmd_operator.judgement.availability import serving_state
from mmd_operator.judgement.placement import serving_demand
from mmd_operator.plan.launch import GRPC_PORT, HTTP_PORT, METRICS_PORT
from mmd_operator.plan.resource_plan import AnyPlan
from mmd_operator.plan.serve_plan import ServePlan
from mmd_operator.status import Findings, RepositoryState
from mmd_operator.vocabulary import labels, names


def _carries(meta: Meta | None, digest: str | None) -> bool:
    """Whether a live object carries `digest`: the operator already applied that manifest."""
    return meta is not None and digest is not None and meta.annotation(labels.APPLIED_HASH) == digest


def endpoints(instance: str, namespace: str) -> Endpoints:
    """In-cluster URLs of the Service."""
    host = f"{names.serving(instance)}.{namespace}.svc"
    return Endpoints(
        http=f"http://{host}:{HTTP_PORT}",
        grpc=f"grpc://{host}:{GRPC_PORT}",
        metrics=f"http://{host}:{METRICS_PORT}/metrics",
    )


def serve_endpoints(instance: str, namespace: str) -> Endpoints:
    """In-cluster URLs of a trtllm-serve Service: the OpenAI API and its Prometheus metrics."""
    host = f"{names.serving(instance)}.{namespace}.svc"
    return Endpoints(
        http=f"http://{host}:{HTTP_PORT}/v1", metrics=f"http://{host}:{METRICS_PORT}/prometheus/metrics"
    )


def _weights(plan: ServePlan, observed: Observed, judgement: Judgement, claim: str) -> WeightsStatus:
    """What status.weights says: the source, the resolved commit and where the snapshot lies."""
    engine = judgement.engine
    source = engine.source if engine.ready else None
    download = plan.download
    if download is None:
        pvc = plan.spec.model.source.pvc
        return WeightsStatus(
            claim=pvc.claim_name if pvc else None,
            path=plan.snapshot_path(None),
            source=WeightsSource(source) if source else None,
        )
    key = snapshot_key(observed, judgement)
    record = engine.record
    commit = observed.resolved_commit or (record.commit if isinstance(record, DownloadSucceeded) else None)
    job = observed.job if observed.job is not None and not observed.job.meta.deleting else None
    return WeightsStatus(
        repo=download.repo,
        revision=download.revision,
        commit=commit,
        download_key=download.key,
        snapshot_key=key,
        claim=claim,
        path=plan.snapshot_path(key) if key else None,
        job=job.meta.name if job is not None else None,
        source=WeightsSource(source) if source else None,
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
    engine = judgement.engine
    live_repositories = {meta.name: meta for meta in observed.repositories}
    repository = RepositoryState(
        name=rendered.repository,
        size=rendered.repository_size,
        too_large=rendered.too_large,
        applied=_carries(live_repositories.get(rendered.repository), rendered.repository_digest),
        held=engine.message if judgement.blocked else None,
    )
    live_deployment = observed.deployment
    serve = isinstance(plan, ServePlan)
    autoscaling_spec = resource.spec.serving.autoscaling
    autoscaling = None
    desired = resource.spec.serving.replicas
    if autoscaling_spec is not None:
        # The autoscaler sets the Deployment's replicas; before there is one, it starts at minReplicas.
        desired = live_deployment.replicas if live_deployment is not None else autoscaling_spec.min_replicas
        autoscaling = autoscaling_state(
            autoscaling_spec, resource.spec.serving_runtime, names.serving(instance), observed.autoscaler
        )
    serving = serving_state(
        live_deployment,
        observed.serving_pods,
        desired=desired,
        applied=live_deployment is not None and _carries(live_deployment.meta, rendered.deployment_digest),
        engine_ready=engine.ready,
        now=observed.now,
        startup_budget=float(resource.spec.serving.probes.startup_timeout_seconds),
        demand=serving_demand(resource.spec),
        nodes=observed.nodes,
        waits_for="weights" if serve else "engine",
        autoscaled_from=autoscaling_spec.min_replicas if autoscaling_spec is not None else None,
    )
    if isinstance(plan, ServePlan):
        return Findings(
            generation=int(resource.metadata.get("generation", 1)),
            serve=True,
            weights=_weights(plan, observed, judgement, claim),
            engine=engine,
            repository=repository,
            serving=serving,
            endpoints=serve_endpoints(instance, namespace),
            selector=selector_string(instance),
            warnings=warnings,
            autoscaling=autoscaling,
        )
    job = observed.job if observed.job is not None and not observed.job.meta.deleting else None
    return Findings(
        generation=int(resource.metadata.get("generation", 1)),
        cache_key=plan.cache_key,
        claim=claim,
        job=job.meta.name if job is not None else None,
        derived=plan.limits,
        engine=engine,
        repository=repository,
        serving=serving,
        endpoints=endpoints(instance, namespace),
        selector=selector_string(instance),
        warnings=warnings,
        autoscaling=autoscaling,
    )
