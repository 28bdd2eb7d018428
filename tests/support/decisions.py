"""The operator's decisions and the status they lead to, from facts given by hand: what the tests of
`desired` and `status` share (an example resource and its plan, facts, one decision and its status).

Imports the operator's pure layers and the test support for builds and examples.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from engine_builder.result_format import BuildFailed, termination_message
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import cache, triton
from mmd_operator.desired.decision import Desired, desired_state, owner_of
from mmd_operator.facts import (
    ClaimFacts,
    DeploymentFacts,
    JobFacts,
    Meta,
    Observed,
    OwnerRef,
    PodFacts,
    PodPhase,
)
from mmd_operator.judgement import judge
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.status import Findings, report
from mmd_operator.status.assessment import assess
from mmd_operator.vocabulary import hashing, labels, names
from tests.support.builds import summary
from tests.support.examples import plan_example

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
CONFIG = OperatorConfig()
UID = "11111111-2222-3333-4444-555555555555"


def example(name: str = "llava", **spec_changes: Any) -> tuple[MultimodalDeployment, TritonPlan]:
    """Engine example `name` with `spec_changes` (`section__field=value`), in namespace ml, generation 1."""
    resource, plan = plan_example(name)
    if spec_changes:
        document = resource.model_dump(by_alias=True, exclude_none=True, mode="json")
        for path, value in spec_changes.items():
            node = document["spec"]
            *parents, leaf = path.split("__")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        document["apiVersion"], document["kind"] = "serving.multimodal.dev/v1alpha1", "MultimodalDeployment"
        from mmd_operator.plan.resource_plan import plan_resource

        resource, plan = plan_resource(document)
    metadata = {**resource.metadata, "namespace": "ml", "uid": UID, "generation": 1}
    return resource.model_copy(update={"metadata": metadata}), plan


def meta(name: str, *, owners: tuple[OwnerRef, ...] = (), applied: str | None = None, **more: Any) -> Meta:
    annotations = ((labels.APPLIED_HASH, applied),) if applied else ()
    return Meta(name=name, uid=f"uid-{name}", owners=owners, annotations=annotations, **more)


def bound_claim(*, owners: tuple[OwnerRef, ...] = (), retention: str = "Retain") -> ClaimFacts:
    annotations = (("serving.multimodal.dev/retention", retention),)
    return ClaimFacts(
        meta=Meta(name="mmd-engine-cache", uid="uid-claim", owners=owners, annotations=annotations),
        phase="Bound",
        managed=True,
    )


ME = OwnerRef(name="llava", uid=UID)
OTHER = OwnerRef(name="llava-b", uid="other-uid")


@dataclasses.dataclass(frozen=True)
class Decided(Desired):
    """A decision and the findings the status layer assesses in the same world (no writes between)."""

    findings: Findings | None = None


def decide(resource: MultimodalDeployment, plan: TritonPlan, previous: Any = None, **facts: Any) -> Decided:
    observed = Observed(now=NOW, **{"claim": bound_claim(), **facts})
    generation = int(resource.metadata.get("generation", 1))
    judged = judge(plan, observed, previous, generation, resource.spec)
    decision = desired_state(resource, plan, observed, judged, config=CONFIG)
    claim = cache.claim_name(resource, CONFIG)
    findings = assess(resource, plan, observed, judged, decision.rendered, claim=claim)
    fields = {field.name: getattr(decision, field.name) for field in dataclasses.fields(decision)}
    return Decided(**fields, findings=findings)


def kinds(decision: Desired) -> list[str]:
    """The kinds a decision applies, sorted."""
    return sorted(manifest["kind"] for manifest in decision.apply)


def status_of(decision: Decided, previous: Any = None) -> Any:
    assert decision.findings is not None
    return report(decision.findings, previous=previous, now=NOW).status


def condition(status: Any, kind: str) -> Any:
    return next(c for c in status.conditions if c.type == kind)


def recipe_of(resource: MultimodalDeployment, plan: TritonPlan) -> str:
    """The build recipe annotation of the Job for `resource`."""
    job = triton.build_job(owner_of(resource, CONFIG), plan)
    return str(job["metadata"]["annotations"][labels.BUILD_RECIPE])


def failed_build(plan: TritonPlan, resource: MultimodalDeployment | None = None) -> tuple[JobFacts, PodFacts]:
    """A build Job that failed in its build-llm step, and its pod."""
    annotation = recipe_of(resource or example()[0], plan)
    job = JobFacts(
        meta=Meta(
            name=names.build_job(plan.cache_key, "mmd-engine-cache"),
            uid="uid-job",
            owners=(ME,),
            annotations=((labels.BUILD_RECIPE, annotation),),
        ),
        failed=True,
        failure="BackoffLimitExceeded: Job has reached the specified backoff limit",
    )
    failure = BuildFailed(
        cache_key=plan.cache_key, step="build-llm", exit_code=1, reason="CUDA out of memory"
    )
    pod = PodFacts(
        meta=meta("build-pod", created=NOW),
        phase=PodPhase.FAILED,
        termination_message=termination_message(failure),
        exit_code=1,
    )
    return job, pod


def served(resource: MultimodalDeployment, plan: TritonPlan) -> dict[str, Any]:
    """Facts of a resource whose engine is built and whose repository ConfigMap is applied."""
    configmap = decide(resource, plan, artifact=summary(plan.cache_key)).manifest("ConfigMap")
    assert configmap is not None
    repository = meta(configmap["metadata"]["name"], owners=(ME,), applied=hashing.applied_hash(configmap))
    return {"artifact": summary(plan.cache_key), "configmaps": (repository,)}


def live_deployment(
    resource: MultimodalDeployment, plan: TritonPlan, *, replicas: int = 1, ready: int | None = None
) -> DeploymentFacts:
    """The Deployment the operator applied for this spec, rolled out, with `ready` pods ready."""
    ready = replicas if ready is None else ready
    return DeploymentFacts(
        meta=meta("llava", applied=hashing.applied_hash(deployment_of(resource, plan))),
        generation=1,
        observed_generation=1,
        replicas=replicas,
        status_replicas=replicas,
        updated_replicas=replicas,
        ready_replicas=ready,
        available_replicas=ready,
    )


def deployment_of(resource: MultimodalDeployment, plan: TritonPlan) -> dict[str, Any]:
    """The Deployment the operator applies for `resource` once its engine is built."""
    decision = decide(resource, plan, artifact=summary(plan.cache_key))
    manifest = decision.manifest("Deployment")
    assert manifest is not None
    return manifest
