"""What the operator observed about a MultimodalDeployment's world, as small frozen values.

The kube adapter reduces live objects (Jobs, pods, Deployments, claims, the engine index) to these facts;
the pure layers (`desired`, `status`) decide from them alone. Keeping them small keeps the operator's
cache small at a thousand resources, and keeping them plain makes every decision testable without a
cluster. Nodes are facts too (`kube.nodes`), and the kind of GPU a node offers (`GpuKind`). Pure:
imports only the builder's result and progress formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from engine_builder.progress_format import BuildProgress, DownloadProgress
from engine_builder.result_format import BuildSucceeded
from engine_builder.weights_format import DownloadSucceeded


@dataclass(frozen=True, order=True)
class OwnerRef:
    """A MultimodalDeployment as an owner of (or user of) a child object."""

    name: str
    uid: str


@dataclass(frozen=True)
class Meta:
    """The metadata of a child that decisions read."""

    name: str
    uid: str = ""
    resource_version: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    owners: tuple[OwnerRef, ...] = ()
    created: datetime | None = None
    deleting: bool = False

    def label(self, key: str) -> str | None:
        """The value of label `key`, if set."""
        return dict(self.labels).get(key)

    def annotation(self, key: str) -> str | None:
        """The value of annotation `key`, if set."""
        return dict(self.annotations).get(key)

    def owned_by(self, uid: str) -> bool:
        """Whether the resource with `uid` is one of this object's owners."""
        return any(owner.uid == uid for owner in self.owners)


@dataclass(frozen=True)
class Toleration:
    """A taint a pod tolerates (core/v1 Toleration; `toleration_seconds` changes nothing for placement)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True)
class Taint:
    """A node's taint."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class NodeRequirement:
    """One requirement of a required node-affinity term: a label (or, with `field`, metadata.name)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False


@dataclass(frozen=True)
class PodPlacement:
    """What the scheduler matches a pod against nodes with.

    Its selector, node affinity and tolerations, and the GPUs, CPU (millicores) and memory (bytes) it
    requests.
    """

    gpus: int = 0
    node_selector: tuple[tuple[str, str], ...] = ()
    # requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: any term, all of its requirements.
    affinity_terms: tuple[tuple[NodeRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    cpu_millis: int = 0
    memory_bytes: int = 0


@dataclass(frozen=True)
class NodeFacts:
    """A node that offers GPUs: what placement reads of it."""

    name: str
    # Allocatable nvidia.com/gpu.
    gpus: int
    labels: tuple[tuple[str, str], ...] = ()
    # The NoSchedule and NoExecute taints (a cordoned node's included), the only ones that keep pods off.
    taints: tuple[Taint, ...] = ()
    # Allocatable CPU (millicores) and memory (bytes); None when the node does not say.
    cpu_millis: int | None = None
    memory_bytes: int | None = None


# The labels NVIDIA's GPU feature discovery puts on a GPU node.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
GPU_COMPUTE_MINOR_LABEL = "nvidia.com/gpu.compute.minor"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"


@dataclass(frozen=True, order=True)
class GpuKind:
    """One kind of GPU, what an engine is built for.

    The product as GPU feature discovery names it, and its compute capability ("9.0"; "" when nothing
    says).
    """

    product: str
    compute_capability: str = ""

    def describe(self) -> str:
        """`NVIDIA-H100-80GB-HBM3 (compute capability 9.0)`."""
        return f"{self.product} (compute capability {self.compute_capability or 'unknown'})"

    @classmethod
    def of_labels(cls, labels: Mapping[str, str]) -> GpuKind | None:
        """The kind a node's labels say it offers, or None without the product label."""
        product = labels.get(GPU_PRODUCT_LABEL)
        if not product:
            return None
        major, minor = labels.get(GPU_COMPUTE_MAJOR_LABEL, ""), labels.get(GPU_COMPUTE_MINOR_LABEL, "")
        return cls(product, f"{major}.{minor}" if major.isdigit() and minor.isdigit() else "")


class VersionText(str):
    """A device attribute a ResourceSlice states as a version (`{version: 9.0.0}`), not a string."""

    __slots__ = ()


# The attributes NVIDIA's DRA driver publishes for a GPU, in its domain.
NVIDIA_DRA_DOMAIN = "gpu.nvidia.com"
# The DeviceClass its chart installs, which a claim names unless the spec names another.
DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"
DRA_PRODUCT_ATTRIBUTE = "productName"
DRA_CAPABILITY_ATTRIBUTE = "cudaComputeCapability"


@dataclass(frozen=True)
class DeviceFacts:
    """A device a DRA driver publishes in a ResourceSlice: its node, driver, attributes and capacity.

    Attribute and capacity names are qualified (`gpu.nvidia.com/productName`): the slice's unqualified
    names belong to its driver's domain. Values are as the slice states them: a string, an integer, a
    boolean, or a version string (`9.0.0`); capacities as quantities.
    """

    node: str
    driver: str
    name: str
    attributes: tuple[tuple[str, str | int | bool], ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()

    def attribute(self, name: str) -> str | int | bool | None:
        """The attribute `name` of the driver's domain."""
        return dict(self.attributes).get(f"{self.driver}/{name}")

    def kind(self) -> GpuKind | None:
        """The kind of GPU it is, named as GPU feature discovery names it (spaces made hyphens)."""
        product = self.attribute(DRA_PRODUCT_ATTRIBUTE)
        if not isinstance(product, str) or not product:
            return None
        version = str(self.attribute(DRA_CAPABILITY_ATTRIBUTE) or "")
        major, _, rest = version.partition(".")
        minor = rest.partition(".")[0]
        capability = f"{major}.{minor}" if major.isdigit() and minor.isdigit() else ""
        return GpuKind("-".join(product.split()), capability)


@dataclass(frozen=True)
class DeviceClassFacts:
    """A DeviceClass: its name and the CEL selectors every device of it meets."""

    name: str
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Devices:
    """The devices every ResourceSlice publishes, and the DeviceClasses."""

    devices: tuple[DeviceFacts, ...] = ()
    classes: tuple[DeviceClassFacts, ...] = ()


@dataclass(frozen=True)
class Nodes:
    """The cluster's nodes as placement sees them: those with GPUs, and how many there are in all."""

    total: int
    with_gpus: tuple[NodeFacts, ...] = ()
    # GPUs the operator's own build and serving pods request, by node (pods the operator watches).
    requested: tuple[tuple[str, int], ...] = ()


class PodPhase(StrEnum):
    """A pod's phase, as Kubernetes reports it."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class PodFacts:
    """One pod of a Job (a build or a download) or of a serving Deployment."""

    meta: Meta
    phase: PodPhase
    ready: bool = False
    # The scheduler's reason and message when it cannot place the pod (PodScheduled=False).
    unschedulable: str | None = None
    # A container waiting in CrashLoopBackOff (or failing to start), with what it last said.
    crash_loop: str | None = None
    # A container the kernel killed for going over its memory limit (OOMKilled), now or at its last end:
    # which, and the limit (`container tritonserver, over its memory limit of 28Gi`).
    oom_killed: str | None = None
    # Each waiting container's reason and the kubelet's message, while it waits (ContainerCreating;
    # CreateContainerConfigError, `secret "hf" not found`), init containers first.
    waiting: tuple[tuple[str, str], ...] = ()
    restarts: int = 0
    started: datetime | None = None
    # The termination message of a finished container, and its exit code.
    termination_message: str | None = None
    exit_code: int | None = None
    # The content ConfigMap the pod mounts (serving pods): the model repository, or `--config`.
    configmap: str | None = None
    node: str | None = None
    # Ready=False while its containers are ready: the node controller's mark when the node stopped
    # reporting (a kubelet never writes that combination).
    node_lost: bool = False
    # The nvidia.com/gpu it asks for.
    gpus: int = 0
    # The ResourceClaimTemplates it took its claims from (spec.gpus.resourceClaim).
    claim_templates: tuple[str, ...] = ()
    # What the scheduler matched it against nodes with: kept only while it cannot be scheduled.
    placement: PodPlacement | None = None


@dataclass(frozen=True)
class JobFacts:
    """A Job that makes an artifact: a build, or a weights download."""

    meta: Meta
    succeeded: bool = False
    failed: bool = False
    # The Job controller's reason and message when it gave up (BackoffLimitExceeded, DeadlineExceeded).
    failure: str | None = None
    started: datetime | None = None
    finished: datetime | None = None
    # The ResourceClaimTemplates its pod template takes claims from.
    claim_templates: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimFacts:
    """The engine-cache PersistentVolumeClaim."""

    meta: Meta
    phase: str = "Pending"
    # Whether the operator created it (then it manages its owners); a user's claim is only read.
    managed: bool = False
    access_modes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeploymentFacts:
    """The serving workload as its controller last reported it.

    A Deployment, or a LeaderWorkerSet whose replicas are groups of pods.
    """

    meta: Meta
    generation: int = 0
    observed_generation: int = 0
    replicas: int = 0
    status_replicas: int = 0
    updated_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    # The Progressing condition's reason when the controller gave up (ProgressDeadlineExceeded).
    progress_failure: str | None = None
    # The ReplicaFailure condition's message: why the ReplicaSet controller could not create a pod (a
    # ResourceQuota's refusal, say); a Deployment's only.
    replica_failure: str | None = None
    # The content ConfigMap its pod template mounts.
    configmap: str | None = None
    # Who owns spec.replicas in server-side apply terms: (field manager, operation) pairs, such as
    # ("mmd-operator", "Apply") or the autoscaler's ("kube-controller-manager", "Update").
    replicas_managers: tuple[tuple[str, str], ...] = ()
    # The digest of the pod template the operator rendered (`labels.TEMPLATE_DIGEST`), if it says.
    template_digest: str | None = None
    # Its kind, and the pods of one replica (a LeaderWorkerSet's group size; 1 for a Deployment).
    kind: str = "Deployment"
    group_size: int = 1
    # The ResourceClaimTemplates its pod templates take claims from.
    claim_templates: tuple[str, ...] = ()


@dataclass(frozen=True)
class AutoscalerCondition:
    """One condition of a HorizontalPodAutoscaler (AbleToScale, ScalingActive, ScalingLimited)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class AutoscalerFacts:
    """The serving Deployment's HorizontalPodAutoscaler, as its controller last reported it."""

    meta: Meta
    desired_replicas: int | None = None
    current_replicas: int | None = None
    last_scale_time: datetime | None = None
    conditions: tuple[AutoscalerCondition, ...] = ()

    def condition(self, kind: str) -> AutoscalerCondition | None:
        """The condition of type `kind`, if reported."""
        return next((c for c in self.conditions if c.type == kind), None)


@dataclass(frozen=True)
class QuotaFacts:
    """A ResourceQuota of the namespace: what it allows, what is counted against it, whom it counts."""

    name: str
    # Resource name (`requests.memory`, `pods`) to quantity, as written.
    hard: tuple[tuple[str, str], ...] = ()
    used: tuple[tuple[str, str], ...] = ()
    # Its scopes and scope selector, as (scope name, operator, values): `spec.scopes` as Exists.
    scopes: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


class Missing(StrEnum):
    """A reference in the spec that points at nothing."""

    SECRET = "SecretNotFound"
    SECRET_KEY = "SecretKeyNotFound"
    SOURCE_CLAIM = "SourceClaimNotFound"
    # A replica across pods needs the LeaderWorkerSet API, which the cluster does not serve.
    WORKLOAD_API = "LeaderWorkerSetNotInstalled"
    # ... and claims its pods on several nodes can mount: ReadWriteMany.
    SHARED_CLAIM = "ClaimNotShared"


@dataclass(frozen=True)
class MissingReference:
    """What is missing, where the spec names it, how to say it, and what to do about it."""

    kind: Missing
    field: str
    message: str
    fix: str = ""


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile of one resource observed.

    `artifact` is the engine index's entry of what the resource's plan needs made (an engine built, or
    on trtllm-serve the snapshot of the revision's commit); `job` and `job_pods` are the Job that makes it
    (a build, or a download) in the resource's claim; `stale_jobs` and `stale_claims` are children the
    resource owns that its current spec no longer uses; `claim_templates` are all of its
    ResourceClaimTemplates, the current spec's and earlier ones.
    """

    now: datetime
    claim: ClaimFacts | None = None
    artifact: BuildSucceeded | DownloadSucceeded | None = None
    # trtllm-serve: the commit the revision resolved to (known from the index, or the revision itself).
    resolved_commit: str | None = None
    job: JobFacts | None = None
    job_pods: tuple[PodFacts, ...] = ()
    # The last progress line the Job's running pod printed (read from its log while it runs).
    job_progress: DownloadProgress | BuildProgress | None = None
    # A Job pod waits in ContainerCreating while the spec names a token Secret, and the kubelet has said
    # nothing of it yet: its FailedMount events are read again at the next look.
    job_pod_mounting: bool = False
    missing: tuple[MissingReference, ...] = ()
    # The resource's content ConfigMaps: its model repositories, or trtllm-serve's `--config`.
    configmaps: tuple[Meta, ...] = ()
    deployment: DeploymentFacts | None = None
    serving_pods: tuple[PodFacts, ...] = ()
    stale_jobs: tuple[JobFacts, ...] = ()
    stale_claims: tuple[ClaimFacts, ...] = ()
    claim_templates: tuple[Meta, ...] = ()
    # The serving pods' NetworkPolicy, if one exists (there is one only while the spec asks for it).
    network_policy: Meta | None = None
    # The serving Deployment's HorizontalPodAutoscaler and the serving pods' PodDisruptionBudget, if any.
    autoscaler: AutoscalerFacts | None = None
    disruption_budget: Meta | None = None
    # A Canary rollout's Deployment of the new revision, while there is one.
    canary: DeploymentFacts | None = None
    # The serving workload of the other kind (a Deployment where the spec now wants a LeaderWorkerSet,
    # or the reverse), left from before the spec changed how many pods a replica takes.
    retired_workload: DeploymentFacts | None = None
    # The nodes, read only while one of the resource's pods cannot be scheduled and the operator may
    # read them; None otherwise.
    nodes: Nodes | None = None
    # The namespace's ResourceQuotas, read only while the Job or the serving workload lacks pods and the
    # operator may read them; None otherwise.
    quotas: tuple[QuotaFacts, ...] | None = None


@dataclass(frozen=True)
class PodCounts:
    """One serving pod's requests over a window, as Prometheus counted them."""

    answered: float = 0.0
    # None: the runtime counts no failed requests.
    failed: float | None = None
    # Seconds the answered requests took, added up.
    latency_seconds: float = 0.0


@dataclass(frozen=True)
class Reading:
    """What Prometheus said of the serving pods over a canary's analysis window, or why it said nothing."""

    counts: Mapping[str, PodCounts] = field(default_factory=dict)
    error: str | None = None
