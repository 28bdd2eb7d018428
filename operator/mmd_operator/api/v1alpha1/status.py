"""`status`: what the operator observed and decided, as it writes it to the status subresource.

Phase, conditions, derived limits and pod resources, the engine or weights served (and their Job's
progress), endpoints, the autoscaler's decision and the spec's warnings. Pure: imports pydantic and the
package's `schema`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from mmd_operator.api.v1alpha1.schema import Schema

# Status warnings: at most this many, each at most this long (a status always fits).
MAX_WARNINGS = 32
# Groups the status lists one by one (a resource's replicas across pods).
MAX_GROUPS = 32
WARNING_MAX_LENGTH = 4096


class ConditionStatus(StrEnum):
    """Status of a condition, as in metav1.Condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(Schema):
    """One aspect of the resource's state, in the shape of metav1.Condition."""

    type: str = Field(max_length=316)
    """Condition type: Validated, EngineReady (trtllm-serve: WeightsReady), ModelRepositoryReady
    (trtllm-serve: ServingConfigReady), Available, Autoscaling (with serving.autoscaling; never holds
    Ready back), Ready, and the kstatus pair Reconciling (True while work towards Ready goes on) and
    Stalled (True when Failed or Degraded)."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str = Field(max_length=1024)
    """CamelCase reason, for programs."""
    message: str = Field("", max_length=32768)
    """Explanation, for people."""
    last_transition_time: str | None = None
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = Field(None, ge=0)
    """The metadata.generation this condition was computed for."""


class DerivedLimits(Schema):
    """Build limits and serving sizes computed from the spec and the model type."""

    max_batch_size: int
    """Engine max batch size."""
    max_input_len: int
    """Engine max input length."""
    max_seq_len: int
    """Engine max sequence length."""
    max_beam_width: int
    """Engine max beam width."""
    max_num_tokens: int | None = None
    """Engine max tokens per step, when set."""
    max_multimodal_len: int | None = None
    """Prompt-table rows: batch x features per image x images."""
    max_encoder_input_len: int | None = None
    """Encoder input limit (encoder-decoder types)."""
    max_audio_seconds: int | None = None
    """Whisper types: the longest audio a request may carry, `maxEncoderInputLen` mel frames of 10 ms
    (3000: 30 s); TensorRT-LLM refuses longer audio."""
    vision_max_batch_size: int | None = None
    """Vision engine batch."""
    max_num_images: int | None = None
    """Images per request, as preprocessing expects."""
    triton_max_batch_size: int
    """Triton max_batch_size of every model."""
    triton_max_beam_width: int
    """Largest beam width `tensorrt_llm` serves; wider requests are refused."""
    cuda_memory_pool_bytes: int
    """CUDA memory pool on GPU 0."""


class PodResources(Schema):
    """The CPU and memory one kind of the resource's pods asks for (its main container; GPUs aside)."""

    pod: Literal["Build", "Download", "Serving", "Leader", "Worker"]
    """Build or Download: the Job's pod; Serving: a serving pod; Leader and Worker: the pods of a group,
    when a replica spans pods."""
    container: str = Field(max_length=63)
    """The container they are set on (an init container has its own small fixed figures)."""
    requests: dict[str, str] = Field(default_factory=dict, max_length=32)
    """What the scheduler reserves and a ResourceQuota counts: `cpu` and `memory`, and any other the spec
    names."""
    limits: dict[str, str] = Field(default_factory=dict, max_length=32)
    """What the kernel holds the container to: `memory` (a container above it is OOMKilled); no `cpu`
    unless the spec sets one."""
    from_spec: list[str] = Field(default_factory=list, max_length=8)
    """Which of `requests.cpu`, `requests.memory` and `limits.memory` the spec set; the others are
    derived."""
    basis: str = Field("", max_length=2048)
    """What the derived memory is made of and what it rests on (the checkpoint's size and where it comes
    from): the processes, a 20 % margin, and the memory-backed /dev/shm."""


class Phase(StrEnum):
    """Summary of where the resource is, for printer columns."""

    PENDING = "Pending"
    BUILDING = "Building"
    # trtllm-serve: the weights are being downloaded into the engine cache.
    DOWNLOADING = "Downloading"
    DEPLOYING = "Deploying"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class EngineSource(StrEnum):
    """Where a ready engine came from."""

    CACHE_HIT = "CacheHit"
    BUILT = "Built"


class ArtifactProgress(Schema):
    """How far the Job making the artifact is, from the progress line its pod printed last."""

    summary: str = Field(max_length=64)
    """In a few words, as the PROGRESS column shows it: `41% 57/140 GB`, `step 3/5 build-llm 12m`,
    `Stalled 16m: 41% 57/140 GB`."""
    percent: int | None = Field(None, ge=0, le=100)
    """A download's bytes done of the snapshot's total."""
    bytes_done: int | None = Field(None, ge=0)
    bytes_total: int | None = Field(None, ge=0)
    """From the Hub's file listing, before the first byte."""
    files_done: int | None = Field(None, ge=0)
    files_total: int | None = Field(None, ge=0)
    bytes_per_second: int | None = Field(None, ge=0)
    """Over the last half minute."""
    step: int | None = Field(None, ge=1)
    """A build's step, of `steps`, called `stepName`."""
    steps: int | None = Field(None, ge=1)
    step_name: str | None = None
    elapsed_seconds: int = Field(ge=0)
    """Since the Job's program started."""
    remaining_seconds: int | None = Field(None, ge=0)
    """An estimate, only once it can be made honestly: a download past 1 % of its bytes and 30 s, at the
    last half minute's rate. None for a build: its steps differ by orders of magnitude."""
    last_progress_time: str
    """When it last moved (a byte arrived; a build step began or wrote output), on the pod's clock."""
    stalled: bool = False
    """Nothing moved for the stall window (5 minutes for a download, 30 for a build)."""


class GpuStatus(Schema):
    """A kind of GPU, as NVIDIA's GPU feature discovery labels its nodes."""

    product: str = Field(max_length=253)
    """`nvidia.com/gpu.product`, e.g. NVIDIA-H100-80GB-HBM3."""
    compute_capability: str | None = Field(None, max_length=16)
    """`nvidia.com/gpu.compute.major` and `.minor`, e.g. 9.0; empty when the nodes do not say."""


class EngineStatus(Schema):
    """The engine this resource serves, or is building."""

    cache_key: str | None = None
    """Digest of every input that changes the engine bytes; names the cache entry."""
    claim: str | None = None
    """Engine-cache PersistentVolumeClaim holding the entry."""
    path: str | None = None
    """Directory of the entry inside the claim."""
    job: str | None = None
    """Build Job of this cacheKey, while there is one."""
    source: EngineSource | None = None
    """CacheHit (found in the engine index, no Job) or Built (by the Job); empty until ready."""
    progress: ArtifactProgress | None = None
    """The build's progress, while its Job runs."""
    gpu: GpuStatus | None = None
    """The kind of GPU the engine is built for, and its pods run on; empty when no node says (no GPU
    feature discovery): the engine is then built for whatever GPU its build pod lands on."""
    tensorrt_llm_version: str | None = Field(None, max_length=32)
    """The engine path's release the engine is built with and served by (`spec.engine.tensorrtLlmVersion`,
    or the operator's default)."""


class WeightsSource(StrEnum):
    """Where the weights a trtllm-serve resource serves came from."""

    CACHE_HIT = "CacheHit"
    DOWNLOADED = "Downloaded"
    # A model.source.pvc claim: served where it lies, nothing downloaded.
    VOLUME = "Volume"


class WeightsStatus(Schema):
    """The Hugging Face snapshot a trtllm-serve resource serves, or is downloading."""

    repo: str | None = None
    """Repository, as the spec names it."""
    revision: str | None = None
    """Revision, as the spec names it."""
    commit: str | None = None
    """The commit the revision resolved to (recorded in the claim's index the first time, then reused)."""
    download_key: str | None = None
    """Digest of repository and revision: names the download Job."""
    snapshot_key: str | None = None
    """Digest of repository and commit: names the snapshot's directory in the claim."""
    claim: str | None = None
    """Engine-cache PersistentVolumeClaim holding the snapshot (or the model.source.pvc claim)."""
    path: str | None = None
    """Where the serving pods find the model."""
    job: str | None = None
    """The download Job, while there is one."""
    source: WeightsSource | None = None
    """CacheHit (found in the index, no Job), Downloaded (by the Job) or Volume; empty until ready."""
    progress: ArtifactProgress | None = None
    """The download's progress, while its Job runs."""


class Endpoints(Schema):
    """In-cluster addresses of the Triton server."""

    http: str | None = None
    """HTTP/REST (KServe v2 protocol, generate endpoints; on trtllm-serve the OpenAI API, `/v1`)."""
    grpc: str | None = None
    """gRPC (KServe v2 protocol, streaming)."""
    metrics: str | None = None
    """Prometheus metrics of the server."""


class AutoscalingStatus(Schema):
    """The serving Deployment's HorizontalPodAutoscaler, as it last reported (with serving.autoscaling)."""

    horizontal_pod_autoscaler: str | None = None
    """Its name (`kubectl describe hpa <name>` shows the metric's value and the autoscaler's events)."""
    metric: str | None = None
    """The custom metric it reads (custom.metrics.k8s.io, served by prometheus-adapter)."""
    desired_replicas: int | None = None
    """Serving pods it wants now."""
    current_replicas: int | None = None
    """Serving pods it saw at its last look."""
    last_scale_time: str | None = None
    """When it last changed the number of serving pods (RFC 3339)."""


class ServingRevision(Schema):
    """One revision of the serving pods: the pod template the Deployment controller hashed, what it runs."""

    pod_template_hash: str = Field(max_length=64)
    """The `pod-template-hash` label of its pods (its ReplicaSet is `<name>-<hash>`)."""
    cache_key: str | None = Field(None, max_length=128)
    """The engine cacheKey, or the weights' snapshot key, its pods use."""
    content: str | None = Field(None, max_length=253)
    """The ConfigMap its pods mount: the model repository, or trtllm-serve's `--config`."""


class RollbackStatus(Schema):
    """A revision that did not start, undone: the last Ready one serves until the spec or retry changes."""

    generation: int
    """The metadata.generation whose revision was undone."""
    failed: str = Field(max_length=64)
    """The pod-template-hash of the revision that did not start."""
    message: str = Field(max_length=4096)
    """The pod, what its container last said, and the revision that serves."""
    retry: str | None = Field(None, max_length=253)
    """The value of the `serving.multimodal.dev/retry-rollout` annotation when it was undone."""


class CanaryVerdict(StrEnum):
    """Where a canary's analysis stands."""

    ANALYSING = "Analysing"
    PASSED = "Passed"
    FAILED = "Failed"


class CanaryFigures(Schema):
    """What Prometheus showed of the canary and of the stable pods over the analysis so far."""

    requests: int = Field(ge=0)
    """Requests the canary answered."""
    failure_ratio: float | None = None
    """Share of the canary's requests that failed (None: the runtime counts no failures)."""
    stable_failure_ratio: float | None = None
    """The same of the stable pods."""
    latency_seconds: float | None = None
    """The canary's mean request latency."""
    stable_latency_seconds: float | None = None
    """The stable pods' mean request latency."""


class CanaryStatus(Schema):
    """The analysis of a Canary rollout's new revision: kept here, so another operator resumes it."""

    revision: str = Field(max_length=64)
    """Digest of the new revision's pod template (the Deployments' template-digest annotation)."""
    generation: int
    """The metadata.generation that asked for it."""
    gate: Literal["Prometheus", "Readiness"]
    """What judges it: Prometheus figures, or without a Prometheus URL readiness alone."""
    verdict: CanaryVerdict
    """Analysing, Passed (promoted: the rest roll to it) or Failed (rolled back)."""
    ready_since: str | None = None
    """When the canary pod was first seen Ready (RFC 3339): the analysis runs from then."""
    figures: CanaryFigures | None = None
    """The last figures read."""
    message: str = Field("", max_length=4096)
    """The verdict in words, with the figures and thresholds."""


class RevisionStatus(Schema):
    """One revision that has pods now: the stable one, or a canary."""

    role: Literal["Stable", "Canary"]
    """Stable: the serving Deployment's; Canary: the new revision under analysis."""
    revision: str | None = Field(None, max_length=64)
    """The `pod-template-hash` of its pods."""
    cache_key: str | None = Field(None, max_length=128)
    """The engine cacheKey, or the weights' snapshot key, its pods use."""
    content: str | None = Field(None, max_length=253)
    """The ConfigMap its pods mount."""
    pods: int = Field(ge=0)
    """Its pods."""
    ready: int = Field(ge=0)
    """Its ready pods."""
    share: int = Field(ge=0, le=100)
    """Its share of the ready pods behind the Service, in percent: the share of requests it gets."""
    verdict: CanaryVerdict | None = None
    """A canary's analysis verdict so far."""


class GroupStatus(Schema):
    """One group of a replica across pods (a LeaderWorkerSet group): its pods ready, and what is missing."""

    index: int = Field(ge=0)
    """The group's index (`leaderworkerset.sigs.k8s.io/group-index`)."""
    pods: int = Field(ge=1)
    """Pods of the group: its leader and its workers."""
    ready_pods: int = Field(ge=0)
    """Its ready pods; the group serves when all are."""
    message: str | None = Field(None, max_length=512)
    """Each pod that is not ready, with the ranks it runs and why (a lost worker's node named)."""
    restarting: bool | None = None
    """The group served, then lost a pod: it is being recreated whole (the resource is Degraded)."""


class MultimodalDeploymentStatus(Schema):
    """Observed state, written by the operator."""

    observed_generation: int | None = None
    """The metadata.generation the status describes."""
    phase: Phase | None = None
    """Pending, Building (trtllm-serve: Downloading), Deploying, Ready, Degraded or Failed."""
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    """Validated, EngineReady, ModelRepositoryReady, Available and the summary Ready."""
    derived: DerivedLimits | None = None
    """Build limits and sizes computed from the spec."""
    pod_resources: list[PodResources] | None = Field(None, max_length=4)
    """The CPU and memory each kind of pod asks for: derived from what runs in it, or set in
    `spec.build.pod.resources` and `spec.serving.pod.resources`."""
    engine: EngineStatus | None = None
    """The engine being served or built (triton-trtllm-engine)."""
    weights: WeightsStatus | None = None
    """The snapshot being served or downloaded (trtllm-serve)."""
    model_repository: str | None = None
    """ConfigMap holding the rendered model repository the pods use (on trtllm-serve: the generated
    `--config` YAML)."""
    endpoints: Endpoints | None = None
    """Where to send requests."""
    replicas: int | None = None
    """Serving replicas wanted: spec.serving.replicas, or with autoscaling what the autoscaler set."""
    pods_per_replica: int | None = None
    """Pods of one replica: 1, or the size of its groups when the world spans pods."""
    groups: list[GroupStatus] | None = Field(None, max_length=MAX_GROUPS)
    """With a replica across pods: each group, its pods ready and what is missing (the first 32)."""
    updated_replicas: int | None = None
    """Serving pods running the current model repository and engine."""
    ready_replicas: int | None = None
    """Serving pods ready."""
    selector: str | None = None
    """Label selector of the serving pods (for the scale subresource and autoscalers)."""
    autoscaling: AutoscalingStatus | None = None
    """The autoscaler's decision, with serving.autoscaling (the Autoscaling condition says it in words)."""
    stable_revision: ServingRevision | None = None
    """The last revision whose every pod was ready: what a revision that does not start is undone to."""
    rollback: RollbackStatus | None = None
    """The revision undone for this generation, if one was (phase Degraded, reason RolledBack)."""
    rollout: str | None = Field(None, max_length=64)
    """The rollout in a few words, for `kubectl get`: New (no serving pods yet), Stable, Surging, InPlace,
    Canary starting, Canary 40/120s, Promoting, RolledBack."""
    canary: CanaryStatus | None = None
    """The analysis of the last Canary rollout's revision (strategy Canary)."""
    progress: str | None = Field(None, max_length=64)
    """The running build's or download's progress in a few words, for `kubectl get` (its details are in
    `engine.progress` or `weights.progress`)."""
    revisions: list[RevisionStatus] | None = Field(None, max_length=4)
    """The revisions that have pods, with their share of the ready pods."""
    warnings: list[Annotated[str, Field(max_length=WARNING_MAX_LENGTH)]] | None = Field(
        None, max_length=MAX_WARNINGS
    )
    """Traps the spec walks into that the API server admits but a real cluster punishes (a ReadWriteOnce
    engine cache with several replicas, a model revision that is not a commit, ...), one `field path:
    message` each: the words `kubectl apply` prints where the chart's admission policy is installed, and
    `mmctl validate` offline. A note only: they never hold Ready back."""
