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

Pure: imports the api models, the plan, the config, the facts, the judgement and the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from engine_builder.result_format import BuildSucceeded
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import engine_build, network, serving
from mmd_operator.facts import Observed
from mmd_operator.judgement import Judgement, Rendered
from mmd_operator.plan.resource_plan import ResourcePlan
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
    record: BuildSucceeded | None = None

    def manifest(self, kind: str) -> dict[str, Any] | None:
        """The manifest of `kind` to apply, if any."""
        return next((m for m in self.apply if m["kind"] == kind), None)


def desired_state(
    resource: MultimodalDeployment,
    plan: ResourcePlan,
    observed: Observed,
    judgement: Judgement,
    *,
    config: OperatorConfig,
) -> Desired:
    """Decide what should exist for `resource`, whose checked plan is `plan`, from `judgement`."""
    namespace = str(resource.metadata.get("namespace", "default"))
    owner = ownership.owner_of(resource)
    claim = engine_build.claim_name(resource, config)
    key = plan.cache_key
    apply: list[dict[str, Any]] = []
    join: list[ObjectKey] = []
    leave: list[ObjectKey] = []
    delete: list[ObjectKey] = []

    engine, blocked = judgement.engine, judgement.blocked
    if not blocked and observed.claim is None:
        apply.append(
            hashing.stamped(
                engine_build.engine_cache_claim(resource, namespace=namespace, config=config, owner=owner)
            )
        )
    elif (
        not blocked
        and observed.claim is not None
        and observed.claim.managed
        and observed.claim.meta.annotation(engine_build.CLAIM_RETENTION) == "Delete"
        and not observed.claim.meta.owned_by(owner.uid)
    ):
        join.append(ObjectKey.of(kinds.CLAIM, claim))
    leave += [ObjectKey.of(kinds.CLAIM, stale.meta.name) for stale in observed.stale_claims]

    job = observed.job if observed.job is not None and not observed.job.meta.deleting else None
    job_leaving = observed.job is not None and observed.job.meta.deleting
    job_key = ObjectKey.of(kinds.JOB, names.build_job(key, claim))

    def wanted_job() -> dict[str, Any]:
        # Built only when a Job is created or a failed one judged: most reconciles need neither.
        return engine_build.build_job(resource, plan, namespace=namespace, claim=claim, owner=owner)

    # A Job that failed with another recipe than the spec's now (pod settings, retries; the cacheKey
    # covers neither), say one the fix of its spec raced, is tried again with this one.
    other_recipe = (
        job is not None
        and job.failed
        and job.meta.annotation(labels.BUILD_RECIPE)
        != wanted_job()["metadata"]["annotations"][labels.BUILD_RECIPE]
    )
    if job is not None and (engine.retry or other_recipe):
        delete.append(job_key)
    elif job is not None and not job.meta.owned_by(owner.uid):
        join.append(job_key)
    elif job is None and not job_leaving and not engine.ready and not observed.missing:
        apply.append(hashing.stamped(wanted_job()))
    leave += [ObjectKey.of(kinds.JOB, stale.meta.name) for stale in observed.stale_jobs]

    configmap = hashing.stamped(
        serving.repository_configmap(resource, plan, namespace=namespace, owner=owner)
    )
    size = serving.repository_size(configmap["data"])
    repository_name = configmap["metadata"]["name"]
    too_large = size > serving.CONFIGMAP_DATA_LIMIT
    if not too_large and not blocked:
        apply.append(configmap)

    deployment_manifest = None
    if engine.ready and not too_large:
        deployment_manifest = hashing.stamped(
            serving.deployment(
                resource,
                plan,
                namespace=namespace,
                claim=claim,
                repository=repository_name,
                config=config,
                owner=owner,
            )
        )
        apply.append(deployment_manifest)
    if not blocked:
        apply.append(hashing.stamped(serving.service(resource, namespace=namespace, owner=owner)))
    policy = network.network_policy(resource, namespace=namespace, owner=owner)
    if policy is not None and not blocked:
        apply.append(hashing.stamped(policy))
    live_policy = observed.network_policy
    if (
        policy is None
        and live_policy is not None
        and live_policy.owned_by(owner.uid)
        and not live_policy.deleting
    ):
        delete.append(ObjectKey.of(kinds.NETWORK_POLICY, live_policy.name))

    in_use = {repository_name}
    if observed.deployment is not None and observed.deployment.repository:
        in_use.add(observed.deployment.repository)
    in_use |= {pod.repository for pod in observed.serving_pods if pod.repository}
    delete += [
        ObjectKey.of(kinds.CONFIGMAP, meta.name)
        for meta in observed.repositories
        if meta.name not in in_use and meta.owned_by(owner.uid) and not meta.deleting
    ]

    rendered = Rendered(
        repository=repository_name,
        repository_size=size,
        too_large=too_large,
        repository_digest=str(hashing.applied_hash(configmap)),
        deployment_digest=hashing.applied_hash(deployment_manifest) if deployment_manifest else None,
    )
    return Desired(
        rendered=rendered,
        apply=tuple(apply),
        join=tuple(sorted(set(join))),
        leave=tuple(sorted(set(leave))),
        delete=tuple(sorted(set(delete))),
        record=engine.record,
    )


def manifests(
    resource: MultimodalDeployment, plan: ResourcePlan, *, config: OperatorConfig
) -> list[dict[str, Any]]:
    """Every object a first apply of `resource` leads to, as if its engine were already built.

    What `mmctl render` writes to `manifests/`: the claim, the build Job, the repository ConfigMap, the
    Deployment, the Service and the NetworkPolicy if the spec asks for one, exactly as the operator
    applies them.
    """
    owner_uid = str(resource.metadata.get("uid", "")) or "<uid of the MultimodalDeployment>"
    resource = resource.model_copy(
        update={"metadata": {"namespace": "default", **resource.metadata, "uid": owner_uid}}
    )
    namespace = str(resource.metadata["namespace"])
    owner = ownership.owner_of(resource)
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
    return [hashing.stamped(manifest) for manifest in objects]


def manifest_files(
    resource: MultimodalDeployment, plan: ResourcePlan, *, config: OperatorConfig
) -> dict[str, str]:
    """`manifests(...)` as YAML files named `<kind>-<name>.yaml`, for `mmctl render`."""
    return {
        f"{manifest['kind'].lower()}-{manifest['metadata']['name']}.yaml": yaml.safe_dump(
            manifest, sort_keys=False, width=110
        )
        for manifest in manifests(resource, plan, config=config)
    }
