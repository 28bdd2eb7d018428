"""`spec`: the model to serve, its engine build and engine cache, and `MultimodalDeploymentSpec`.

`MultimodalDeploymentSpec` assembles them with `serving.ServingSpec` and carries the cross-field rules of
`rules`. Pure: imports pydantic, `mmd_operator.knowledge` and the package's `cel`, `parallelism`, `schema`,
`pods`, `serving` and `rules`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from mmd_operator.api.v1alpha1.cel import REQUIRED, cel_rule
from mmd_operator.api.v1alpha1.parallelism import Parallelism
from mmd_operator.api.v1alpha1.pods import PodSettings, SecretKeyRef
from mmd_operator.api.v1alpha1.rules import spec_rules
from mmd_operator.api.v1alpha1.schema import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, Quantity, Schema
from mmd_operator.api.v1alpha1.serving import ServingSpec
from mmd_operator.knowledge import ModelType, Runtime


class EngineCacheSpec(Schema):
    """The PersistentVolumeClaim that holds built engines, shared by every resource that names it.

    By default the operator creates one claim per namespace, `mmd-engine-cache`, sized and classed by
    the operator's configuration; the fields here change that. A claim the operator did not create is
    used as it is and never modified or deleted.
    """

    claim_name: str | None = Field(None, min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)
    """Claim to build into and serve from (default `mmd-engine-cache`). Created if it does not exist."""
    size: Quantity | None = None
    """Size of a claim the operator creates (default from the operator's configuration)."""
    storage_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """StorageClass of a claim the operator creates (default: the cluster's default class)."""
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"] | None = None
    """Access mode of a claim the operator creates (default ReadWriteMany: pods on several nodes read
    the engines while a build writes)."""
    retention: Literal["Retain", "Delete"] = "Retain"
    """Whether a claim the operator creates outlives its users. Delete removes it (and every engine in
    it) once the last resource using it is deleted; Retain keeps it until you delete it."""


class BuildSpec(Schema):
    """The engine-build Job (trtllm-serve: the weights download Job, which asks for no GPU).

    Nothing here changes the engine bytes, so nothing here is in the cacheKey.
    """

    backoff_limit: int = Field(1, ge=0, le=20)
    """Retries of a failed build pod before the Job fails."""
    active_deadline_seconds: int = Field(21600, ge=60, le=604800)
    """Longest a build may run, all retries included, before it is stopped and reported failed."""
    pod: PodSettings = Field(default_factory=PodSettings)
    """Scheduling and metadata of the build pods (GPUs: the tensor-parallel size, up to
    `serving.gpusPerPod`: a world across pods is built in one pod, that many ranks at a time)."""


class HuggingFaceSource(Schema):
    """A model repository on the Hugging Face Hub, fetched by the build Job."""

    repo: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$", max_length=200)
    """Repository id, `<organisation>/<name>`."""
    revision: str = Field("main", min_length=1, max_length=100)
    """Branch, tag or commit. Use a commit hash: the engine is rebuilt only when this string changes. On
    trtllm-serve a branch or tag is resolved to a commit at the first download and held: later resources
    naming it are served the recorded commit (status.weights.commit)."""
    token_secret_ref: SecretKeyRef | None = None
    """Secret key holding a Hub access token, for gated repositories. Never copied anywhere else (the
    build Job takes it as an environment variable, the trtllm-serve download Job as a mounted file)."""


class VolumeSource(Schema):
    """A model already present on a PersistentVolumeClaim in the resource's namespace."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!self.path.contains('..')",
                    "path ({self.path}) must not contain '..'",
                    field_path=".path",
                )
            ]
        }
    )

    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the PersistentVolumeClaim."""
    path: str = Field("/", max_length=1024)
    """Directory inside the claim that holds the model (Hugging Face layout, or the `.pt` for Whisper)."""


class ModelSource(Schema):
    """Where the weights come from: exactly one of `huggingface` or `pvc`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "has(self.huggingface) || has(self.pvc)",
                    "exactly one of huggingface or pvc must be set; neither is",
                    reason=REQUIRED,
                ),
                cel_rule(
                    "!has(self.huggingface) || !has(self.pvc)",
                    "exactly one of huggingface or pvc must be set; both are",
                ),
            ]
        }
    )

    huggingface: HuggingFaceSource | None = None
    """Fetch from the Hugging Face Hub."""
    pvc: VolumeSource | None = None
    """Read from a PersistentVolumeClaim."""


class LoraSpec(Schema):
    """A LoRA adapter (Hugging Face PEFT layout) built into the engine and served per request."""

    source: ModelSource
    """Where the adapter (`adapter_config.json` and `adapter_model.*`) comes from."""
    max_rank: int = Field(256, ge=1, le=1024)
    """Largest LoRA rank the engine accepts (`--max_lora_rank`)."""


class ModelSpec(Schema):
    """The model to serve."""

    type: ModelType
    """Model type; decides the build recipe and the Triton model repository layout."""
    source: ModelSource
    """Where the weights come from."""
    variant: str | None = Field(None, max_length=64)
    """Whisper checkpoint name as TensorRT-LLM's converter knows it (e.g. `large-v3`, `distil-large-v3`).
    Required for whisper and distil_whisper, not allowed otherwise."""
    hidden_size: int | None = Field(None, ge=64, le=65536)
    """Hidden size of the LLM (d_model for Whisper). Only sizes the CUDA memory pool; defaults to the
    reference checkpoint of the model type."""
    lora: LoraSpec | None = None
    """LoRA adapter; required for internlm_xcomposer2, not allowed otherwise."""


class VisionSpec(Schema):
    """The multimodal (vision) engine. Its limits are derived; setting one asserts the derived value."""

    max_batch_size: int | None = Field(None, ge=1, le=4096)
    """Vision engine batch (images or patches). Derived: engine batch x images (or patches) per request."""
    max_patches_per_request: int | None = Field(None, ge=1, le=256)
    """llava_onevision only: image patches or video frames one request may carry (default 16)."""


class EngineSpec(Schema):
    """How the TensorRT-LLM engines are built. Every field here is part of the cacheKey.

    On trtllm-serve (nothing is built) only tensorParallelSize, dtype, maxBatchSize, maxSeqLen,
    maxNumTokens and kvCacheDtype have a meaning, as trtllm-serve's own options; the others are refused.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.maxSeqLen) || !has(self.maxInputLen) || self.maxSeqLen > self.maxInputLen",
                    "maxSeqLen ({self.maxSeqLen}) must be greater than maxInputLen ({self.maxInputLen})",
                    field_path=".maxSeqLen",
                ),
                cel_rule(
                    "!(self.kvCacheDtype == 'fp8' && self.weightOnlyPrecision != 'none')",
                    "kvCacheDtype fp8 and weightOnlyPrecision ({self.weightOnlyPrecision}) cannot be "
                    "combined",
                    field_path=".weightOnlyPrecision",
                ),
            ]
        }
    )

    tensorrt_llm_version: Literal["0.19.0", "1.2.1"] | None = None
    """The engine path's release: TensorRT-LLM 0.19.0 in Triton 25.05 (the default: its images run on
    570-branch drivers) or 1.2.1 in Triton 26.07 (the last release of the engine path; its images need a
    590-branch driver, CUDA 13.1). Engines are built and served with it; a change builds new engines and
    keeps the old ones serving until they are ready. 1.2.1 renames the request inputs `min_length` and
    `random_seed` to `min_tokens` and `seed`. triton-trtllm-engine only."""
    builder_image: str | None = Field(None, max_length=512)
    """Image of the build Job. Defaults to the builder of `tensorrtLlmVersion`. triton-trtllm-engine
    only."""
    dtype: Literal["float16", "bfloat16"] | None = None
    """Weights and activations type. Defaults per model type (bfloat16 for mllama, float16 otherwise)."""
    tensor_parallel_size: Literal[1, 2, 4, 8, 16, 32] = 1
    """Tensor-parallel ranks of one replica, each holding a share of every layer's attention heads
    (trtllm-serve: `--tp_size`; it must split the heads of a known checkpoint). With
    pipelineParallelSize it makes the world of one replica: one GPU and one MPI rank each, in
    `serving.gpusPerPod` GPUs per pod; a world of more than 8 spans pods, on several nodes. The world
    may not pass the model type's largest: 16 on triton-trtllm-engine (8 for whisper types and blip2,
    whose checkpoints fit one GPU), on trtllm-serve 32 for llama4, qwen2_vl and qwen2_5_vl and 8 for the
    others."""
    pipeline_parallel_size: int = Field(1, ge=1, le=16)
    """Pipeline stages of one replica, each holding a share of the layers (trtllm-serve: `--pp_size`).
    Offered on trtllm-serve for llama4, qwen2_vl and qwen2_5_vl, whose largest checkpoints need more than
    one node; it must split a known checkpoint's layers evenly. Not on triton-trtllm-engine: the reference
    workflow's launch runs tensor-parallel ranks only."""
    max_batch_size: int | None = Field(None, ge=1, le=2048)
    """Largest number of requests the engine runs at once. Defaults per model type (trtllm-serve:
    `max_batch_size`, default 2048)."""
    max_input_len: int | None = Field(None, ge=1, le=1048576)
    """Longest prompt in tokens (text plus visual tokens). Defaults per model type. triton-trtllm-engine
    only."""
    max_seq_len: int | None = Field(None, ge=2, le=1048576)
    """Longest prompt plus output in tokens. Defaults per model type (trtllm-serve: `max_seq_len`, default
    the checkpoint's)."""
    max_num_tokens: int | None = Field(None, ge=1, le=1048576)
    """Tokens per engine step (the chunk size with chunked context). Defaults to the builder's
    (trtllm-serve: `max_num_tokens`, default 8192)."""
    max_beam_width: int | None = Field(None, ge=1, le=16)
    """Largest beam width the engine is built for. Defaults per model type (1; 4 for Whisper)."""
    max_images_per_request: int = Field(1, ge=1, le=64)
    """Images one request may carry. More than 1 only for multi-image model types (vila); the server then
    refuses a request with more `<image>` markers than this, naming both numbers."""
    max_multimodal_len: int | None = Field(None, ge=1)
    """Derived: engine batch x features per image x images per request. Setting it asserts that value."""
    max_encoder_input_len: int | None = Field(None, ge=1, le=1048576)
    """Encoder-decoder types only: longest encoder input (mllama: vision tokens; Whisper: fixed 3000)."""
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    """KV cache type. `fp8` adds a quantize-and-calibrate step to the build (trtllm-serve:
    `kv_cache_config.dtype`, for the types that offer it)."""
    weight_only_precision: Literal["none", "int8", "int4"] = "none"
    """Weight-only quantization at checkpoint conversion."""
    calibration_size: int = Field(512, ge=1, le=100000)
    """Calibration samples for fp8 quantization."""
    vision: VisionSpec = Field(default_factory=VisionSpec)
    """The multimodal (vision) engine."""


class ResourceClaimGpus(Schema):
    """GPUs asked for through Dynamic Resource Allocation (`resource.k8s.io/v1`) instead of `nvidia.com/gpu`.

    The operator makes one ResourceClaimTemplate for the resource: one request for a pod's GPUs, of
    `deviceClassName`, narrowed by `selector` and pinned to the kind of GPU the engine is built for. The
    build pod and every serving pod take their claims from it, so the engine and the GPUs it serves on
    are one kind. The kind comes from the devices the cluster's DRA driver publishes (ResourceSlices)
    that the class and the selector admit: several kinds are refused, as for nodes.
    """

    device_class_name: str = Field("gpu.nvidia.com", max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """The DeviceClass of the GPUs (NVIDIA's DRA driver installs `gpu.nvidia.com`)."""
    selector: str | None = Field(None, min_length=1, max_length=10240)
    """A CEL expression over `device`, as a ResourceClaim's selector takes it, e.g.
    `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`."""


class GpuSpec(Schema):
    """How the pods ask for their GPUs.

    The `nvidia.com/gpu` extended resource (the default, a device plugin's), or claims of Dynamic
    Resource Allocation (`resourceClaim`).
    """

    resource_claim: ResourceClaimGpus | None = None
    """Ask through a ResourceClaimTemplate the operator makes; needs a DRA driver for the GPUs."""


class MultimodalDeploymentSpec(Schema):
    """Desired state: the model, how to build its engines and how to serve them."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": spec_rules()})

    @property
    def serving_runtime(self) -> Runtime:
        """The runtime, `triton-trtllm-engine` when the spec names none."""
        return self.runtime or Runtime.TRITON_TRTLLM_ENGINE

    @property
    def parallelism(self) -> Parallelism:
        """The world of one replica, with `serving.gpusPerPod`'s default (the world, up to 8) filled in."""
        engine = self.engine
        return Parallelism.of(
            engine.tensor_parallel_size, engine.pipeline_parallel_size, self.serving.gpus_per_pod
        )

    runtime: Runtime | None = None
    """How the model is served: `triton-trtllm-engine` (omitted: TensorRT engines built by a Job, served
    by Triton's TensorRT-LLM backend) or `trtllm-serve` (TensorRT-LLM's PyTorch backend: no build, the
    Hugging Face snapshot downloaded once into the engine cache, served with the OpenAI API). Immutable.
    Each model type is served by one of them or both; the engine and serving fields that only one runtime
    has are refused on the other."""
    model: ModelSpec
    """The model to serve."""
    engine: EngineSpec = Field(default_factory=EngineSpec)
    """Engine build settings (part of the cacheKey)."""
    serving: ServingSpec = Field(default_factory=ServingSpec)
    """Serving settings (never trigger a rebuild)."""
    build: BuildSpec = Field(default_factory=BuildSpec)
    """The engine-build Job (never part of the cacheKey)."""
    engine_cache: EngineCacheSpec = Field(default_factory=EngineCacheSpec)
    """Where engines are built and served from."""
    gpus: GpuSpec = Field(default_factory=GpuSpec)
    """How the pods ask for their GPUs (never part of the cacheKey, which holds the kind they are of)."""
