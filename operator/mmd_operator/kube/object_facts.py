"""Live objects, as the API server sends them, reduced to the operator's small facts.

Only what decisions read is kept (a ConfigMap's data, a pod's spec and most of its status are dropped),
so a thousand resources' worth of children stay cheap to hold: a pod keeps its selector and tolerations
only while the scheduler cannot place it, and which container the kernel OOMKilled with its memory limit.
Nodes become the little placement reads of them (GPUs, CPU, memory), ResourceQuotas what admission
weighs. Pure functions of plain dicts; imports the facts, the quantities, the label keys and the GPU
resource name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mmd_operator.api import quantities
from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_operator.facts import (
    AutoscalerCondition,
    AutoscalerFacts,
    ClaimFacts,
    DeploymentFacts,
    DeviceClassFacts,
    DeviceFacts,
    JobFacts,
    Meta,
    NodeFacts,
    NodeRequirement,
    OwnerRef,
    PodFacts,
    PodPhase,
    PodPlacement,
    QuotaFacts,
    Taint,
    Toleration,
    VersionText,
)
from mmd_operator.vocabulary import labels
from mmd_operator.vocabulary.kinds import GPU_RESOURCE

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# The taint a cordoned node carries (the node controller adds it; a node's `spec.unschedulable` says so
# before it does).
CORDONED = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_KEEPS_PODS_OFF = frozenset({"NoSchedule", "NoExecute"})


def timestamp(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it."""
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def meta(obj: Mapping[str, Any]) -> Meta:
    """The metadata decisions read."""
    metadata = obj.get("metadata", {})
    owners = tuple(
        OwnerRef(name=str(ref.get("name", "")), uid=str(ref.get("uid", "")))
        for ref in metadata.get("ownerReferences") or []
        if ref.get("kind") == KIND and ref.get("apiVersion") == API_VERSION
    )
    annotations = metadata.get("annotations") or {}
    kept = {key: value for key, value in annotations.items() if key.startswith(labels.PREFIX)}
    return Meta(
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        resource_version=str(metadata.get("resourceVersion", "")),
        labels=tuple(sorted((metadata.get("labels") or {}).items())),
        annotations=tuple(sorted(kept.items())),
        owners=owners,
        created=timestamp(metadata.get("creationTimestamp")),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _memory_limits(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    containers = [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]
    limits = {
        c.get("name"): ((c.get("resources") or {}).get("limits") or {}).get("memory") for c in containers
    }
    return {str(name): str(limit) for name, limit in limits.items() if limit is not None}


def _oom_killed(statuses: list[Mapping[str, Any]], limits: Mapping[str, str]) -> str | None:
    """The container the kernel killed for its memory limit, now or when it last ended, and the limit."""
    for container in statuses:
        ended = [
            (container.get("state") or {}).get("terminated"),
            (container.get("lastState") or {}).get("terminated"),
        ]
        if any((end or {}).get("reason") == "OOMKilled" for end in ended):
            name = str(container.get("name"))
            limit = limits.get(name)
            return f"container {name}, over its memory limit" + (f" of {limit}" if limit else "")
    return None


def _container_trouble(statuses: list[Mapping[str, Any]]) -> str | None:
    for container in statuses:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in (
            "CrashLoopBackOff",
            "CreateContainerConfigError",
            "ImagePullBackOff",
            "ErrImagePull",
            "RunContainerError",
        ):
            last = ((container.get("lastState") or {}).get("terminated")) or {}
            said = last.get("message") or ""
            code = f", exit code {last['exitCode']}" if "exitCode" in last else ""
            detail = f"; it last said: {said.strip()}" if said.strip() else ""
            if last.get("reason") and last.get("reason") != "Error":
                # The kubelet's word for how it ended (OOMKilled, ContainerCannotRun), not the program's.
                detail = f"; it last ended {last['reason']}{detail}"
            why = str(waiting.get("message", "")).strip()
            return f"container {container.get('name')} is in {reason} ({why}{code}){detail}"
    return None


def _waiting(statuses: list[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    waiting = [(container.get("state") or {}).get("waiting") for container in statuses]
    return tuple(
        (str(state.get("reason") or ""), str(state.get("message") or "")) for state in waiting if state
    )


def _count(quantity: Any) -> int:
    """An extended resource's quantity (always a whole number); 0 when it is not one."""
    try:
        return int(str(quantity))
    except ValueError:
        return 0


def pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    """The nvidia.com/gpu a pod spec asks for, over its containers."""
    total = 0
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        asked = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(
            GPU_RESOURCE
        )
        total += _count(asked) if asked is not None else 0
    return total


def _amount(quantity: Any, scale: int = 1) -> int | None:
    """A quantity times `scale`, rounded up; None when it is missing or not a quantity."""
    if quantity is None or not quantities.is_quantity(quantity):
        return None
    return math.ceil(quantities.parse(quantity) * scale)


def pod_requests(pod_spec: Mapping[str, Any], resource: str, scale: int = 1) -> int:
    """What a pod spec requests of `resource`, as the scheduler counts it.

    Its containers' requests added up, or its largest init container's when that is more (a container
    that names none requests none).
    """

    def requested(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        # A limit without a request is the request too (the API server's default).
        asked = (resources.get("requests") or {}).get(resource, (resources.get("limits") or {}).get(resource))
        return _amount(asked, scale) or 0

    running = sum(requested(container) for container in pod_spec.get("containers") or [])
    first = max((requested(container) for container in pod_spec.get("initContainers") or []), default=0)
    return max(running, first)


def _requirements(items: Any, *, field: bool) -> tuple[NodeRequirement, ...]:
    return tuple(
        NodeRequirement(
            key=str(item.get("key", "")),
            operator=str(item.get("operator", "")),
            values=tuple(str(value) for value in item.get("values") or []),
            field=field,
        )
        for item in items or []
    )


def pod_placement(pod_spec: Mapping[str, Any]) -> PodPlacement:
    """What the scheduler matches a pod spec against nodes with (a live pod's, or a rendered template's)."""
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = tuple(
        _requirements(term.get("matchExpressions"), field=False)
        + _requirements(term.get("matchFields"), field=True)
        for term in required.get("nodeSelectorTerms") or []
    )
    tolerations = tuple(
        Toleration(
            key=str(item.get("key") or ""),
            operator=str(item.get("operator") or "Equal"),
            value=str(item.get("value") or ""),
            effect=str(item.get("effect") or ""),
        )
        for item in pod_spec.get("tolerations") or []
    )
    return PodPlacement(
        gpus=pod_gpus(pod_spec),
        node_selector=tuple(
            sorted((str(k), str(v)) for k, v in (pod_spec.get("nodeSelector") or {}).items())
        ),
        affinity_terms=terms,
        tolerations=tolerations,
        cpu_millis=pod_requests(pod_spec, "cpu", 1000),
        memory_bytes=pod_requests(pod_spec, "memory"),
    )


def node(obj: Mapping[str, Any]) -> NodeFacts:
    """A node: its allocatable GPUs, labels, and the taints that keep pods off it."""
    spec = obj.get("spec") or {}
    taints = [
        Taint(str(taint.get("key", "")), str(taint.get("value") or ""), str(taint.get("effect", "")))
        for taint in spec.get("taints") or []
        if taint.get("effect") in _KEEPS_PODS_OFF
    ]
    if spec.get("unschedulable") and not any(taint.key == CORDONED.key for taint in taints):
        taints.append(CORDONED)
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    return NodeFacts(
        name=str((obj.get("metadata") or {}).get("name", "")),
        gpus=_count(allocatable.get(GPU_RESOURCE, 0)),
        labels=tuple(sorted(((obj.get("metadata") or {}).get("labels") or {}).items())),
        taints=tuple(taints),
        cpu_millis=_amount(allocatable.get("cpu"), 1000),
        memory_bytes=_amount(allocatable.get("memory")),
    )


def claim_templates(*pod_specs: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The ResourceClaimTemplates `pod_specs` take claims from, sorted."""
    return tuple(
        sorted(
            {
                str(claim["resourceClaimTemplateName"])
                for spec in pod_specs
                for claim in (spec or {}).get("resourceClaims") or []
                if claim.get("resourceClaimTemplateName")
            }
        )
    )


def _template_spec(template: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return (template or {}).get("spec")


def pod(obj: Mapping[str, Any]) -> PodFacts:
    """A build or serving pod."""
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    containers = status.get("containerStatuses") or []
    scheduled = _condition(status, "PodScheduled")
    unschedulable = None
    if (
        scheduled is not None
        and scheduled.get("status") == "False"
        and scheduled.get("reason") == "Unschedulable"
    ):
        unschedulable = str(scheduled.get("message") or "Unschedulable")
    ready = _condition(status, "Ready")
    containers_ready = _condition(status, "ContainersReady")
    terminated = next(
        (c["state"]["terminated"] for c in containers if (c.get("state") or {}).get("terminated")), None
    )
    configmap = next(
        (
            v["configMap"]["name"]
            for v in spec.get("volumes") or []
            if v.get("name") == "repository-config" and v.get("configMap")
        ),
        None,
    )
    return PodFacts(
        meta=meta(obj),
        phase=PodPhase(status.get("phase", "Pending"))
        if status.get("phase") in PodPhase._value2member_map_
        else PodPhase.UNKNOWN,
        ready=ready is not None and ready.get("status") == "True",
        unschedulable=unschedulable,
        # An init container (the repository's assembly) fails first, and the server never starts.
        crash_loop=_container_trouble([*(status.get("initContainerStatuses") or []), *containers]),
        oom_killed=_oom_killed(
            [*(status.get("initContainerStatuses") or []), *containers], _memory_limits(spec)
        ),
        waiting=_waiting([*(status.get("initContainerStatuses") or []), *containers]),
        restarts=sum(int(c.get("restartCount", 0)) for c in containers),
        started=timestamp(status.get("startTime")),
        termination_message=terminated.get("message") if terminated else None,
        exit_code=int(terminated["exitCode"]) if terminated and "exitCode" in terminated else None,
        configmap=configmap,
        node=spec.get("nodeName"),
        node_lost=status.get("phase") == "Running"
        and ready is not None
        and ready.get("status") == "False"
        and containers_ready is not None
        and containers_ready.get("status") == "True",
        gpus=pod_gpus(spec),
        claim_templates=claim_templates(spec),
        placement=pod_placement(spec) if unschedulable is not None else None,
    )


def job(obj: Mapping[str, Any]) -> JobFacts:
    """A build Job."""
    status = obj.get("status") or {}
    complete = _condition(status, "Complete")
    failed = _condition(status, "Failed")
    failure = None
    if failed is not None and failed.get("status") == "True":
        failure = f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}".strip(": ")
    return JobFacts(
        meta=meta(obj),
        succeeded=complete is not None and complete.get("status") == "True",
        failed=failure is not None,
        failure=failure,
        started=timestamp(status.get("startTime")),
        finished=timestamp(status.get("completionTime")),
        claim_templates=claim_templates(_template_spec((obj.get("spec") or {}).get("template"))),
    )


def quota(obj: Mapping[str, Any]) -> QuotaFacts:
    """A ResourceQuota: hard, used, and the scopes it counts."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    scopes: list[tuple[str, str, tuple[str, ...]]] = [
        (str(scope), "Exists", ()) for scope in spec.get("scopes") or []
    ]
    scopes += [
        (
            str(term.get("scopeName", "")),
            str(term.get("operator", "")),
            tuple(map(str, term.get("values") or [])),
        )
        for term in (spec.get("scopeSelector") or {}).get("matchExpressions") or []
    ]
    return QuotaFacts(
        name=str((obj.get("metadata") or {}).get("name", "")),
        hard=tuple(sorted((str(k), str(v)) for k, v in (spec.get("hard") or {}).items())),
        used=tuple(sorted((str(k), str(v)) for k, v in (status.get("used") or {}).items())),
        scopes=tuple(scopes),
    )


def deployment(obj: Mapping[str, Any]) -> DeploymentFacts:
    """The serving Deployment."""
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    progressing = _condition(status, "Progressing")
    progress_failure = None
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        progress_failure = str(progressing.get("message") or "ProgressDeadlineExceeded")
    failure = _condition(status, "ReplicaFailure")
    replica_failure = (
        str(failure.get("message") or failure.get("reason") or "ReplicaFailure")
        if failure is not None and failure.get("status") == "True"
        else None
    )
    template = (spec.get("template") or {}).get("metadata") or {}
    return DeploymentFacts(
        meta=meta(obj),
        generation=int(obj.get("metadata", {}).get("generation", 0)),
        observed_generation=int(status.get("observedGeneration", 0)),
        replicas=int(spec.get("replicas", 1)),
        status_replicas=int(status.get("replicas", 0)),
        updated_replicas=int(status.get("updatedReplicas", 0)),
        ready_replicas=int(status.get("readyReplicas", 0)),
        available_replicas=int(status.get("availableReplicas", 0)),
        progress_failure=progress_failure,
        replica_failure=replica_failure,
        configmap=(template.get("annotations") or {}).get(labels.REPOSITORY),
        replicas_managers=replicas_managers(obj),
        template_digest=((obj.get("metadata") or {}).get("annotations") or {}).get(labels.TEMPLATE_DIGEST),
        claim_templates=claim_templates(_template_spec(spec.get("template"))),
    )


def leader_worker_set(obj: Mapping[str, Any]) -> DeploymentFacts:
    """The serving LeaderWorkerSet, read as a Deployment is.

    Its replicas are groups, ready (and so available) when every pod of the group is; its leaders'
    template names the content ConfigMap.
    """
    spec = obj.get("spec") or {}
    group = spec.get("leaderWorkerTemplate") or {}
    leader = ((group.get("leaderTemplate") or {}).get("metadata") or {}).get("annotations") or {}
    read = deployment(obj)
    return dataclasses.replace(
        read,
        available_replicas=read.ready_replicas,
        configmap=leader.get(labels.REPOSITORY),
        kind=str(obj.get("kind", "LeaderWorkerSet")),
        group_size=int(group.get("size", 1)),
        claim_templates=claim_templates(
            _template_spec(group.get("leaderTemplate")), _template_spec(group.get("workerTemplate"))
        ),
    )


def replicas_managers(obj: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The (field manager, operation) pairs that own an object's spec.replicas (its managedFields)."""
    owners = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        fields = entry.get("fieldsV1") or {}
        if "f:replicas" in (fields.get("f:spec") or {}):
            owners.append((str(entry.get("manager", "")), str(entry.get("operation", ""))))
    return tuple(sorted(set(owners)))


def autoscaler(obj: Mapping[str, Any]) -> AutoscalerFacts:
    """The serving Deployment's HorizontalPodAutoscaler (autoscaling/v2)."""
    status = obj.get("status") or {}
    desired, current = status.get("desiredReplicas"), status.get("currentReplicas")
    return AutoscalerFacts(
        meta=meta(obj),
        desired_replicas=int(desired) if desired is not None else None,
        current_replicas=int(current) if current is not None else None,
        last_scale_time=timestamp(status.get("lastScaleTime")),
        conditions=tuple(
            AutoscalerCondition(
                type=str(c.get("type", "")),
                status=str(c.get("status", "")),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
            )
            for c in status.get("conditions") or []
        ),
    )


def claim(obj: Mapping[str, Any]) -> ClaimFacts:
    """An engine-cache claim."""
    facts = meta(obj)
    return ClaimFacts(
        meta=facts,
        phase=str((obj.get("status") or {}).get("phase", "Pending")),
        managed=facts.label(labels.MANAGED_BY) == labels.OPERATOR,
        access_modes=tuple(str(mode) for mode in (obj.get("spec") or {}).get("accessModes") or ()),
    )


def _qualified(driver: str, name: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _attribute_value(value: Mapping[str, Any]) -> str | int | bool:
    if "version" in value:
        return VersionText(value["version"])
    for key in ("string", "int", "bool"):
        if key in value:
            found = value[key]
            return found if isinstance(found, bool | int) else str(found)
    return ""


def slice_devices(obj: Mapping[str, Any]) -> list[DeviceFacts]:
    """The devices of a ResourceSlice (`resource.k8s.io/v1`), on its node ("" for a slice of several)."""
    spec = obj.get("spec") or {}
    driver, node = str(spec.get("driver", "")), str(spec.get("nodeName") or "")
    return [
        DeviceFacts(
            node=node,
            driver=driver,
            name=str(device.get("name", "")),
            attributes=tuple(
                sorted(
                    (_qualified(driver, name), _attribute_value(value or {}))
                    for name, value in (device.get("attributes") or {}).items()
                )
            ),
            capacity=tuple(
                sorted(
                    (_qualified(driver, name), str((value or {}).get("value", "")))
                    for name, value in (device.get("capacity") or {}).items()
                )
            ),
        )
        for device in spec.get("devices") or []
    ]


def device_class(obj: Mapping[str, Any]) -> DeviceClassFacts:
    """A DeviceClass: its name and selectors' CEL expressions."""
    selectors = ((obj.get("spec") or {}).get("selectors")) or []
    return DeviceClassFacts(
        name=str((obj.get("metadata") or {}).get("name", "")),
        selectors=tuple(str((s.get("cel") or {}).get("expression", "")) for s in selectors if s.get("cel")),
    )
