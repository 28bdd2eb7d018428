"""The judgement of one reconcile: the artifact, whether its Job waits, how a change replaces the pods.

The artifact is the engine or the weights; its Job may wait on a missing reference, or on a ResourceQuota
without room for its pod (`quotas`: then that is what the artifact's state says); a change replaces
the serving pods beside the old ones or in place (`rollout`); a new revision that cannot start is undone
to the last one whose every pod was ready (`revisions`); with strategy Canary a new revision is judged
on one pod first (`canary`).

`judge` looks the runtime's artifact rules up by the plan's runtime (`ARTIFACT_STATES`: one row per
runtime) and reads the observed facts with them once; `desired` decides what to write from the judgement
and `status` reports it. `Rendered` is what the decision built that the status reports on. Pure: imports
the api models, the facts, the plan and this package's runtime modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mmd_operator.api.v1alpha1 import (
    CanaryVerdict,
    MultimodalDeploymentSpec,
    MultimodalDeploymentStatus,
    ServingRevision,
)
from mmd_operator.facts import Observed, Reading
from mmd_operator.judgement import triton, trtllm_serve
from mmd_operator.judgement.artifact import ArtifactState, JobWords, not_ready
from mmd_operator.judgement.canary import NEW_VERDICT_SECONDS, Canary, canary_state
from mmd_operator.judgement.placement import build_demand
from mmd_operator.judgement.quotas import QUOTA_EXCEEDED, job_refusal
from mmd_operator.judgement.revisions import Undo, stable_revision, undo
from mmd_operator.judgement.rollout import CONDITION as ROLLOUT
from mmd_operator.judgement.rollout import Rollout, rollout_state
from mmd_operator.knowledge import Runtime
from mmd_operator.plan.resource_plan import AnyPlan

# Each runtime's artifact: how its state is read (plan, observed, previous status, generation, the build
# pod's GPU demand), and its words. A third runtime is one module and one row here.
ARTIFACT_STATES: Mapping[Runtime, Callable[..., ArtifactState[Any, Any]]] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: triton.engine_state, Runtime.TRTLLM_SERVE: trtllm_serve.weights_state}
)
ARTIFACT_WORDS: Mapping[Runtime, JobWords] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: triton.WORDS, Runtime.TRTLLM_SERVE: trtllm_serve.WORDS}
)


@dataclass(frozen=True)
class Judgement:
    """The artifact of the resource's plan, whether its Job waits, and how the serving pods are replaced."""

    artifact: ArtifactState[Any, Any]
    # A source claim (or the LeaderWorkerSet API) the Job needs is missing: nothing is created until it
    # appears. (A missing token Secret is reported while the Job's pod waits for it.)
    blocked: bool
    rollout: Rollout
    # The last revision whose every pod was ready, and the revision to undo, if any (`revisions`).
    stable: ServingRevision | None = None
    undo: Undo | None = None
    # With strategy Canary: the new revision's analysis (`canary`).
    canary: Canary = field(default_factory=Canary)


def judge(
    plan: AnyPlan,
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    generation: int,
    spec: MultimodalDeploymentSpec,
    *,
    retry: str | None = None,
    reading: Reading | None = None,
) -> Judgement:
    """Judge the world `observed` for `plan`, the plan of `spec`; `previous` is the last status written.

    `retry` is the resource's retry annotation (`revisions.RETRY_ANNOTATION`), if it has one; `reading`
    what Prometheus said of the serving pods over a canary's analysis (`canary.analysis_window`).
    """
    artifact = ARTIFACT_STATES[plan.runtime](plan, observed, previous, generation, build_demand(spec))
    refused = job_refusal(plan.resources, spec, observed)
    if refused is not None and not (artifact.ready or artifact.failed or artifact.retry) and observed.job:
        # The Job's pod is never created: the quota, not the Job, is what to look at.
        message = refused.message(f"Job {observed.job.meta.name}")
        artifact = not_ready(QUOTA_EXCEEDED, message, f"{message}: {refused.fix()}.")
    blocked = bool(observed.missing) and not artifact.ready and observed.job is None
    shown = next((c.reason for c in previous.conditions if c.type == ROLLOUT), None) if previous else None
    rollout = rollout_state(
        spec, observed.deployment, observed.serving_pods, now=observed.now, nodes=observed.nodes, shown=shown
    )
    shown_stable = previous.stable_revision if previous is not None else None
    undone = undo(
        previous,
        generation=generation,
        retry=retry,
        pods=observed.serving_pods,
        now=observed.now,
        startup_budget=float(spec.serving.probes.startup_timeout_seconds),
    )
    stable = stable_revision(shown_stable, observed.deployment, observed.serving_pods)
    canary = Canary(status=previous.canary if previous is not None else None)
    if spec.serving.rollout.strategy == "Canary":
        canary = canary_state(
            spec.serving.rollout.canary,
            previous,
            generation=generation,
            retry=retry,
            runtime=plan.runtime,
            canary=observed.canary,
            pods=observed.serving_pods,
            reading=reading,
            stable=stable,
            now=observed.now,
        )
    if undone is None:
        undone = canary.undo
    elif canary.analysing and canary.status is not None:
        # The canary's pod cannot start: undone as any revision that cannot, and the analysis says so.
        failed = canary.status.model_copy(update={"verdict": CanaryVerdict.FAILED, "message": undone.message})
        canary = Canary(status=failed, undo=undone, keep=True, recheck_after=NEW_VERDICT_SECONDS)
    return Judgement(
        artifact=artifact, blocked=blocked, rollout=rollout, stable=stable, undo=undone, canary=canary
    )


@dataclass(frozen=True)
class Rendered:
    """What the decision built that the status reports on: the content ConfigMap and the Deployment."""

    # The ConfigMap of the pods' configuration: the model repository, or trtllm-serve's `--config`.
    configmap: str
    configmap_size: int
    # Over the ConfigMap size limit: not applied.
    too_large: bool
    # The digests their manifests carry once applied (None: no Deployment is wanted yet).
    configmap_digest: str
    deployment_digest: str | None
