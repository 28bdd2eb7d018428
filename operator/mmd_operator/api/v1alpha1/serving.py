"""`spec.serving`: how the engines (or, on trtllm-serve, the snapshot) are served, and its parts.

The queue, Python model instances, LoRA cache, health checks, NetworkPolicy and autoscaler of the serving
pods. Rules on one part sit on its model; the rules across the spec are in `rules`. Pure: imports
pydantic, `mmd_operator.knowledge`, `mmd_operator.scaling_metrics` and the package's `cel`, `schema` and
`pods`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from mmd_operator.api.v1alpha1.cel import REQUIRED, cel_rule
from mmd_operator.api.v1alpha1.pods import PodSettings
from mmd_operator.api.v1alpha1.schema import Quantity, Schema, StringMap
from mmd_operator.knowledge import Modality
from mmd_operator.scaling_metrics import ScalingMetric


class ProbeSpec(Schema):
    """Health checks of the serving pods. Loading engines takes minutes; the defaults allow 30."""

    startup_timeout_seconds: int = Field(1800, ge=10, le=86400)
    """Longest a pod may take to load every model before it is restarted (startup probe budget)."""
    liveness_timeout_seconds: int = Field(5, ge=2, le=120)
    """Timeout of one liveness or readiness check; more than a second, since a busy server answers late."""
    liveness_failure_threshold: int = Field(3, ge=1, le=100)
    """Failed liveness checks (10 s apart) after which the container is restarted."""


RolloutStrategy = Literal["SurgeWhenPossible", "InPlace", "Canary"]


class CanarySpec(Schema):
    """How a Canary rollout judges the new revision's one pod against the stable revision's pods."""

    analysis_seconds: int = Field(120, ge=10, le=86400)
    """How long the canary pod serves, from its first Ready, before it is promoted; a figure past its
    threshold rolls it back sooner."""
    max_failure_ratio: float = Field(0.05, ge=0, le=1)
    """Share of the canary's requests that may fail (Triton: `nv_inference_request_failure` of the
    entry models). trtllm-serve 1.2.1 counts no failures: there the canary's errors are not judged."""
    max_latency_ratio: float = Field(1.5, ge=1, le=1000)
    """How many times the stable revision's mean request latency the canary's may reach."""
    min_requests: int = Field(10, ge=1, le=1_000_000)
    """Requests the canary must have answered before its figures are judged; with fewer by the end of the
    analysis it is promoted on readiness alone, and the status says so."""


class RolloutSpec(Schema):
    """How a change (a new engine, snapshot or serving configuration) replaces the serving pods."""

    strategy: RolloutStrategy = "SurgeWhenPossible"
    """SurgeWhenPossible: each new pod starts beside the old ones, which serve until it is ready, so a
    change costs no moment without a ready pod; when the surge pod cannot be scheduled (no free GPU it may
    use) for `surgeWaitSeconds`, the rollout goes on in place, and the status and an Event name the pod
    that stops first and why, before it stops. InPlace: each old pod stops before its replacement loads,
    so a cluster never holds GPUs beyond the replicas; with one replica the model is down for a whole
    load. Canary: the new revision first runs as one pod beside the stable ones, behind the same
    Service, and is judged for `canary.analysisSeconds` on Prometheus figures (the operator's
    MMD_PROMETHEUS_URL; without one, on readiness alone); then it is promoted (the rest roll as with
    SurgeWhenPossible) or rolled back (phase Degraded, reason RolledBack, with the figures)."""
    surge_wait_seconds: int = Field(60, ge=0, le=3600)
    """How long a surge pod may wait for the scheduler before the rollout goes on in place."""
    canary: CanarySpec = Field(default_factory=CanarySpec)
    """The canary's analysis, with strategy Canary."""


class QueueSpec(Schema):
    """Triton dynamic batching."""

    max_queue_delay_microseconds: int = Field(0, ge=0, le=10_000_000)
    """How long `tensorrt_llm` waits to form a batch."""
    preprocessing_max_queue_delay_microseconds: int = Field(20000, ge=0, le=10_000_000)
    """How long `preprocessing` and `multimodal_encoders` wait to form a batch."""
    max_queue_size: int = Field(0, ge=0, le=1_000_000)
    """Requests queued per model before new ones are rejected; 0 means no limit."""


class InstanceCounts(Schema):
    """Python model instances (CPU) per serving pod."""

    preprocessing: int = Field(1, ge=1, le=64)
    """Instances of `preprocessing`."""
    postprocessing: int = Field(1, ge=1, le=64)
    """Instances of `postprocessing`."""
    bls: int | None = Field(None, ge=1, le=256)
    """Instances of `tensorrt_llm_bls` (about the engine batch size for full concurrency) or of
    `whisper_bls`. Defaults to 1, and to 8 for whisper_bls."""


class LoraCacheSpec(Schema):
    """LoRA adapter cache of `tensorrt_llm`. Defaults per model type."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.optimalAdapterSize) || !has(self.maxAdapterSize) || "
                    "self.optimalAdapterSize <= self.maxAdapterSize",
                    "optimalAdapterSize ({self.optimalAdapterSize}) must not exceed maxAdapterSize "
                    "({self.maxAdapterSize})",
                    field_path=".optimalAdapterSize",
                )
            ]
        }
    )

    optimal_adapter_size: int | None = Field(None, ge=1, le=4096)
    """Adapter size (rank x layers x modules) the cache pages are sized for."""
    max_adapter_size: int | None = Field(None, ge=1, le=4096)
    """Largest adapter the cache accepts."""
    gpu_memory_fraction: float | None = Field(None, gt=0, le=1)
    """Share of free GPU memory for cached adapters."""
    host_memory_bytes: int | None = Field(None, ge=0)
    """Host memory for cached adapters."""


# An IPv4 or IPv6 block in CIDR notation (the API server checks the address itself).
CIDR_PATTERN = (
    r"^(([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])"
    r"|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*/([0-9]|[1-9][0-9]|1[01][0-9]|12[0-8]))$"
)
LABEL_KEY_MAX_LENGTH = 317


class LabelSelectorRequirement(Schema):
    """One expression of a label selector (metav1.LabelSelectorRequirement)."""

    key: str = Field(min_length=1, max_length=LABEL_KEY_MAX_LENGTH)
    """Label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """In, NotIn, Exists or DoesNotExist."""
    values: list[Annotated[str, Field(max_length=63, description="A label value.")]] = Field(
        default_factory=list, max_length=64
    )
    """Values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(Schema):
    """A label selector (metav1.LabelSelector). Empty selects everything."""

    match_labels: StringMap = Field(default_factory=dict)
    """Labels that must all be present with these values."""
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=32)
    """Expressions that must all hold."""


class NetworkClient(Schema):
    """Pods allowed to send inference requests.

    Those matching `podSelector` (in the resource's namespace when no `namespaceSelector` is given),
    every pod of the namespaces matching `namespaceSelector`, or, with both, the matching pods in the
    matching namespaces.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "has(self.podSelector) || has(self.namespaceSelector)",
                    "a client needs a podSelector, a namespaceSelector or both",
                    reason=REQUIRED,
                )
            ]
        }
    )

    pod_selector: LabelSelector | None = None
    """Labels of the client pods."""
    namespace_selector: LabelSelector | None = None
    """Labels of the client namespaces (e.g. `kubernetes.io/metadata.name: apps`)."""


class NetworkPort(Schema):
    """A destination port (or range) and protocol."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.endPort) || self.endPort >= self.port",
                    "endPort ({self.endPort}) must not be below port ({self.port})",
                    field_path=".endPort",
                )
            ]
        }
    )

    port: int = Field(ge=1, le=65535)
    """Port number (the first of the range with `endPort`)."""
    end_port: int | None = Field(None, ge=1, le=65535)
    """Last port of a range."""
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    """TCP, UDP or SCTP."""


class EgressAllowance(Schema):
    """Destinations outside the cluster's DNS that the serving pods may connect to."""

    cidr: str = Field(pattern=CIDR_PATTERN, max_length=64)
    """Address block, e.g. `203.0.113.0/24` for an image host, `0.0.0.0/0` for anywhere."""
    except_cidrs: list[
        Annotated[str, Field(pattern=CIDR_PATTERN, max_length=64, description="A block kept closed.")]
    ] = Field(default_factory=list, max_length=32)
    """Blocks inside `cidr` that stay closed, e.g. the pod and service networks or `169.254.169.254/32`
    (cloud metadata) when `cidr` is wide."""
    ports: list[NetworkPort] = Field(default_factory=list, max_length=32)
    """Ports allowed on those addresses; empty allows every port."""


def _kube_system() -> LabelSelector:
    return LabelSelector(match_labels={"kubernetes.io/metadata.name": "kube-system"})


def _monitoring() -> LabelSelector:
    return LabelSelector(match_labels={"kubernetes.io/metadata.name": "monitoring"})


class NetworkPolicySpec(Schema):
    """A NetworkPolicy for the serving pods, named like the resource and owned by it.

    It denies all traffic to and from the pods except HTTP (8000) and gRPC (8001) from `clients`,
    metrics (8002) from `monitoringNamespaceSelector`, DNS (UDP and TCP 53) to `dnsNamespaceSelector`,
    and `egress`. Removing this section deletes the policy. Only a network plugin that enforces
    NetworkPolicy (Calico, Cilium, ...) makes it effective; kubelet probes come from the node and
    are not affected on common plugins.
    """

    clients: list[NetworkClient] = Field(default_factory=list, max_length=32)
    """Who may send inference requests (HTTP and gRPC). Empty: nobody."""
    monitoring_namespace_selector: LabelSelector = Field(default_factory=_monitoring)
    """Namespaces whose pods may scrape the metrics port (default: the namespace `monitoring`)."""
    dns_namespace_selector: LabelSelector = Field(default_factory=_kube_system)
    """Namespaces whose pods answer DNS (default: `kube-system`, where CoreDNS runs). A resolver
    elsewhere (a node-local cache on a link-local address) needs an `egress` entry for port 53."""
    egress: list[EgressAllowance] = Field(default_factory=list, max_length=32)
    """Where else the pods may connect. Empty: nowhere but DNS. With `imageUrlInput` on, list the
    image hosts here: the server fetches URLs only from these."""


class ScalingMetricSpec(Schema):
    """The metric the autoscaler follows, per serving pod, and the value it keeps it at."""

    name: ScalingMetric
    """QueueTimePerRequest: how long a request waited in the server's queue before it ran, averaged over
    the requests of the last minute (Triton: `nv_inference_queue_duration_us` of every model, a request
    waits in the queues of the models its entry point calls, over `nv_inference_request_success` of the
    entry models ensemble, tensorrt_llm_bls and whisper_bls; trtllm-serve: its
    `trtllm_request_queue_time_seconds` histogram). PendingRequests: requests the server holds that have
    not started (Triton's `nv_inference_pending_request_count` of every model; not on trtllm-serve,
    whose 1.2.1 metrics have no such gauge). Both say a GPU server is saturated before its latency does;
    CPU says nothing of it. The autoscaler reads them from the custom metrics API: a prometheus-adapter
    with the rules of docs/autoscaling.md."""
    target: int = Field(ge=1, le=3_600_000)
    """The value per pod the autoscaler keeps the metric at, adding pods above it and removing them below:
    milliseconds for QueueTimePerRequest, requests for PendingRequests."""


class AutoscalingSpec(Schema):
    """A HorizontalPodAutoscaler (autoscaling/v2) on the serving Deployment, owned by the resource.

    It sets the Deployment's replicas between minReplicas and maxReplicas from the metric; the operator
    then leaves `replicas` of the Deployment to it (and takes it back when this section is removed).
    There is no scale-to-zero: a GPU server takes minutes to load its model, and a request arriving at zero
    pods would wait that long.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.minReplicas >= 1",
                    "minReplicas ({self.minReplicas}) must be at least 1: there is no scale-to-zero, since "
                    "a GPU server takes minutes to load its model and a request arriving at zero pods would "
                    "wait that long",
                    field_path=".minReplicas",
                ),
                cel_rule(
                    "self.minReplicas <= self.maxReplicas",
                    "minReplicas ({self.minReplicas}) must not exceed maxReplicas ({self.maxReplicas})",
                    field_path=".minReplicas",
                ),
            ]
        }
    )

    min_replicas: int = Field(1, ge=0, le=1000)
    """Fewest serving pods (at least 1)."""
    max_replicas: int = Field(ge=1, le=1000)
    """Most replicas; each takes the world's GPUs (engine.tensorParallelSize x
    engine.pipelineParallelSize), in one pod or a group of pods."""
    metric: ScalingMetricSpec
    """What to scale on, and its target per pod."""
    scale_up_stabilization_seconds: int = Field(0, ge=0, le=3600)
    """How long the autoscaler looks back before adding pods: it adds only as many as the lowest
    recommendation of that window asks for. 0 reacts at once (a new pod takes minutes to load anyway)."""
    scale_down_stabilization_seconds: int = Field(300, ge=0, le=3600)
    """How long the autoscaler looks back before removing pods: it removes only what the highest
    recommendation of that window allows, so a short lull does not give away a loaded pod."""
    max_gpus: int | None = Field(None, ge=1, le=100_000)
    """A GPU budget: maxReplicas x the world of one replica (engine.tensorParallelSize x
    engine.pipelineParallelSize) may not exceed it (checked at admission)."""


class ServingSpec(Schema):
    """How Triton serves the engines, or trtllm-serve the snapshot.

    Changing these re-renders the model repository (the `--config` YAML); it never rebuilds or downloads.
    """

    image: str | None = Field(None, max_length=512)
    """tritonserver image (trtllm-serve: its image). Defaults to the one pinned with the TensorRT-LLM
    version."""
    replicas: int = Field(1, ge=0, le=1000)
    """Serving replicas: pods, or groups of pods when `gpusPerPod` is below the world. Also set by
    `kubectl scale mmd` (the scale subresource): when it owns it, leave `replicas` out of the file you
    apply, or `kubectl apply --server-side` stops with a conflict on this field (`--force-conflicts` takes
    it back). Not with `autoscaling`, which decides the number of replicas itself: leave it out then (the
    stored default, 1, is ignored)."""
    autoscaling: AutoscalingSpec | None = None
    """Scale the serving pods with demand: a HorizontalPodAutoscaler on the serving Deployment, on queue
    time or pending requests (never CPU). Removing the section deletes it and gives the Deployment
    `replicas` back. The prometheus-adapter rules it needs: docs/autoscaling.md."""
    triton_max_batch_size: int | None = Field(None, ge=1, le=2048)
    """Triton `max_batch_size` of every model. Defaults per model type; at most the engine batch."""
    streaming: bool = False
    """Decoupled mode: stream tokens (`/generate_stream`, gRPC streaming)."""
    max_beam_width: int | None = Field(None, ge=1, le=16)
    """Largest beam width `tensorrt_llm` serves (`max_beam_width` of its config): requests of any width up
    to it are answered, wider ones refused (`Requested beam width 4 is larger than configured max beam
    width 2`); the KV cache is sized for it. Defaults to the engine's, and to 1 for whisper types
    (whisper_bls sends no beam width); at most engine.maxBeamWidth."""
    enable_bls: bool | None = None
    """Render `tensorrt_llm_bls`, the Python entry point beside the ensemble. Defaults to true where it
    can serve the type; not available for whisper types (their entry point is `whisper_bls`), for
    internlm_xcomposer2 (its preprocessing needs the image, which the BLS cannot pass on) nor for mllama
    (the BLS passes neither its aspect-ratio tensors nor its encoder features on)."""
    accumulate_tokens: bool = False
    """BLS streaming only: each response carries all text so far instead of the new tokens."""
    kv_cache_reuse: bool = False
    """Reuse KV cache blocks across requests. Every request must then carry `prompt_table_extra_id` (a
    uint64 >= 1 naming the image), or answers can leak between different images with the same text. With
    reuse off the id is still accepted and changes nothing (mllama too, which cannot reuse). qwen2_vl and
    internlm_xcomposer2 refuse the id, and reuse: the reference preprocessing cannot build the extra ids
    for qwen2_vl, and the fork's ensemble for internlm_xcomposer2 has no such input. On trtllm-serve:
    `kv_cache_config.enable_block_reuse`, for the types whose multimodal support matrix says so (mistral3,
    phi4mm, qwen2_5_vl, qwen2_vl); written false otherwise, as the backend's default is on."""
    chunked_context: bool = False
    """Process long prompts in chunks of `maxNumTokens` (trtllm-serve: `enable_chunked_prefill`)."""
    kv_cache_free_gpu_mem_fraction: float | None = Field(None, gt=0, le=1)
    """Share of free GPU memory for the KV cache. Defaults per model type (0.9; 0.5 for Whisper)
    (trtllm-serve: `kv_cache_config.free_gpu_memory_fraction`)."""
    cross_kv_cache_fraction: float | None = Field(None, gt=0, lt=1)
    """Encoder-decoder types only (mllama, Whisper): share of the KV cache for cross attention (0.5)."""
    max_tokens_in_paged_kv_cache: int | None = Field(None, ge=1)
    """Upper bound of KV cache tokens. Defaults per model type (24000 for Whisper, otherwise none)
    (trtllm-serve: `kv_cache_config.max_tokens`)."""
    batching_strategy: Literal["inflight_fused_batching", "inflight_batching"] = "inflight_fused_batching"
    """`gpt_model_type` of the TensorRT-LLM backend."""
    batch_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization"] | None = None
    """Scheduler policy. Defaults per model type."""
    exclude_input_in_output: bool | None = None
    """Return only generated tokens. Defaults per model type."""
    logits_datatype: Literal["TYPE_FP32", "TYPE_FP16"] = "TYPE_FP32"
    """Type of the context and generation logits outputs."""
    prompt_table_datatype: Literal["TYPE_FP16"] = "TYPE_FP16"
    """Type of the prompt embedding table passed from the encoder to the LLM. Triton's Python backend
    cannot carry BF16 or FP8 tensors, so FP16 is the only value that works with the pinned templates."""
    queue: QueueSpec = Field(default_factory=QueueSpec)
    """Dynamic batching."""
    instances: InstanceCounts = Field(default_factory=InstanceCounts)
    """Python model instances."""
    lora_cache: LoraCacheSpec = Field(default_factory=LoraCacheSpec)
    """LoRA adapter cache (internlm_xcomposer2)."""
    image_url_input: bool = False
    """Let clients send `image_url_input`: an http(s) URL (or a `data:image/jpeg;base64,` string) that
    the server itself fetches. Off by default, because the serving pod then requests any URL a client
    names, from inside the cluster network (server-side request forgery); with it off the rendered
    repository does not declare the input and Triton refuses a request that carries it, while
    `image_bytes_input` (pixels sent by the client) still works. Only for model types whose
    preprocessing loads images (llava_onevision, mllama, qwen2_vl). When on, restrict where the pods
    may connect with `networkPolicy.egress`."""
    network_policy: NetworkPolicySpec | None = None
    """Restrict the serving pods' network traffic with a NetworkPolicy. Omitted: no policy on
    triton-trtllm-engine (the namespace's own policies apply); on trtllm-serve a policy that lets the
    pods connect nowhere but DNS (its server fetches every image URL a client sends)."""
    modalities: list[Modality] | None = Field(None, max_length=3)
    """What clients send besides text: `image`, `video`, `audio`. Checked against the model type on its
    runtime (video only for types that take video, audio only for whisper types and phi4mm); omitted:
    whatever the type takes. An empty list: text only."""
    zero_pad: bool = False
    """Whisper only: trim audio to its true length instead of padding the mel spectrogram to 30 s."""
    gpus_per_pod: int | None = Field(None, ge=1, le=16)
    """GPUs (and MPI ranks) of one serving pod. Defaults to the world of one replica
    (engine.tensorParallelSize x engine.pipelineParallelSize) up to 8, and must divide it: a replica is
    world / gpusPerPod pods. With more than one, each replica is a group of a LeaderWorkerSet (the
    cluster needs its controller, and the engine cache ReadWriteMany access): the leader pod runs the world
    with `mpirun` over SSH into its workers and serves; the Service sends requests to leaders only."""
    pod: PodSettings = Field(default_factory=PodSettings)
    """Scheduling and metadata of the serving pods (GPUs = gpusPerPod)."""
    probes: ProbeSpec = Field(default_factory=ProbeSpec)
    """Health checks of the serving pods."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """How a change replaces the serving pods: beside the old ones when a GPU is free (the default), or in
    place."""
    shared_memory_size: Quantity = "2Gi"
    """Size of the memory-backed /dev/shm (Python backend tensors and MPI use it)."""
    model_code_path: str | None = Field(None, max_length=1024, pattern=r"^/")
    """Directory in the serving image holding the Triton Python model code (a tensorrtllm_backend
    `all_models` tree). Default from the operator's configuration; set it with your own image."""
    cuda_memory_pool_bytes: int | None = Field(None, ge=0)
    """CUDA memory pool on GPU 0 for tensors passed between models. Defaults to the larger of the reference
    workflow's 300000000 bytes and an estimate from the prompt table and encoder feature sizes; a value
    below that estimate is refused, any other is used."""
