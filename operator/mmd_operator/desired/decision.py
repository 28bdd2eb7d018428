"""What should exist for one MultimodalDeployment, decided from its plan and what was observed.

`desired_state` is the operator's whole decision, pure: the manifests to apply (each stamped with the
digest of its content), the shared children this resource must join or leave as an owner, the objects to
delete, and a Job's result to record in the engine index. It decides from the judgement of the world
(`mmd_operator.judgement`); what the status says is the status layer's (`status.assess`). The runtime's
own children come from its module, looked up once by the plan's runtime (`RUNTIMES`): `manifests`, what
`mmctl render` writes, builds from the same list.

The rules, in the order the code follows them:

- The engine-cache claim (when the runtime's artifact lives there) is created when it does not exist; a
  claim the operator created with retention Delete has every user as an owner, so it goes with the last.
- An artifact in the engine index needs no Job. Otherwise the artifact's Job (a build, a download) is
  created once (nothing is created while a source claim the spec names is missing; a missing token
  Secret is reported while the Job's pod waits for it); every user joins it as an owner, and leaves it
  when its spec moves to another key (the last one out deletes it, or passes it to a resource that
  wants it and has not joined yet: the writer asks the reconcile for one). A Job that failed runs again
  only after the spec changed since the failure was reported, or at once when the failed Job was made from
  another recipe (pod settings, retries) than the spec's now.
- The content ConfigMap is applied unless it is over the ConfigMap size limit. Superseded ones are
  deleted once neither the Deployment nor any pod uses them.
- The Deployment is applied only once the artifact is ready: until then a running Deployment keeps
  serving the old one, untouched. It surges by one pod, or rolls in place when the spec says so or the
  judgement found no room for the surge pod and the status says so already (then for the rest of
  that rollout). A revision that cannot start is undone: the Deployment gets the last Ready revision's
  pod template back, once, and is then left as it is until the spec or the retry annotation changes;
  that revision's content ConfigMap is kept meanwhile. With strategy Canary a change of a Deployment
  whose revision was Ready goes first to a canary Deployment of one pod (the serving Deployment is left
  as it is) until the judgement passes it: then the serving Deployment takes it, and the canary serves on
  until that rollout is over; a failed canary is deleted and the stable revision held. The Service is
  applied from the start, and so is the NetworkPolicy while the runtime wants one; once it no longer
  does, the policy is deleted.
- With `serving.autoscaling` the HorizontalPodAutoscaler is applied with the Deployment, whose manifest
  then has no `replicas`; the first such apply is preceded by the hand-over of `replicas` while the
  operator still owns it (`scaling`). Without the section the autoscaler is deleted. The
  PodDisruptionBudget is applied while more than one serving pod can run, and deleted when not.

Pure: imports the api models, the plan, the config, the facts, the judgement and the vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from engine_builder.result_format import BuildSucceeded
from engine_builder.weights_format import DownloadSucceeded
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import cache, gpu_claims, scaling, serving, triton, trtllm_serve
from mmd_operator.desired.children import Children, Manifest, Owner
from mmd_operator.facts import DeploymentFacts, Meta, Observed
from mmd_operator.judgement import Judgement, Rendered
from mmd_operator.judgement.revisions import revision_of, settled
from mmd_operator.knowledge import Runtime
from mmd_operator.plan.resource_plan import AnyPlan
from mmd_operator.vocabulary import hashing, kinds, labels, ownership
from mmd_operator.vocabulary.ownership import ObjectKey

# Each runtime's children. A third runtime is one module and one row here.
RUNTIMES: Mapping[Runtime, Callable[..., Children]] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: triton.children, Runtime.TRTLLM_SERVE: trtllm_serve.children}
)


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
    # Secrets to create when missing, with data the writer makes (a group's SSH keys), never updated.
    generated_secrets: tuple[dict[str, Any], ...] = ()

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
    generated_secrets: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Case:
    """One resource's decision inputs, and its children as its runtime makes them."""

    owned: Owner
    children: Children
    observed: Observed
    judgement: Judgement
    # The last Ready revision's pod template, when this reconcile undoes a revision.
    stable_template: Manifest | None = None


def owner_of(resource: MultimodalDeployment, config: OperatorConfig) -> Owner:
    """`resource` with where its children go."""
    return Owner(
        resource=resource,
        namespace=str(resource.metadata.get("namespace", "default")),
        owner=ownership.owner_of(resource),
        claim=cache.claim_name(resource, config),
        config=config,
    )


def children_of(owned: Owner, plan: AnyPlan) -> Children:
    """The children `plan`'s runtime makes for `owned`'s resource.

    Their GPUs asked for by claim (templates, and pods that use them) when the spec says so.
    """
    children = RUNTIMES[plan.runtime](owned, plan)
    claim = owned.resource.spec.gpus.resource_claim
    if claim is None:
        return children
    asked = (plan.resources.job, plan.resources.serving, plan.resources.worker)
    templates = {
        count: gpu_claims.claim_template(
            claim,
            instance=owned.instance,
            namespace=owned.namespace,
            owner=owned.owner,
            gpus=count,
            kind=plan.gpu_kind,
        )
        for count in sorted({pod.gpus for pod in asked if pod is not None and pod.gpus})
    }
    names = {count: template["metadata"]["name"] for count, template in templates.items()}
    job, deployment = children.job, children.deployment
    return dataclasses.replace(
        children,
        job=(lambda: gpu_claims.claimed(job(), names)) if job is not None else None,
        deployment=lambda location: gpu_claims.claimed(deployment(location), names),
        claim_templates=tuple(templates.values()),
    )


def _engine_cache_claim(case: _Case, writes: _Writes) -> None:
    """Create the claim, or join it as an owner when it goes with its last user."""
    owned, claim = case.owned, case.observed.claim
    if case.judgement.blocked:
        return
    if claim is None:
        manifest = cache.engine_cache_claim(
            owned.resource, namespace=owned.namespace, config=owned.config, owner=owned.owner
        )
        writes.apply.append(hashing.stamped(manifest))
    elif (
        claim.managed
        and claim.meta.annotation(cache.CLAIM_RETENTION) == "Delete"
        and not claim.meta.owned_by(owned.owner.uid)
    ):
        writes.join.append(ObjectKey.of(kinds.CLAIM, owned.claim))


def _artifact_job(case: _Case, writes: _Writes, name: str, wanted_job: Callable[[], Manifest]) -> None:
    """The Job `name` (shared by every resource with its key): create, join or retry it."""
    observed, artifact, owner = case.observed, case.judgement.artifact, case.owned.owner
    job = observed.job if observed.job is not None and not observed.job.meta.deleting else None
    job_leaving = observed.job is not None and observed.job.meta.deleting
    job_key = ObjectKey.of(kinds.JOB, name)

    # A Job that failed with another recipe than the spec's now (pod settings, retries; the key covers
    # neither), say one the fix of its spec raced, is tried again with this one.
    other_recipe = (
        job is not None
        and job.failed
        and job.meta.annotation(labels.BUILD_RECIPE)
        != wanted_job()["metadata"]["annotations"][labels.BUILD_RECIPE]
    )
    if job is not None and (artifact.retry or other_recipe):
        writes.delete.append(job_key)
    elif job is not None and not job.meta.owned_by(owner.uid):
        writes.join.append(job_key)
    elif job is None and not job_leaving and not artifact.ready and not observed.missing:
        writes.apply.append(hashing.stamped(wanted_job()))


def _serving(case: _Case, writes: _Writes) -> Rendered:
    """The content ConfigMap, the Deployment once the artifact is ready, the Service and the policy."""
    children, blocked, artifact = case.children, case.judgement.blocked, case.judgement.artifact
    configmap = hashing.stamped(children.configmap)
    size = serving.configmap_size(configmap["data"])
    too_large = size > serving.CONFIGMAP_DATA_LIMIT
    if not too_large and not blocked:
        writes.apply.append(configmap)
    deployment = None
    undo, live = case.judgement.undo, case.observed.deployment
    held = undo is not None and not undo.write and live is not None
    trial = False
    if artifact.ready and not too_large and not held and not blocked:
        wanted = children.deployment(artifact.location)
        owned = case.owned
        writes.generated_secrets += serving.workload_of(wanted["kind"]).secrets(
            owned.instance, owned.namespace, owned.owner
        )
        trial = _on_trial(case, serving.template_digest(wanted))
        if trial:
            writes.apply.append(hashing.stamped(serving.canary_deployment(wanted)))
        else:
            rollout = case.judgement.rollout
            if rollout.in_place_now:
                wanted = serving.rolling_in_place(wanted, rollout.message)
            if undo is not None and case.stable_template is not None:
                wanted = serving.undone(wanted, case.stable_template, undo.failed)
            deployment = hashing.stamped(wanted)
            writes.apply.append(deployment)
    retired = case.observed.retired_workload
    if retired is not None and not retired.meta.deleting and retired.meta.owned_by(case.owned.owner.uid):
        # The spec changed how many pods a replica takes: the workload of the other kind goes.
        writes.delete.append(ObjectKey.of(_kind_of(retired), retired.meta.name))
    canary = case.observed.canary
    kept = trial or _promoting(case) or case.judgement.canary.keep
    if canary is not None and not canary.meta.deleting and not kept:
        writes.delete.append(ObjectKey.of(_kind_of(canary), canary.meta.name))
    if not blocked:
        writes.apply.append(hashing.stamped(children.service))
    policy = children.network_policy
    if policy is not None and not blocked:
        writes.apply.append(hashing.stamped(policy))
    _delete_unwanted(case, writes, policy, case.observed.network_policy, kinds.NETWORK_POLICY)
    _scaling(case, writes, deployment)
    return Rendered(
        configmap=configmap["metadata"]["name"],
        configmap_size=size,
        too_large=too_large,
        configmap_digest=str(hashing.applied_hash(configmap)),
        deployment_digest=hashing.applied_hash(deployment)
        if deployment
        else live.meta.annotation(labels.APPLIED_HASH)
        if (held or trial) and live is not None
        else None,
    )


def _kind_of(workload: DeploymentFacts) -> kinds.ApiKind:
    return serving.workload_of(workload.kind).kind


def _on_trial(case: _Case, revision: str) -> bool:
    """Whether the new `revision` runs as a canary, the serving Deployment left on the stable one.

    With strategy Canary, for a change of a Deployment whose revision was Ready, until the canary passed
    (then the Deployment takes it) or failed (then the judgement holds the stable revision).
    """
    judged, live = case.judgement, case.observed.deployment
    return (
        case.owned.resource.spec.serving.rollout.strategy == "Canary"
        and live is not None
        and judged.stable is not None
        and judged.undo is None
        and live.template_digest is not None
        and live.template_digest != revision
        and not judged.canary.passed(revision)
    )


def _promoting(case: _Case) -> bool:
    """Whether the serving Deployment is yet to finish rolling to the revision its canary passed.

    Until it has, the canary pod serves on beside it.
    """
    canary, live = case.observed.canary, case.observed.deployment
    if canary is None or canary.template_digest is None or live is None:
        return False
    rolled = live.template_digest == canary.template_digest and settled(live)
    return case.judgement.canary.passed(canary.template_digest) and not rolled


def _delete_unwanted(
    case: _Case, writes: _Writes, wanted: dict[str, Any] | None, live: Meta | None, kind: kinds.ApiKind
) -> None:
    """Delete the resource's own `live` child of `kind` when nothing of that kind is `wanted` any more."""
    if wanted is None and live is not None and live.owned_by(case.owned.owner.uid) and not live.deleting:
        writes.delete.append(ObjectKey.of(kind, live.name))


def _scaling(case: _Case, writes: _Writes, deployment: dict[str, Any] | None) -> None:
    """The autoscaler (with `deployment`, when it is applied), the disruption budget, and the hand-over.

    The hand-over of `replicas` precedes the first apply of the Deployment without them.
    """
    owned, observed = case.owned, case.observed
    resource, namespace, owner = owned.resource, owned.namespace, owned.owner
    autoscaler = scaling.horizontal_pod_autoscaler(resource, namespace=namespace, owner=owner)
    live = observed.deployment
    if autoscaler is not None and deployment is not None:
        changed = live is None or live.meta.annotation(labels.APPLIED_HASH) != hashing.applied_hash(
            deployment
        )
        if changed and live is not None and (owned.config.field_manager, "Apply") in live.replicas_managers:
            writes.handover = scaling.replicas_handover(
                _kind_of(live), live.meta.name, namespace, live.replicas
            )
        writes.apply.append(hashing.stamped(autoscaler))
    live_autoscaler = observed.autoscaler.meta if observed.autoscaler is not None else None
    _delete_unwanted(case, writes, autoscaler, live_autoscaler, kinds.HORIZONTAL_POD_AUTOSCALER)
    budget = scaling.pod_disruption_budget(resource, namespace=namespace, owner=owner)
    if budget is not None and not case.judgement.blocked:
        writes.apply.append(hashing.stamped(budget))
    _delete_unwanted(case, writes, budget, observed.disruption_budget, kinds.POD_DISRUPTION_BUDGET)


def _superseded_configmaps(case: _Case, writes: _Writes, current: str) -> None:
    """Delete content ConfigMaps that neither the Deployment nor any pod uses any more."""
    observed = case.observed
    in_use = {current}
    if observed.deployment is not None and observed.deployment.configmap:
        in_use.add(observed.deployment.configmap)
    in_use |= {pod.configmap for pod in observed.serving_pods if pod.configmap}
    # The last Ready revision's, which a revision that cannot start is undone to.
    stable = case.judgement.stable
    if stable is not None and stable.content:
        in_use.add(stable.content)
    writes.delete += [
        ObjectKey.of(kinds.CONFIGMAP, meta.name)
        for meta in observed.configmaps
        if meta.name not in in_use and meta.owned_by(case.owned.owner.uid) and not meta.deleting
    ]


def _superseded_claim_templates(case: _Case, writes: _Writes) -> None:
    """Delete ResourceClaimTemplates that no workload, Job, pod or revision to go back to takes claims from.

    A template is read only when a pod is created, so one that a workload's pod template names stays. The
    last Ready revision's pods name the templates an undo would bring back; while none of them runs (an
    in-place rollout, an undo under way) nothing says which those are, and every template stays.
    """
    observed, stable = case.observed, case.judgement.stable
    if case.judgement.blocked or not observed.claim_templates:
        return
    if stable is not None and not any(
        revision_of(pod) == stable.pod_template_hash for pod in observed.serving_pods
    ):
        return
    in_use = {template["metadata"]["name"] for template in case.children.claim_templates}
    workloads = (observed.deployment, observed.canary, observed.retired_workload, observed.job)
    for named in (*workloads, *observed.serving_pods, *observed.job_pods):
        if named is not None:
            in_use.update(named.claim_templates)
    writes.delete += [
        ObjectKey.of(kinds.RESOURCE_CLAIM_TEMPLATE, meta.name)
        for meta in observed.claim_templates
        if meta.name not in in_use and meta.owned_by(case.owned.owner.uid) and not meta.deleting
    ]


def desired_state(
    resource: MultimodalDeployment,
    plan: AnyPlan,
    observed: Observed,
    judgement: Judgement,
    *,
    config: OperatorConfig,
    stable_template: Manifest | None = None,
) -> Desired:
    """Decide what should exist for `resource`, whose checked plan is `plan`, from `judgement`.

    `stable_template` is the last Ready revision's pod template, read when the judgement undoes a revision.
    """
    owned = owner_of(resource, config)
    case = _Case(
        owned=owned,
        children=children_of(owned, plan),
        observed=observed,
        judgement=judgement,
        stable_template=stable_template,
    )
    writes = _Writes()
    if case.children.uses_claim:
        _engine_cache_claim(case, writes)
    writes.leave += [ObjectKey.of(kinds.CLAIM, stale.meta.name) for stale in observed.stale_claims]
    if not judgement.blocked:
        writes.apply += [hashing.stamped(template) for template in case.children.claim_templates]
    if case.children.job is not None and case.children.job_name is not None:
        _artifact_job(case, writes, case.children.job_name, case.children.job)
    writes.leave += [ObjectKey.of(kinds.JOB, stale.meta.name) for stale in observed.stale_jobs]
    rendered = _serving(case, writes)
    _superseded_configmaps(case, writes, rendered.configmap)
    _superseded_claim_templates(case, writes)
    return Desired(
        rendered=rendered,
        apply=tuple(writes.apply),
        join=tuple(sorted(set(writes.join))),
        leave=tuple(sorted(set(writes.leave))),
        delete=tuple(sorted(set(writes.delete))),
        record=judgement.artifact.record,
        handover=writes.handover,
        generated_secrets=tuple(writes.generated_secrets),
    )


def _scaling_manifests(owned: Owner) -> list[Manifest]:
    """The autoscaler and the disruption budget, those of them the spec asks for."""
    resource, namespace, owner = owned.resource, owned.namespace, owned.owner
    wanted = (
        scaling.horizontal_pod_autoscaler(resource, namespace=namespace, owner=owner),
        scaling.pod_disruption_budget(resource, namespace=namespace, owner=owner),
    )
    return [manifest for manifest in wanted if manifest is not None]


def manifests(resource: MultimodalDeployment, plan: AnyPlan, *, config: OperatorConfig) -> list[Manifest]:
    """Every object a first apply of `resource` leads to, as if its artifact were already made.

    What `mmctl render` writes to `manifests/`: the claim and the artifact's Job (when the runtime has
    them), the content ConfigMap, the Deployment, the Service, and the NetworkPolicy,
    HorizontalPodAutoscaler and PodDisruptionBudget the spec asks for, exactly as the operator applies
    them. Where the artifact will lie is the plan's guess from the spec alone (a trtllm-serve branch is
    resolved by its Job: its snapshot path is a placeholder).
    """
    owner_uid = str(resource.metadata.get("uid", "")) or "<uid of the MultimodalDeployment>"
    resource = resource.model_copy(
        update={"metadata": {"namespace": "default", **resource.metadata, "uid": owner_uid}}
    )
    owned = owner_of(resource, config)
    children = children_of(owned, plan)
    objects: list[Manifest] = list(children.claim_templates)
    if children.uses_claim:
        claim = cache.engine_cache_claim(
            resource, namespace=owned.namespace, config=config, owner=owned.owner
        )
        objects.append(claim)
    if children.job is not None:
        objects.append(children.job())
    objects += [children.configmap, children.deployment(plan.artifact_location), children.service]
    if children.network_policy is not None:
        objects.append(children.network_policy)
    objects += _scaling_manifests(owned)
    return [hashing.stamped(manifest) for manifest in objects]


class _PlainDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, without anchors and aliases (`&id001`, `*id001`).

    A value a manifest holds twice (a probe, a volume) is written out each time: people and linters read
    aliases badly.
    """

    def ignore_aliases(self, data: Any) -> bool:
        return True


def manifest_files(
    resource: MultimodalDeployment, plan: AnyPlan, *, config: OperatorConfig
) -> dict[str, str]:
    """`manifests(...)` as YAML files named `<kind>-<name>.yaml`, for `mmctl render`."""
    return {
        f"{manifest['kind'].lower()}-{manifest['metadata']['name']}.yaml": yaml.dump(
            manifest, Dumper=_PlainDumper, sort_keys=False, width=110
        )
        for manifest in manifests(resource, plan, config=config)
    }
