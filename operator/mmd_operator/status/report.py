"""The status a resource shows: phase, conditions with classified reasons, and the events to post.

`assessment.assess` gathers what one reconcile found after its writes; `report` turns it (the spec's
problems or its plan, the artifact, the content ConfigMap, the serving pods, the spec's warnings) into the
status subresource and the Kubernetes Events of any phase change, new failure, new warnings or change of
the number of pods the autoscaler wants. The runtime's words (its conditions' names, the phase while its
artifact is made) come from one table (`RUNTIME_WORDS`). Warnings are a
note in `status.warnings` and never hold Ready back. Ready is True only when every condition is, for
this generation, with the rollout finished; while it is not, its message is one sentence a person acts
on (what is wrong, and what to do or where to look), and the condition it comes from keeps the
details. A condition keeps its lastTransitionTime while its
status does not change, so an unchanged world gives an identical status and the operator writes
nothing. Decides no write. Pure: imports the api models and the judgement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from mmd_operator.api.v1alpha1 import (
    MAX_WARNINGS,
    WARNING_MAX_LENGTH,
    AutoscalingStatus,
    CanaryVerdict,
    Condition,
    ConditionStatus,
    DerivedLimits,
    Endpoints,
    MultimodalDeploymentStatus,
    Phase,
    RevisionStatus,
    RollbackStatus,
    ServingRevision,
)
from mmd_operator.api.v1alpha1.status import MAX_GROUPS, GroupStatus, PodResources
from mmd_operator.api.validation import Problem
from mmd_operator.facts import GpuKind
from mmd_operator.judgement.artifact import ArtifactState
from mmd_operator.judgement.autoscaling import AUTOSCALING, AutoscalingState
from mmd_operator.judgement.availability import ServingState
from mmd_operator.judgement.canary import CONDITION as CANARY
from mmd_operator.judgement.canary import Canary
from mmd_operator.judgement.groups import GroupState
from mmd_operator.judgement.judge import ARTIFACT_WORDS
from mmd_operator.judgement.progress import PROGRESS_POLL_SECONDS
from mmd_operator.judgement.revisions import ROLLED_BACK, Undo
from mmd_operator.judgement.rollout import CONDITION as ROLLOUT
from mmd_operator.judgement.rollout import SURGE_UNSCHEDULABLE, Rollout
from mmd_operator.knowledge import Runtime

VALIDATED = "Validated"
AVAILABLE = "Available"
READY = "Ready"
# The runtime is frozen upstream (the engine runtime: its last release), with the way off it.
FROZEN = "RuntimeFrozen"
# The two abnormal-true conditions of the kstatus convention, which Flux, kpt and Argo CD read: True while
# the operator still works towards Ready, or while it cannot get there without a change.
RECONCILING = "Reconciling"
STALLED = "Stalled"
# A condition message is capped so a status always fits (the CRD allows 32 KiB).
MESSAGE_LIMIT = 4000
# The reason of the Warning event that lists the spec's warnings when they change.
SPEC_WARNINGS = "SpecWarnings"
# A group of a replica across pods that served and lost a pod: recreated whole.
GROUP_RESTARTING = "GroupRestarting"
# The engine is keyed to a kind of GPU: its first, or another.
GPU_KIND_CHOSEN = "GpuKindChosen"
_FAILED_REASONS = frozenset(
    {"InvalidSpec", "RepositoryTooLarge", *(w.failed for w in ARTIFACT_WORDS.values())}
)


@dataclass(frozen=True)
class RuntimeWords:
    """How the status of one runtime names what it shows."""

    # The condition of the content ConfigMap: the model repository, or trtllm-serve's `--config`.
    config_condition: str
    # The phase while the artifact is being made.
    making: Phase
    # When the content ConfigMap is created while its Job waits: "once the engine can be built".
    once: str


# Each runtime's words; the artifact's condition is the judgement's (`ARTIFACT_WORDS`).
RUNTIME_WORDS: Mapping[Runtime, RuntimeWords] = MappingProxyType(
    {
        Runtime.TRITON_TRTLLM_ENGINE: RuntimeWords(
            "ModelRepositoryReady", Phase.BUILDING, "the engine can be built"
        ),
        Runtime.TRTLLM_SERVE: RuntimeWords(
            "ServingConfigReady", Phase.DOWNLOADING, "the weights can be downloaded"
        ),
    }
)


@dataclass(frozen=True)
class ConfigMapState:
    """The content ConfigMap: the model repository, or trtllm-serve's `--config`."""

    name: str
    size: int
    too_large: bool = False
    applied: bool = False
    # Why it is not created yet (the build is blocked on a missing reference), if so.
    held: str | None = None


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post about the resource."""

    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Report:
    """The status to write, the events to post, and when to look again without an event."""

    status: MultimodalDeploymentStatus
    events: tuple[Event, ...]
    recheck_after: float | None = None


@dataclass(frozen=True)
class Findings:
    """What one reconcile found, the input of `report`."""

    generation: int
    runtime: Runtime
    problems: Sequence[Problem] = ()
    # The Validated condition's message: what the valid spec's artifact is keyed by.
    validated: str = ""
    derived: DerivedLimits | None = None
    # The runtime's end upstream and the way off it (the engine runtime's), for the FROZEN condition.
    frozen: str | None = None
    # The CPU and memory each kind of pod asks for.
    pod_resources: Sequence[PodResources] = ()
    artifact: ArtifactState[Any, Any] | None = None
    # The status fields that say where the artifact is: `engine` (an EngineStatus) or `weights`.
    artifact_status: Mapping[str, Any] = field(default_factory=dict)
    configmap: ConfigMapState | None = None
    serving: ServingState | None = None
    endpoints: Endpoints | None = None
    selector: str | None = None
    # Traps the spec walks into (`api.warning_rules`), "path: message" each; never a reason to wait.
    warnings: Sequence[str] = ()
    # The autoscaler, with serving.autoscaling.
    autoscaling: AutoscalingState | None = None
    # How a change replaces the serving pods.
    rollout: Rollout | None = None
    # The last revision whose every pod was ready, and the revision undone, if any.
    stable: ServingRevision | None = None
    undo: Undo | None = None
    # With strategy Canary: the new revision's analysis.
    canary: Canary | None = None
    # The revisions that have pods, and the rollout in a few words.
    revisions: Sequence[RevisionStatus] = ()
    rollout_words: str | None = None
    # Pods of one replica, and with more than one, how each group is doing.
    pods_per_replica: int = 1
    groups: Sequence[GroupState] = ()

    @property
    def artifact_condition(self) -> str:
        """EngineReady, or WeightsReady on trtllm-serve."""
        return ARTIFACT_WORDS[self.runtime].condition

    @property
    def words(self) -> RuntimeWords:
        """The runtime's words."""
        return RUNTIME_WORDS[self.runtime]


def _clip(message: str, limit: int = MESSAGE_LIMIT) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _condition(kind: str, ok: bool | None, reason: str, message: str, generation: int) -> Condition:
    status = (
        ConditionStatus.UNKNOWN if ok is None else (ConditionStatus.TRUE if ok else ConditionStatus.FALSE)
    )
    return Condition(
        type=kind, status=status, reason=reason, message=_clip(message), observed_generation=generation
    )


def _conditions(findings: Findings) -> list[Condition]:
    generation = findings.generation
    if findings.problems:
        problems = "; ".join(str(problem) for problem in findings.problems)
        count = len(findings.problems)
        rules = f"{count} rule{'s' if count != 1 else ''}"
        message = f"the spec breaks {rules}: {problems}"
        summary = (
            f"the spec breaks {rules}, so nothing changes until it is fixed: {problems} "
            "(mmctl validate -f shows the same offline)."
        )
        unknown = "not evaluated: the spec is invalid"
        return [
            _condition(VALIDATED, False, "InvalidSpec", message, generation),
            _condition(findings.artifact_condition, None, "InvalidSpec", unknown, generation),
            _condition(findings.words.config_condition, None, "InvalidSpec", unknown, generation),
            _condition(AVAILABLE, None, "InvalidSpec", unknown, generation),
            _condition(READY, False, "InvalidSpec", summary, generation),
        ]
    artifact, configmap, serving = findings.artifact, findings.configmap, findings.serving
    assert artifact is not None and configmap is not None and serving is not None
    conditions = [
        _condition(VALIDATED, True, "Valid", findings.validated, generation),
        _condition(
            findings.artifact_condition, artifact.ready, artifact.reason, artifact.message, generation
        ),
    ]
    config_condition = findings.words.config_condition
    too_large = f"the rendered repository takes {configmap.size} bytes; a ConfigMap holds at most 1 MiB"
    repository_summary = f"applying the model repository ConfigMap {configmap.name}; nothing to do yet."
    if configmap.too_large:
        repo = _condition(config_condition, False, "RepositoryTooLarge", too_large, generation)
        repository_summary = f"{too_large}: report it as a bug, with the spec."
    elif configmap.held is not None:
        repository_summary = artifact.summary or artifact.message
        repo = _condition(
            config_condition,
            False,
            artifact.reason,
            f"ConfigMap {configmap.name} is created once {findings.words.once}: {configmap.held}",
            generation,
        )
    elif configmap.applied:
        repo = _condition(config_condition, True, "Rendered", f"ConfigMap {configmap.name}", generation)
    else:
        repo = _condition(
            config_condition, False, "Rendering", f"applying ConfigMap {configmap.name}", generation
        )
    conditions.append(repo)
    conditions.append(_condition(AVAILABLE, serving.available, serving.reason, serving.message, generation))
    scaling = findings.autoscaling
    if scaling is not None:
        conditions.append(_condition(AUTOSCALING, scaling.ok, scaling.reason, scaling.message, generation))
    rollout = findings.rollout
    serving_summary = serving.summary or serving.message
    if rollout is not None:
        conditions.append(_condition(ROLLOUT, rollout.surge, rollout.reason, rollout.message, generation))
        if (rollout.fell_back or rollout.waiting_for_gpus) and not serving.trouble:
            serving_summary = f"{serving.message}; {rollout.message}."
    undo = findings.undo
    canary = findings.canary.status if findings.canary is not None else None
    if canary is not None:
        verdict = canary.verdict
        ok = None if verdict is CanaryVerdict.ANALYSING else verdict is CanaryVerdict.PASSED
        conditions.append(_condition(CANARY, ok, str(verdict), canary.message, generation))
    analysing = findings.canary is not None and findings.canary.analysing
    ready_checks = [
        (artifact.ready, artifact.reason, artifact.summary or artifact.message),
        (repo.status is ConditionStatus.TRUE, repo.reason, repository_summary),
        (undo is None, ROLLED_BACK, undo.message if undo is not None else ""),
        (not analysing, CANARY, canary.message if canary is not None else ""),
        (serving.rolled_out and serving.available, serving.reason, serving_summary),
    ]
    failing = next(((reason, message) for ok, reason, message in ready_checks if not ok), None)
    if failing is None:
        conditions.append(_condition(READY, True, "Ready", serving.message, generation))
    else:
        conditions.append(_condition(READY, False, failing[0], failing[1], generation))
    if findings.frozen is not None:
        # A standing fact, once in the status: never an Event or a warning on each apply, never Ready's.
        conditions.append(_condition(FROZEN, True, "LastUpstreamRelease", findings.frozen, generation))
    return conditions


def _phase(findings: Findings, conditions: list[Condition]) -> Phase:
    ready = next(c for c in conditions if c.type == READY)
    if findings.problems or ready.reason in _FAILED_REASONS:
        return Phase.FAILED
    artifact, serving = findings.artifact, findings.serving
    assert artifact is not None and serving is not None
    if artifact.failed:
        return Phase.FAILED
    if not artifact.ready:
        if artifact.waiting_for_claim:
            return Phase.PENDING
        return findings.words.making
    if ready.status is ConditionStatus.TRUE:
        return Phase.READY
    if serving.trouble or ready.reason == ROLLED_BACK:
        return Phase.DEGRADED
    return Phase.DEPLOYING


_IN_PROGRESS = frozenset({Phase.PENDING, Phase.BUILDING, Phase.DOWNLOADING, Phase.DEPLOYING})
_STALLED = frozenset({Phase.FAILED, Phase.DEGRADED})


def _progress_conditions(phase: Phase, conditions: list[Condition], generation: int) -> list[Condition]:
    """Reconciling and Stalled, which say the same as the phase in the words GitOps tools read."""
    ready = next(c for c in conditions if c.type == READY)
    if phase in _IN_PROGRESS:
        reconciling = _condition(RECONCILING, True, ready.reason, ready.message, generation)
    else:
        reconciling = _condition(RECONCILING, False, str(phase), f"nothing in progress: {phase}", generation)
    if phase in _STALLED:
        stalled = _condition(STALLED, True, ready.reason, ready.message, generation)
    else:
        stalled = _condition(STALLED, False, str(phase), f"not stalled: {phase}", generation)
    return [reconciling, stalled]


def _keep_transition_times(
    conditions: list[Condition], previous: MultimodalDeploymentStatus | None, now: datetime
) -> list[Condition]:
    before = {c.type: c for c in previous.conditions} if previous is not None else {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    kept = []
    for condition in conditions:
        old = before.get(condition.type)
        since = stamp
        if old is not None and old.status == condition.status and old.last_transition_time:
            since = old.last_transition_time
        kept.append(condition.model_copy(update={"last_transition_time": since}))
    return kept


def _warning_event(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    """A Warning event when the spec's warnings change to some (none when they clear or stay)."""
    if not status.warnings or (previous is not None and previous.warnings == status.warnings):
        return ()
    count = len(status.warnings)
    message = f"{count} warning{'s' if count != 1 else ''} about the spec: {'; '.join(status.warnings)}"
    return (Event("Warning", SPEC_WARNINGS, _clip(message)),)


def _gpu_kind_event(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    """A Normal event when the engine is first keyed to a kind of GPU, or to another one."""
    engine, before = status.engine, previous.engine if previous is not None else None
    if engine is None or engine.gpu is None or (before is not None and before.gpu == engine.gpu):
        return ()
    kind = f"{engine.gpu.product} (compute capability {engine.gpu.compute_capability or 'unknown'})"
    was = f", no longer {before.gpu.product}" if before is not None and before.gpu is not None else ""
    message = (
        f"engine {engine.cache_key} is built for {kind}{was}: its build and serving pods run only on nodes "
        "of that kind"
    )
    return (Event("Normal", GPU_KIND_CHOSEN, message),)


def _scaled_event(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    """A Normal event when, under autoscaling, the number of serving pods wanted changes."""
    now = status.autoscaling
    if now is None or previous is None or previous.autoscaling is None:
        return ()
    before, after = previous.replicas, status.replicas
    if before is None or after is None or before == after:
        return ()
    message = (
        f"scaled the serving pods {'up' if after > before else 'down'} from {before} to {after} "
        f"(HorizontalPodAutoscaler {now.horizontal_pod_autoscaler} on {now.metric})"
    )
    return (Event("Normal", "Autoscaled", message),)


def _in_place_event(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    """A Warning event when a rollout that was to surge goes on in place.

    A pod then stops before its replacement loads; the Deployment is told only by the next reconcile,
    so the event and the status say it first.
    """
    now = next((c for c in status.conditions if c.type == ROLLOUT), None)
    if now is None or now.reason != SURGE_UNSCHEDULABLE:
        return ()
    before = next((c for c in previous.conditions if c.type == ROLLOUT), None) if previous else None
    if before is not None and (before.reason, before.message) == (now.reason, now.message):
        return ()
    return (Event("Warning", "RollingInPlace", now.message),)


def _rolled_back_event(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    """A Warning event when a revision is undone (once per undo)."""
    now = status.rollback
    if now is None or (previous is not None and previous.rollback == now):
        return ()
    return (Event("Warning", ROLLED_BACK, now.message),)


def _canary_events(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    """An event when a canary's analysis starts, passes or fails."""
    now = status.canary
    before = previous.canary if previous is not None else None
    if now is None:
        return ()
    if before is not None and (before.revision, before.verdict) == (now.revision, now.verdict):
        return ()
    if now.verdict is CanaryVerdict.ANALYSING:
        return (Event("Normal", "CanaryStarted", now.message),)
    if now.verdict is CanaryVerdict.PASSED:
        return (Event("Normal", "CanaryPromoted", now.message),)
    return ()  # a failed canary is rolled back: the RolledBack event says it


def _events(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    return (
        _phase_events(status, previous)
        + _canary_events(status, previous)
        + _rolled_back_event(status, previous)
        + _in_place_event(status, previous)
        + _warning_event(status, previous)
        + _scaled_event(status, previous)
        + _group_events(status, previous)
        + _gpu_kind_event(status, previous)
    )


def _group_events(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    """A group that served and no longer does, and which pod it lost.

    Its LeaderWorkerSet recreates it whole: an MPI world does not take a rank back.
    """
    served = {g.index for g in (previous.groups or []) if g.ready_pods == g.pods} if previous else set()
    return tuple(
        Event(
            "Warning",
            GROUP_RESTARTING,
            _clip(
                f"group {group.index} lost {group.pods - group.ready_pods} of its {group.pods} pods and is "
                f"recreated whole: {group.message or 'its pods are being replaced'}"
            ),
        )
        for group in status.groups or []
        if group.index in served and group.ready_pods < group.pods
    )


def _phase_events(
    status: MultimodalDeploymentStatus, previous: MultimodalDeploymentStatus | None
) -> tuple[Event, ...]:
    ready = next(c for c in status.conditions if c.type == READY)
    old_phase = previous.phase if previous is not None else None
    old_ready = (
        next((c for c in previous.conditions if c.type == READY), None) if previous is not None else None
    )
    warning = status.phase in (Phase.FAILED, Phase.DEGRADED)
    if status.phase != old_phase:
        return (Event("Warning" if warning else "Normal", str(status.phase), ready.message),)
    if (
        warning
        and old_ready is not None
        and (old_ready.reason, old_ready.message) != (ready.reason, ready.message)
    ):
        return (Event("Warning", ready.reason, ready.message),)
    return ()


def previous_status(resource: Mapping[str, Any]) -> MultimodalDeploymentStatus | None:
    """The status `resource` shows, or None: none yet, or written by another version (recomputed)."""
    if not resource.get("status"):
        return None
    try:
        return MultimodalDeploymentStatus.model_validate(resource["status"])
    except ValidationError:
        return None


def recorded_kind(previous: MultimodalDeploymentStatus | None) -> GpuKind | None:
    """The kind of GPU the status says the resource's engine is built for."""
    gpu = previous.engine.gpu if previous is not None and previous.engine is not None else None
    return None if gpu is None else GpuKind(gpu.product, gpu.compute_capability or "")


def _autoscaling_status(state: AutoscalingState | None) -> AutoscalingStatus | None:
    if state is None:
        return None
    scaled = state.last_scale_time
    return AutoscalingStatus(
        horizontal_pod_autoscaler=state.autoscaler,
        metric=state.metric or None,
        desired_replicas=state.desired_replicas,
        current_replicas=state.current_replicas,
        last_scale_time=scaled.strftime("%Y-%m-%dT%H:%M:%SZ") if scaled is not None else None,
    )


def _restarting(findings: Findings, previous: MultimodalDeploymentStatus | None) -> frozenset[int]:
    """The groups that served (or were already being recreated) and are not whole now."""
    before = {g.index: g for g in (previous.groups or [])} if previous is not None else {}
    return frozenset(
        group.index
        for group in findings.groups
        if not group.whole
        and (old := before.get(group.index)) is not None
        and (old.ready_pods == old.pods or old.restarting)
    )


def _with_restarting_groups(findings: Findings, restarting: frozenset[int]) -> Findings:
    """`findings` whose serving is in trouble while a group that served is recreated whole."""
    serving = findings.serving
    if not restarting or serving is None:
        return findings
    lost = [group for group in findings.groups if group.index in restarting]
    said = "; ".join(group.describe() for group in lost)
    message = f"recreating {len(lost)} group{'s' if len(lost) != 1 else ''} whole after losing a pod: {said}"
    summary = (
        f"{message}; the LeaderWorkerSet recreates a group whole when one of its pods restarts or goes (an "
        "MPI world does not take a rank back): nothing to do unless it happens again."
    )
    troubled = dataclasses.replace(
        serving, reason=GROUP_RESTARTING, message=message, summary=summary, trouble=True, rolled_out=False
    )
    return dataclasses.replace(findings, serving=troubled)


def report(findings: Findings, *, previous: MultimodalDeploymentStatus | None, now: datetime) -> Report:
    """The status and events of `findings`; `previous` is the status the resource shows now."""
    restarting = _restarting(findings, previous)
    findings = _with_restarting_groups(findings, restarting)
    conditions = _conditions(findings)
    phase = _phase(findings, conditions)
    conditions += _progress_conditions(phase, conditions, findings.generation)
    conditions = _keep_transition_times(conditions, previous, now)
    serving = findings.serving
    status = MultimodalDeploymentStatus(
        observed_generation=findings.generation,
        phase=phase,
        conditions=conditions,
        derived=findings.derived,
        pod_resources=list(findings.pod_resources) or None,
        **findings.artifact_status,
        model_repository=findings.configmap.name if findings.configmap is not None else None,
        endpoints=findings.endpoints,
        replicas=serving.desired if serving is not None else None,
        pods_per_replica=findings.pods_per_replica,
        groups=[
            GroupStatus(
                index=group.index,
                pods=group.size,
                ready_pods=group.ready,
                message=_clip("; ".join(group.missing), 512) if group.missing else None,
                restarting=True if group.index in restarting else None,
            )
            for group in findings.groups[:MAX_GROUPS]
        ]
        or None,
        updated_replicas=serving.updated_replicas if serving is not None else None,
        ready_replicas=serving.ready_replicas if serving is not None else None,
        selector=findings.selector,
        autoscaling=_autoscaling_status(findings.autoscaling),
        stable_revision=findings.stable,
        rollback=RollbackStatus(
            generation=findings.generation,
            failed=findings.undo.failed,
            message=_clip(findings.undo.message),
            retry=findings.undo.retry,
        )
        if findings.undo is not None
        else None,
        rollout=findings.rollout_words,
        progress=findings.artifact.progress.summary
        if findings.artifact is not None and findings.artifact.progress is not None
        else None,
        canary=findings.canary.status if findings.canary is not None else None,
        revisions=list(findings.revisions) or None,
        warnings=[_clip(w, WARNING_MAX_LENGTH) for w in findings.warnings[:MAX_WARNINGS]] or None,
    )
    if findings.problems and previous is not None:
        # An invalid spec changes nothing that runs: keep showing what does.
        status = status.model_copy(
            update={
                "derived": previous.derived,
                "pod_resources": previous.pod_resources,
                "engine": previous.engine,
                "weights": previous.weights,
                "model_repository": previous.model_repository,
                "endpoints": previous.endpoints,
                "replicas": previous.replicas,
                "pods_per_replica": previous.pods_per_replica,
                "groups": previous.groups,
                "updated_replicas": previous.updated_replicas,
                "ready_replicas": previous.ready_replicas,
                "selector": previous.selector,
                "autoscaling": previous.autoscaling,
                "stable_revision": previous.stable_revision,
                "rollback": previous.rollback,
                "rollout": previous.rollout,
                "progress": previous.progress,
                "canary": previous.canary,
                "revisions": previous.revisions,
            }
        )
    rechecks = [
        after
        for after in (
            serving.recheck_after if serving is not None else None,
            findings.rollout.recheck_after if findings.rollout is not None else None,
            findings.canary.recheck_after if findings.canary is not None else None,
            # A running Job's progress is read again this often (its pod's log says nothing by event).
            PROGRESS_POLL_SECONDS if findings.artifact and findings.artifact.job_running else None,
        )
        if after is not None
    ]
    recheck = min(rechecks) if rechecks else None
    return Report(status=status, events=_events(status, previous), recheck_after=recheck)


@dataclass(frozen=True)
class Transition:
    """A change an admin tailing the operator's log should see."""

    # True: the resource entered a failing phase, or its failure changed reason; False: it recovered.
    failing: bool
    text: str


def _ready_condition(status: MultimodalDeploymentStatus | None) -> Condition | None:
    if status is None:
        return None
    return next((c for c in status.conditions if c.type == READY), None)


def transition(
    previous: MultimodalDeploymentStatus | None, status: MultimodalDeploymentStatus
) -> Transition | None:
    """What changed for the log between the status `previous` and `status`; None when nothing did."""
    before, now = _ready_condition(previous), _ready_condition(status)
    was = (previous.phase, before.reason) if previous is not None and before is not None else None
    if status.phase in _STALLED and now is not None:
        if was == (status.phase, now.reason):
            return None  # still failing the same way
        return Transition(failing=True, text=f"is {status.phase}: {now.reason}: {now.message}")
    if previous is not None and previous.phase in _STALLED:
        return Transition(failing=False, text=f"recovered: {status.phase}")
    return None
