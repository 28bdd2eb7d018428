"""`mmctl validate --cluster`: what a resource needs from the cluster, checked before a GPU hour is spent.

Read-only (gets and lists, nothing else), with the current kubeconfig or a client given, for a resource
that passed offline validation and the namespace it is meant for:

- the namespace exists, and its Pod Security labels admit the pods: the operator's build and serving
  pods meet `restricted`, the strictest level, so any valid level admits them; the level found is reported;
- the Hugging Face token Secret and its key exist (`kube.observe.token_secret_missing`: the operator reads
  no Secret and learns it from the kubelet, in the same words), and every claim a `pvc` source names
  (the operator's own check, `kube.observe.missing_references`); no Secret value reaches a finding;
- the engine-cache claim exists, or the StorageClass it would be created with does: the one named, or
  the cluster's default when none is;
- some node matches the build pod's and the serving pods' selector, required node affinity and
  tolerations with enough allocatable GPUs, memory and CPU for one pod (`judgement.placement.match`, the
  rule the operator explains its scheduling failures with), unless the engine is already built; too
  little room for every serving replica is a warning, since what other pods hold is not counted here;
- the namespace's ResourceQuotas have room for the Job's pod and for every serving pod (a warning when
  not, naming the quota, the figures and the field: what a quota's `used` counts changes);
- for a resource that exists already (so the spec is a change): whether a node the serving pods may use
  has a GPU free now for the surge pod of the rollout the change starts; without one, a warning says
  that the rollout will go on in place and which pod is down for its load (`judgement.rollout`).
- The kinds of GPU: the kind the engine is built for, or the refusal of a placement that reaches several
  (`judgement.gpu_kinds`), and whether the model fits each kind in reach (`plan.fit`), as the operator
  judges them.

A check that cannot be made (a 403, say) is a warning naming what could not be read, never an error.
A cluster that cannot be asked at all is another matter: `ask_cluster` reads API discovery first, and an
API server that cannot be reached, or that refuses the credentials (401) or even discovery to them
(403), raises `ClusterUnavailableError` with one line saying which, as does a connection lost midway.
`preflight` returns the findings; printing them is the CLI's. Imports the api, the config, the desired
builders, the kube adapter, placement and GPU kinds, the fit, the status reader, the vocabulary and
urllib3's exceptions (the kube client's transport).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any, TypeVar

import urllib3

from mmd_operator.api import quantities
from mmd_operator.api.v1alpha1 import GPU_RESOURCE, MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import cache
from mmd_operator.desired.decision import manifests
from mmd_operator.desired.serving import WORKLOADS
from mmd_operator.facts import Devices, Nodes
from mmd_operator.judgement.gpu_kinds import claim_of, kinds_by_claim, kinds_for, kinds_in_reach
from mmd_operator.judgement.placement import (
    GpuDemand,
    ObstacleKind,
    build_demand,
    explain,
    match,
    nodes_offered,
    obstacle,
    serving_demand,
)
from mmd_operator.judgement.quotas import pod_ask, refusal, together
from mmd_operator.kube import object_facts
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.kube.engine_index import EngineIndex
from mmd_operator.kube.nodes import nodes_of, requested_by_node
from mmd_operator.kube.observe import missing_references, token_secret_missing
from mmd_operator.plan.fit import fit
from mmd_operator.plan.resource_plan import AnyPlan
from mmd_operator.status import previous_status, recorded_kind
from mmd_operator.vocabulary import kinds, names

POD_SECURITY = "pod-security.kubernetes.io/"
LEVELS = ("privileged", "baseline", "restricted")
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
_T = TypeVar("_T")


class Severity(StrEnum):
    """How much a finding matters: an error keeps the resource from running, a warning may, info is fine."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One thing the preflight found: where (a field path, or the object it is about) and what."""

    field: str
    message: str
    severity: Severity

    def __str__(self) -> str:
        return f"{self.severity}: {self.field}: {self.message}"


class ClusterUnavailableError(Exception):
    """The cluster cannot be asked at all: unreachable, or it refuses the credentials."""


# How long the first request may take; one retry of the connection pool on top.
ASK_TIMEOUT_SECONDS = 10.0
_CONNECTION_PREFIX = re.compile(r"^\w+\(host=[^)]*\):\s*")


def unreachable(client: KubeClient, error: urllib3.exceptions.HTTPError) -> ClusterUnavailableError:
    """The one line for a request to `client`'s API server that never got an answer."""
    reason = getattr(error, "reason", None) or error
    return ClusterUnavailableError(
        f"cannot reach the API server {client.server}: {_CONNECTION_PREFIX.sub('', str(reason))}"
    )


def ask_cluster(client: KubeClient) -> None:
    """Read API discovery (every authenticated user may), to know that the cluster can be asked.

    Raises:
        ClusterUnavailableError: naming the API server and why it cannot be asked.
    """
    try:
        client.request("GET", "/api", timeout=ASK_TIMEOUT_SECONDS)
    except urllib3.exceptions.HTTPError as error:
        raise unreachable(client, error) from None
    except ApiError as error:
        server = f"the API server {client.server}"
        if error.status == 0:  # TLS
            why = f"cannot reach {server}: {error.reason}: {error.message}"
        elif error.status == 401:
            why = (
                f"{server} refuses the kubeconfig's credentials (401 Unauthorized): they are wrong or "
                "expired; log in again or pick another --context"
            )
        elif error.status == 403:
            why = (
                f"{server} forbids these credentials even API discovery (403 Forbidden): the request "
                "was anonymous or its user has no role at all"
            )
        else:
            why = f"{server} answered API discovery with {error.status} {error.reason}: {error.message}"
        raise ClusterUnavailableError(why) from None


class _UnreadableError(Exception):
    """A read the preflight may not make, already reported as a warning."""


class _Checks:
    """The checks of one resource, collecting findings."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.findings: list[Finding] = []

    def add(self, severity: Severity, field: str, message: str) -> None:
        self.findings.append(Finding(field, message, severity))

    def read(self, field: str, what: str, request: Callable[[], _T]) -> _T:
        """`request()`, or a warning that `what` could not be read (and `_UnreadableError`)."""
        try:
            return request()
        except ApiError as error:
            self.add(
                Severity.WARNING, field, f"could not read {what} to check it: {error.status} {error.reason}"
            )
            raise _UnreadableError from None


def _pod_security(checks: _Checks, namespace: dict[str, Any]) -> None:
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    field = f"namespace {checks.namespace}"
    enforce = labels.get(f"{POD_SECURITY}enforce")
    version = labels.get(f"{POD_SECURITY}enforce-version", "latest")
    others = ", ".join(
        f"{mode} {labels[POD_SECURITY + mode]}" for mode in ("warn", "audit") if POD_SECURITY + mode in labels
    )
    also = f" (and {others})" if others else ""
    if enforce is None:
        checks.add(
            Severity.INFO,
            field,
            f"no Pod Security label: the cluster's default level applies{also}; the operator's pods meet "
            "restricted, the strictest, so every level admits them",
        )
    elif enforce not in LEVELS:
        checks.add(
            Severity.WARNING,
            f"{field}: label {POD_SECURITY}enforce",
            f"{enforce!r} is not a Pod Security level ({', '.join(LEVELS)}); the API server then holds pods "
            "to restricted, which the operator's pods meet",
        )
    else:
        checks.add(
            Severity.INFO,
            field,
            f"Pod Security enforces {enforce} ({version}){also}; the operator's pods meet restricted, so it "
            "admits them",
        )


def _references(checks: _Checks, resource: MultimodalDeployment) -> None:
    missing = checks.read(
        "spec.model.source",
        "the Secret or claims the spec names",
        lambda: (
            token_secret_missing(checks.client, resource, checks.namespace)
            + missing_references(checks.client, resource, checks.namespace)
        ),
    )
    for reference in missing:
        checks.add(Severity.ERROR, reference.field, f"{reference.message}: {reference.fix}")


def _storage(checks: _Checks, resource: MultimodalDeployment, claim: str, config: OperatorConfig) -> None:
    live = checks.read(
        "spec.engineCache",
        f"PersistentVolumeClaim {claim}",
        lambda: checks.client.get(kinds.CLAIM.api_version, kinds.CLAIM.kind, checks.namespace, claim),
    )
    if live is not None:
        phase = (live.get("status") or {}).get("phase", "Pending")
        if phase == "Bound":
            checks.add(
                Severity.INFO, "spec.engineCache", f"the engine-cache claim {claim} exists and is Bound"
            )
        else:
            checks.add(
                Severity.WARNING,
                "spec.engineCache",
                f"the engine-cache claim {claim} is {phase}: builds wait until it is bound "
                f"(kubectl describe pvc {claim} -n {checks.namespace} says why)",
            )
        return
    field = "spec.engineCache.storageClassName"
    named = resource.spec.engine_cache.storage_class_name or config.engine_cache_storage_class
    api, kind = kinds.STORAGE_CLASS.api_version, kinds.STORAGE_CLASS.kind
    if named:
        if (
            checks.read(field, f"StorageClass {named}", lambda: checks.client.get(api, kind, None, named))
            is None
        ):
            checks.add(
                Severity.ERROR,
                field,
                f"StorageClass {named} not found, so the engine-cache claim {claim} the operator creates "
                "would stay Pending: name one kubectl get storageclass lists",
            )
        else:
            checks.add(
                Severity.INFO, field, f"the operator creates the claim {claim} with StorageClass {named}"
            )
        return
    classes = checks.read(field, "the StorageClasses", lambda: checks.client.list(api, kind))
    default = sorted(
        str(c["metadata"]["name"])
        for c in classes
        if any(
            (c["metadata"].get("annotations") or {}).get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS
        )
    )
    if not default:
        checks.add(
            Severity.ERROR,
            field,
            f"no StorageClass is the cluster's default, so the engine-cache claim {claim} the operator "
            "creates would stay Pending: name a class here, or create the claim and name it in "
            "spec.engineCache.claimName",
        )
    else:
        checks.add(
            Severity.INFO,
            field,
            f"the operator creates the claim {claim} with the default StorageClass {default[0]}",
        )


def _engine_built(checks: _Checks, claim: str, cache_key: str) -> bool:
    """Whether the engine index of `claim` already holds `cache_key` (no build pod will run)."""
    api, kind = kinds.CONFIGMAP.api_version, kinds.CONFIGMAP.kind
    try:
        index = checks.client.get(api, kind, checks.namespace, names.engine_index(claim))
    except ApiError:
        return False  # then the build pod is checked too, which is the careful side
    return index is not None and EngineIndex.from_configmap_data(index.get("data")).get(cache_key) is not None


def _placement(checks: _Checks, pod_spec: dict[str, Any], demand: GpuDemand, nodes: Nodes) -> None:
    placement = object_facts.pod_placement(pod_spec)
    found = match(placement, nodes)
    blocked = obstacle(found, demand)
    if blocked is None:
        room = f", room for {found.room(demand.gpus_per_pod)} pods" if demand.role == "serving" else ""
        asks = (
            f"; a pod requests {quantities.cpu(Fraction(placement.cpu_millis, 1000))} CPU and "
            f"{quantities.memory(placement.memory_bytes)} of memory"
        )
        checks.add(
            Severity.INFO, demand.pod_field, f"{demand.arithmetic()}; {nodes_offered(found)}{room}{asks}"
        )
        return
    # Only the sum over every replica leaves the GPUs other pods hold out: it may still be enough.
    severity = Severity.WARNING if blocked.kind is ObstacleKind.TOO_FEW else Severity.ERROR
    checks.add(severity, blocked.field, explain(blocked, demand))


def _pod_spec(objects: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    found = next((o for o in objects if o["kind"] == kind), None)
    return found["spec"]["template"]["spec"] if found is not None else None


def _serving_pod_spec(objects: list[dict[str, Any]], plan: AnyPlan) -> dict[str, Any] | None:
    """The serving pods' spec: the Deployment's, or a LeaderWorkerSet leader's (workers: as many GPUs)."""
    workload = WORKLOADS[plan.parallelism.shape]
    found = next((o for o in objects if o["kind"] == workload.kind.kind), None)
    return workload.serving_pod(found) if found is not None else None


def _nodes(checks: _Checks, resource: MultimodalDeployment, plan: AnyPlan, config: OperatorConfig) -> None:
    claim = cache.claim_name(resource, config)
    items = checks.read(
        "nodes", "the nodes", lambda: checks.client.list(kinds.NODE.api_version, kinds.NODE.kind)
    )
    nodes = nodes_of(items)
    objects = manifests(resource, plan, config=config)
    job, serving = _pod_spec(objects, "Job"), _serving_pod_spec(objects, plan)
    if resource.spec.gpus.resource_claim is not None:
        # The pods claim devices, which the scheduler allocates: no node's nvidia.com/gpu to count.
        job = serving = None
        with contextlib.suppress(_UnreadableError):
            _gpu_kinds(checks, resource, plan, None, nodes)
    # A Job that asks for no GPU (the weights download) fits wherever the serving pods do.
    if job is None or not object_facts.pod_placement(job).gpus:
        pass
    elif _engine_built(checks, claim, plan.cache_key):
        checks.add(
            Severity.INFO, "spec.build.pod", f"engine {plan.cache_key} is built already: no build pod runs"
        )
    else:
        _placement(checks, job, build_demand(resource.spec), nodes)
    if serving is not None and resource.spec.serving.replicas > 0:
        _placement(checks, serving, serving_demand(resource.spec), nodes)
        with contextlib.suppress(_UnreadableError):
            _surge(checks, resource, serving, nodes)
    if serving is not None:
        with contextlib.suppress(_UnreadableError):
            _gpu_kinds(checks, resource, plan, serving, nodes)


def _gpu_kinds(
    checks: _Checks,
    resource: MultimodalDeployment,
    plan: AnyPlan,
    pod_spec: dict[str, Any] | None,
    nodes: Nodes,
) -> None:
    """The kind of GPU the engine is built for, and whether the model fits the kinds in reach.

    As the operator will judge them: with the kind its status records, if the resource exists; from the
    nodes `pod_spec` may use, or (None) from the devices a claim admits.
    """
    name, kind = str(resource.metadata.get("name", "")), kinds.MULTIMODAL_DEPLOYMENT
    existing = checks.read(
        "metadata.name",
        f"MultimodalDeployment {name}",
        lambda: checks.client.get(kind.api_version, kind.kind, checks.namespace, name),
    )
    spec = resource.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    recorded = recorded_kind(previous_status(existing or {}))
    claim = claim_of(spec)
    if claim is not None:
        choice = kinds_by_claim(spec, claim, _devices(checks), recorded)
    else:
        assert pod_spec is not None, "a placement by node has its pod"
        choice = kinds_for(spec, kinds_in_reach(object_facts.pod_placement(pod_spec), nodes), recorded)
    if choice.refusal is not None:
        checks.add(Severity.ERROR, *choice.refusal)
        return
    if choice.notice:
        checks.add(Severity.WARNING, "spec.serving.pod", choice.notice)
    if choice.kind is not None:
        # The field that decides the kind: the serving placement, or the claim's selector.
        field = "spec.gpus.resourceClaim" if claim is not None else "spec.serving.pod.nodeSelector"
        checks.add(Severity.INFO, field, f"the engine is built for {choice.kind.describe()}")
    verdict = fit(plan.gpu_needs, choice.offers)
    if verdict.refusal is not None:
        checks.add(Severity.ERROR, *verdict.refusal)
    for field, said in verdict.warnings:
        checks.add(Severity.WARNING, field, said)


def _devices(checks: _Checks) -> Devices:
    """The devices DRA drivers publish, and their classes."""
    slices = checks.read(
        "spec.gpus.resourceClaim",
        "the ResourceSlices",
        lambda: checks.client.list(kinds.RESOURCE_SLICE.api_version, kinds.RESOURCE_SLICE.kind),
    )
    classes = checks.read(
        "spec.gpus.resourceClaim",
        "the DeviceClasses",
        lambda: checks.client.list(kinds.DEVICE_CLASS.api_version, kinds.DEVICE_CLASS.kind),
    )
    return Devices(
        devices=tuple(device for item in slices for device in object_facts.slice_devices(item)),
        classes=tuple(object_facts.device_class(item) for item in classes),
    )


def _surge(checks: _Checks, resource: MultimodalDeployment, pod_spec: dict[str, Any], nodes: Nodes) -> None:
    """Whether the rollout this change starts can surge now, or will go on in place (a change only)."""
    name = str(resource.metadata.get("name", ""))
    kind = kinds.MULTIMODAL_DEPLOYMENT
    exists = checks.read(
        "metadata.name",
        f"MultimodalDeployment {name}",
        lambda: checks.client.get(kind.api_version, kind.kind, checks.namespace, name),
    )
    if exists is None:
        return  # a first apply: no old pod to stop
    field = "spec.serving.rollout.strategy"
    rollout, replicas = resource.spec.serving.rollout, resource.spec.serving.replicas
    one = replicas == 1 and resource.spec.serving.autoscaling is None
    cost = "the model is down for a whole load" if one else "one pod fewer serves for each pod's load"
    if rollout.strategy == "InPlace":
        checks.add(
            Severity.INFO, field, f"InPlace: a change stops each pod before its replacement loads; {cost}"
        )
        return
    items = checks.read(
        "spec.serving.pod", "the pods", lambda: checks.client.list(kinds.POD.api_version, kinds.POD.kind)
    )
    held = dict(requested_by_node(object_facts.pod(item) for item in items))
    placement = object_facts.pod_placement(pod_spec)
    free = {node.name: node.gpus - held.get(node.name, 0) for node in match(placement, nodes).matching}
    room = sorted(node for node, gpus in free.items() if gpus >= placement.gpus)
    if room:
        spare = f"{room[0]} has {free[room[0]]} free {GPU_RESOURCE}"
        checks.add(Severity.INFO, field, f"a change surges: {spare} for a pod of {placement.gpus}")
        return
    offered = ", ".join(f"{node} {gpus}" for node, gpus in sorted(free.items())) or "none"
    if rollout.strategy == "Canary":
        outcome = (
            "this change's canary pod waits until one is (the stable pods serve on meanwhile, and the "
            "status says InsufficientGPUs)"
        )
    else:
        outcome = (
            "this change's rollout goes on in place after spec.serving.rollout.surgeWaitSeconds "
            f"({rollout.surge_wait_seconds} s), and {cost}"
        )
    pod = "canary pod" if rollout.strategy == "Canary" else "surge pod"
    checks.add(
        Severity.WARNING,
        field,
        f"no node the serving pods may use has {placement.gpus} free {GPU_RESOURCE} for a {pod} now "
        f"(free: {offered}): {outcome}",
    )


def preflight(
    resource: MultimodalDeployment,
    plan: AnyPlan,
    namespace: str,
    client: KubeClient,
    *,
    config: OperatorConfig | None = None,
) -> list[Finding]:
    """What `resource` (with its checked `plan`) needs from the cluster behind `client`, in `namespace`.

    `config` is the operator's settings where the spec leaves a default (the engine-cache claim and its
    StorageClass); the defaults when not given.
    """
    config = config or OperatorConfig()
    claim = cache.claim_name(resource, config)
    checks = _Checks(client, namespace)
    with contextlib.suppress(_UnreadableError):
        api, kind = kinds.NAMESPACE.api_version, kinds.NAMESPACE.kind
        found = checks.read(
            "metadata.namespace", f"namespace {namespace}", lambda: client.get(api, kind, None, namespace)
        )
        if found is None:
            checks.add(Severity.ERROR, "metadata.namespace", f"namespace {namespace} not found")
        else:
            _pod_security(checks, found)
    if not any(f.field == "metadata.namespace" and f.severity is Severity.ERROR for f in checks.findings):
        with contextlib.suppress(_UnreadableError):
            _references(checks, resource)
        with contextlib.suppress(_UnreadableError):
            _storage(checks, resource, claim, config)
    with contextlib.suppress(_UnreadableError):
        _nodes(checks, resource, plan, config)
    if not any(f.field == "metadata.namespace" and f.severity is Severity.ERROR for f in checks.findings):
        with contextlib.suppress(_UnreadableError):
            _quotas(checks, resource, plan)
    return checks.findings


def _quotas(checks: _Checks, resource: MultimodalDeployment, plan: AnyPlan) -> None:
    """Whether the namespace's ResourceQuotas leave room for the Job's pod and for every serving pod.

    A warning, not an error: what a quota's `used` counts changes as other pods come and go.
    """
    api, kind = kinds.RESOURCE_QUOTA.api_version, kinds.RESOURCE_QUOTA.kind
    items = checks.read(
        "metadata.namespace",
        f"the ResourceQuotas of namespace {checks.namespace}",
        lambda: checks.client.list(api, kind, checks.namespace),
    )
    found = tuple(object_facts.quota(item) for item in items)
    if not found:
        return
    spec, resources = resource.spec, plan.resources
    owner = f"MultimodalDeployment {resource.metadata.get('name')}"
    asks = []
    if resources.job is not None:
        priority = spec.build.pod.priority_class_name
        asks.append(pod_ask(resources.job, None, who=f"{resources.job.pod.lower()} pod", section="build",
                            priority_class=priority))  # fmt: skip
    demand, priority = serving_demand(spec), spec.serving.pod.priority_class_name
    if demand.pods:
        leader = pod_ask(
            resources.serving, resources.helper, who="", section="serving", priority_class=priority
        )
        parts = [(leader, demand.replicas)]
        if resources.worker is not None:
            worker = pod_ask(
                resources.worker, resources.helper, who="", section="serving", priority_class=priority
            )
            parts.append((worker, demand.pods - demand.replicas))
        asks.append(together(parts, f"{demand.pods} serving pod{'s' if demand.pods != 1 else ''}"))
    for ask in asks:
        refused = refusal(found, ask)
        if refused is not None:
            field = f"spec.{ask.section}.pod.resources"
            checks.add(Severity.WARNING, field, f"{refused.message(owner)}: {refused.fix()}")
    checks.add(
        Severity.INFO,
        f"namespace {checks.namespace}",
        f"ResourceQuota {', '.join(q.name for q in found)} counted against the pods' requests and limits",
    )
