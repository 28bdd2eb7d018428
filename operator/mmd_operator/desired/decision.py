"""What should exist for one MultimodalDeployment, decided from its plan and what was observed.

`desired_state` is the operator's whole decision, pure: the manifests to apply (each stamped with the
digest of its content), the shared children this resource must join or leave as an owner, the objects to
delete, and a build result to record in the engine index. It decides from the judgement of the world
(`mmd_operator.judgement`); what the status says is the status layer's (`status.assess`).

The rules, in the order the code follows them:

- The engine-cache claim is created when it does not exist; a claim the operator created with retention
  Delete has every user as an owner, so it goes with the last of them.
- A cacheKey in the engine index needs no Job. Otherwise the Job of the cacheKey is created once
  (nothing is created while a Secret or a source claim the spec names is missing); every user joins it
  as an owner, and leaves it when its spec moves to another cacheKey (the last one out deletes it). A
  build that failed is built again only after the spec changed since the failure was reported, or at
  once when the failed Job was made from another recipe (pod settings, retries) than the spec's now.
- The repository ConfigMap is applied unless it is over the ConfigMap size limit. Superseded ones are
  deleted once neither the Deployment nor any pod uses them.
- The Deployment is applied only once the engine is ready: until then a running Deployment keeps
  serving the old engine, untouched. The Service is applied from the start, and so is the
  NetworkPolicy while the spec asks for one; once it no longer does, the policy is deleted.
- With `serving.autoscaling` the HorizontalPodAutoscaler is applied with the Deployment, whose manifest
  then has no `replicas`; the first such apply is preceded by the hand-over of `replicas` while the
  operator still owns it (`scaling`). Without the section the autoscaler is deleted. The
  PodDisruptionBudget is applied while more than one serving pod can run, and deleted when not.

Pure: imports the api models, the plan, the config, the facts, the judgement and the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from engine_builder.result_format import BuildSucceeded
from engine_builder.weights_format import DownloadSucceeded
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import engine_build, network, scaling, serve, serving
from mmd_operator.facts import Meta, Observed, OwnerRef
from mmd_operator.judgement import Judgement, Rendered, snapshot_key
from mmd_operator.plan.resource_plan import AnyPlan, ResourcePlan
from mmd_operator.plan.serve_plan import ServePlan
from mmd_operator.vocabulary import hashing, kinds, labels, names, ownership
from mmd_operator.vocabulary.ownership import ObjectKey


@dataclass(frozen=True)
class Desired:
    """The operator's decision for one resource."""

    rendered: Rendered
    apply: tuple[dict[str, Any], ...] = ()
    join: tuple[ObjectKey, ...] = ()
    leave: tuple[ObjectKey, ...] = ()
    delete: tuple[ObjectKey, ...] = ()
    record: BuildSucceeded | DownloadSucceeded | None = None
    # The Deployment's `replicas` alone, to apply under the handover manager before `apply` (`scaling`).
    handover: dict[str, Any] | None = None

    def manifest(self, kind: str) -> dict[str, Any] | None:
        """The manifest of `kind` to apply, if any."""
        return next((m for m in self.apply if m["kind"] == kind), None)


@dataclass
class _Writes:
    """The decision as it is made: what to apply, join, leave and delete."""

    apply: list[dict[str, Any]] = field(default_factory=list)
    join: list[ObjectKey] = field(default_factory=list)
    leave: list[ObjectKey] = field(default_factory=list)
    delete: list[ObjectKey] = field(default_factory=list)
    handover: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Case:
    """One resource's decision inputs, and what every part of the decision derives from them."""

    resource: MultimodalDeployment
    plan: AnyPlan
    observed: Observed
    judgement: Judgement
    config: OperatorConfig
    namespace: str
    owner: OwnerRef
    claim: str


def _engine_cache_claim(case: _Case, writes: _Writes) -> None:
    """Create the claim, or join it as an owner when it goes with its last user; leave stale ones."""
    claim, owner = case.observed.claim, case.owner
    if not case.judgement.blocked and claim is None:
        writes.apply.append(
            hashing.stamped(
                engine_build.engine_cache_claim(
                    case.resource, namespace=case.namespace, config=case.config, owner=owner
                )
            )
        )
    elif (
        not case.judgement.blocked
        and claim is not None
        and claim.managed
        and claim.meta.annotation(engine_build.CLAIM_RETENTION) == "Delete"
        and not claim.meta.owned_by(owner.uid)
    ):
        writes.join.append(ObjectKey.of(kinds.CLAIM, case.claim))
    writes.leave += [ObjectKey.of(kinds.CLAIM, stale.meta.name) for stale in case.observed.stale_claims]


def _build_job(case: _Case, writes: _Writes) -> None:
    """Create the cacheKey's build Job once, join or retry it, and leave the Jobs of earlier cacheKeys."""
    plan = case.plan
    assert isinstance(plan, ResourcePlan)

    def wanted_job() -> dict[str, Any]:
        # Built only when a Job is created or a failed one judged: most reconciles need neither.
        return engine_build.build_job(
            case.resource, plan, namespace=case.namespace, claim=case.claim, owner=case.owner
        )

    _shared_job(case, writes, names.build_job(plan.cache_key, case.claim), wanted_job)


def _download_job(case: _Case, writes: _Writes) -> None:
    """Create the download key's Job once, join or retry it, and leave the Jobs of earlier keys."""
    plan = case.plan
    assert isinstance(plan, ServePlan) and plan.download is not None

    def wanted_job() -> dict[str, Any]:
        return serve.download_job(
            case.resource,
            plan,
            namespace=case.namespace,
            claim=case.claim,
            owner=case.owner,
            config=case.config,
        )

    _shared_job(case, writes, names.download_job(plan.download.key, case.claim), wanted_job)


def _shared_job(case: _Case, writes: _Writes, name: str, wanted_job: Callable[[], dict[str, Any]]) -> None:
    """The Job `name` (a build or a download, shared by every resource with its key): create, join, retry."""
    observed, engine, owner = case.observed, case.judgement.engine, case.owner
    job = observed.job if observed.job is not None and not observed.job.meta.deleting else None
    job_leaving = observed.job is not None and observed.job.meta.deleting
    job_key = ObjectKey.of(kinds.JOB, name)

    # A Job that failed with another recipe than the spec's now (pod settings, retries; the cacheKey
    # covers neither), say one the fix of its spec raced, is tried again with this one.
    other_recipe = (
        job is not None
        and job.failed
        and job.meta.annotation(labels.BUILD_RECIPE)
        != wanted_job()["metadata"]["annotations"][labels.BUILD_RECIPE]
    )
    if job is not None and (engine.retry or other_recipe):
        writes.delete.append(job_key)
    elif job is not None and not job.meta.owned_by(owner.uid):
        writes.join.append(job_key)
    elif job is None and not job_leaving and not engine.ready and not observed.missing:
        writes.apply.append(hashing.stamped(wanted_job()))
    writes.leave += [ObjectKey.of(kinds.JOB, stale.meta.name) for stale in observed.stale_jobs]


def _serving(case: _Case, writes: _Writes) -> Rendered:
    """The repository ConfigMap, the Deployment once the engine is ready, the Service and the policy."""
    resource, namespace, owner, blocked = case.resource, case.namespace, case.owner, case.judgement.blocked
    plan = case.plan
    assert isinstance(plan, ResourcePlan)
    configmap = hashing.stamped(
        serving.repository_configmap(resource, plan, namespace=namespace, owner=owner)
    )
    size = serving.repository_size(configmap["data"])
    repository = configmap["metadata"]["name"]
    too_large = size > serving.CONFIGMAP_DATA_LIMIT
    if not too_large and not blocked:
        writes.apply.append(configmap)
    deployment = None
    if case.judgement.engine.ready and not too_large:
        deployment = hashing.stamped(
            serving.deployment(
                resource,
                plan,
                namespace=namespace,
                claim=case.claim,
                repository=repository,
                config=case.config,
                owner=owner,
            )
        )
        writes.apply.append(deployment)
    if not blocked:
        writes.apply.append(hashing.stamped(serving.service(resource, namespace=namespace, owner=owner)))
    policy = network.network_policy(resource, namespace=namespace, owner=owner)
    if policy is not None and not blocked:
        writes.apply.append(hashing.stamped(policy))
    _delete_unwanted(case, writes, policy, case.observed.network_policy, kinds.NETWORK_POLICY)
    _scaling(case, writes, deployment)
    return Rendered(
        repository=repository,
        repository_size=size,
        too_large=too_large,
        repository_digest=str(hashing.applied_hash(configmap)),
        deployment_digest=hashing.applied_hash(deployment) if deployment else None,
    )


def _serve_serving(case: _Case, writes: _Writes) -> Rendered:
    """The config ConfigMap, the Deployment once the weights are ready, the Service and the policy."""
    resource, namespace, owner, blocked = case.resource, case.namespace, case.owner, case.judgement.blocked
    plan = case.plan
    assert isinstance(plan, ServePlan)
    configmap = hashing.stamped(serve.config_configmap(resource, plan, namespace=namespace, owner=owner))
    name = configmap["metadata"]["name"]
    if not blocked:
        writes.apply.append(configmap)
    deployment = None
    if case.judgement.engine.ready:
        deployment = hashing.stamped(
            serve.deployment(
                resource,
                plan,
                namespace=namespace,
                claim=case.claim,
                snapshot_key=snapshot_key(case.observed, case.judgement),
                configmap=name,
                owner=owner,
            )
        )
        writes.apply.append(deployment)
    if not blocked:
        writes.apply.append(hashing.stamped(serve.service(resource, namespace=namespace, owner=owner)))
        writes.apply.append(hashing.stamped(serve.network_policy(resource, namespace=namespace, owner=owner)))
    _scaling(case, writes, deployment)
    return Rendered(
        repository=name,
        repository_size=serving.repository_size(configmap["data"]),
        too_large=False,
        repository_digest=str(hashing.applied_hash(configmap)),
        deployment_digest=hashing.applied_hash(deployment) if deployment else None,
    )


def _delete_unwanted(
    case: _Case, writes: _Writes, wanted: dict[str, Any] | None, live: Meta | None, kind: kinds.ApiKind
) -> None:
    """Delete the resource's own `live` child of `kind` when nothing of that kind is `wanted` any more."""
    if wanted is None and live is not None and live.owned_by(case.owner.uid) and not live.deleting:
        writes.delete.append(ObjectKey.of(kind, live.name))


def _scaling(case: _Case, writes: _Writes, deployment: dict[str, Any] | None) -> None:
    """The autoscaler (with `deployment`, when it is applied), the disruption budget, and the hand-over.

    The hand-over of `replicas` precedes the first apply of the Deployment without them.
    """
    resource, namespace, owner, observed = case.resource, case.namespace, case.owner, case.observed
    autoscaler = scaling.horizontal_pod_autoscaler(resource, namespace=namespace, owner=owner)
    live = observed.deployment
    if autoscaler is not None and deployment is not None:
        changed = live is None or live.meta.annotation(labels.APPLIED_HASH) != hashing.applied_hash(
            deployment
        )
        if changed and live is not None and (case.config.field_manager, "Apply") in live.replicas_managers:
            writes.handover = scaling.replicas_handover(live.meta.name, namespace, live.replicas)
        writes.apply.append(hashing.stamped(autoscaler))
    live_autoscaler = observed.autoscaler.meta if observed.autoscaler is not None else None
    _delete_unwanted(case, writes, autoscaler, live_autoscaler, kinds.HORIZONTAL_POD_AUTOSCALER)
    budget = scaling.pod_disruption_budget(resource, namespace=namespace, owner=owner)
    if budget is not None and not case.judgement.blocked:
        writes.apply.append(hashing.stamped(budget))
    _delete_unwanted(case, writes, budget, observed.disruption_budget, kinds.POD_DISRUPTION_BUDGET)


def _superseded_repositories(case: _Case, writes: _Writes, repository: str) -> None:
    """Delete repository ConfigMaps that neither the Deployment nor any pod uses any more."""
    observed = case.observed
    in_use = {repository}
    if observed.deployment is not None and observed.deployment.repository:
        in_use.add(observed.deployment.repository)
    in_use |= {pod.repository for pod in observed.serving_pods if pod.repository}
    writes.delete += [
        ObjectKey.of(kinds.CONFIGMAP, meta.name)
        for meta in observed.repositories
        if meta.name not in in_use and meta.owned_by(case.owner.uid) and not meta.deleting
    ]


def desired_state(
    resource: MultimodalDeployment,
    plan: AnyPlan,
    observed: Observed,
    judgement: Judgement,
    *,
    config: OperatorConfig,
) -> Desired:
    """Decide what should exist for `resource`, whose checked plan is `plan`, from `judgement`."""
    case = _Case(
        resource=resource,
        plan=plan,
        observed=observed,
        judgement=judgement,
        config=config,
        namespace=str(resource.metadata.get("namespace", "default")),
        owner=ownership.owner_of(resource),
        claim=engine_build.claim_name(resource, config),
    )
    writes = _Writes()
    if isinstance(plan, ServePlan):
        if plan.download is not None:
            _engine_cache_claim(case, writes)
            _download_job(case, writes)
        else:  # served from the source claim: no cache claim, no Job
            writes.leave += [ObjectKey.of(kinds.CLAIM, c.meta.name) for c in observed.stale_claims]
            writes.leave += [ObjectKey.of(kinds.JOB, j.meta.name) for j in observed.stale_jobs]
        rendered = _serve_serving(case, writes)
    else:
        _engine_cache_claim(case, writes)
        _build_job(case, writes)
        rendered = _serving(case, writes)
    _superseded_repositories(case, writes, rendered.repository)
    return Desired(
        rendered=rendered,
        apply=tuple(writes.apply),
        join=tuple(sorted(set(writes.join))),
        leave=tuple(sorted(set(writes.leave))),
        delete=tuple(sorted(set(writes.delete))),
        record=judgement.engine.record,
        handover=writes.handover,
    )


def _serve_manifests(
    resource: MultimodalDeployment,
    plan: ServePlan,
    *,
    namespace: str,
    owner: OwnerRef,
    config: OperatorConfig,
) -> list[dict[str, Any]]:
    claim = engine_build.claim_name(resource, config)
    configmap = serve.config_configmap(resource, plan, namespace=namespace, owner=owner)
    objects = []
    if plan.download is not None:
        objects += [
            engine_build.engine_cache_claim(resource, namespace=namespace, config=config, owner=owner),
            serve.download_job(resource, plan, namespace=namespace, claim=claim, owner=owner, config=config),
        ]
    # A commit is known offline; a branch is resolved by the Job, so its snapshot path is a placeholder.
    known = plan.cache_key if plan.download_commit is not None else None
    return [
        *objects,
        configmap,
        serve.deployment(
            resource,
            plan,
            namespace=namespace,
            claim=claim,
            snapshot_key=known,
            configmap=configmap["metadata"]["name"],
            owner=owner,
        ),
        serve.service(resource, namespace=namespace, owner=owner),
        serve.network_policy(resource, namespace=namespace, owner=owner),
        *_scaling_manifests(resource, namespace=namespace, owner=owner),
    ]


def _scaling_manifests(
    resource: MultimodalDeployment, *, namespace: str, owner: OwnerRef
) -> list[dict[str, Any]]:
    """The autoscaler and the disruption budget, those of them the spec asks for."""
    wanted = (
        scaling.horizontal_pod_autoscaler(resource, namespace=namespace, owner=owner),
        scaling.pod_disruption_budget(resource, namespace=namespace, owner=owner),
    )
    return [manifest for manifest in wanted if manifest is not None]


def manifests(
    resource: MultimodalDeployment, plan: AnyPlan, *, config: OperatorConfig
) -> list[dict[str, Any]]:
    """Every object a first apply of `resource` leads to, as if its engine were already built.

    What `mmctl render` writes to `manifests/`: the claim, the build Job, the repository ConfigMap, the
    Deployment, the Service, and the NetworkPolicy, HorizontalPodAutoscaler and PodDisruptionBudget if
    the spec asks for them, exactly as the operator applies them.
    """
    owner_uid = str(resource.metadata.get("uid", "")) or "<uid of the MultimodalDeployment>"
    resource = resource.model_copy(
        update={"metadata": {"namespace": "default", **resource.metadata, "uid": owner_uid}}
    )
    namespace = str(resource.metadata["namespace"])
    owner = ownership.owner_of(resource)
    if isinstance(plan, ServePlan):
        served = _serve_manifests(resource, plan, namespace=namespace, owner=owner, config=config)
        return [hashing.stamped(manifest) for manifest in served]
    claim = engine_build.claim_name(resource, config)
    configmap = serving.repository_configmap(resource, plan, namespace=namespace, owner=owner)
    objects = [
        engine_build.engine_cache_claim(resource, namespace=namespace, config=config, owner=owner),
        engine_build.build_job(resource, plan, namespace=namespace, claim=claim, owner=owner),
        configmap,
        serving.deployment(
            resource,
            plan,
            namespace=namespace,
            claim=claim,
            repository=configmap["metadata"]["name"],
            config=config,
            owner=owner,
        ),
        serving.service(resource, namespace=namespace, owner=owner),
    ]
    policy = network.network_policy(resource, namespace=namespace, owner=owner)
    if policy is not None:
        objects.append(policy)
    objects += _scaling_manifests(resource, namespace=namespace, owner=owner)
    return [hashing.stamped(manifest) for manifest in objects]


def manifest_files(
    resource: MultimodalDeployment, plan: AnyPlan, *, config: OperatorConfig
) -> dict[str, str]:
    """`manifests(...)` as YAML files named `<kind>-<name>.yaml`, for `mmctl render`."""
    return {
        f"{manifest['kind'].lower()}-{manifest['metadata']['name']}.yaml": yaml.safe_dump(
            manifest, sort_keys=False, width=110
        )
        for manifest in manifests(resource, plan, config=config)
    }
