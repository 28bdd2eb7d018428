"""The `serving.multimodal.dev/v1alpha1` MultimodalDeployment resource, as pydantic models.

These models are the single source of the CRD schema (see `crdgen`). Field docstrings become the
descriptions `kubectl explain` shows. Cross-field rules are written once, in CEL, on the models
(`x-kubernetes-validations`, built by `cel_rule`, with messages that name the values they compared): the
API server enforces them at admission and `validation` evaluates the same expressions offline. Imports
only pydantic, `mmd_operator.knowledge` and `mmd_operator.scaling_metrics` (the autoscaling metrics).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from mmd_operator.knowledge import (
    KNOWLEDGE,
    Heads,
    Modality,
    ModelType,
    Runtime,
    checkpoint_heads,
    modalities_of,
    serve_types_where,
    types_of,
    types_where,
)
from mmd_operator.scaling_metrics import SCALING_METRICS, ScalingMetric

GROUP = "serving.multimodal.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MultimodalDeployment"
PLURAL = "multimodaldeployments"
# The extended resource GPUs are requested by (the NVIDIA device plugin's); the operator sets it.
GPU_RESOURCE = "nvidia.com/gpu"
SINGULAR = "multimodaldeployment"
SHORT_NAMES = ("mmd",)

WHISPER_TYPES = types_where("whisper_variants")


# How the API server (v1.34, tried on the local control plane) prints a rule that fails: `reason` picks the
# kind of field error, `fieldPath` the path it is reported at (relative to the node the rule sits on), and
# `messageExpression` the words (the static `message` when the expression fails to evaluate):
#   no reason, or FieldValueInvalid:  spec.engine.maxSeqLen: Invalid value: "object": <message>
#   FieldValueForbidden:              spec.engine.maxSeqLen: Forbidden: <message>
#   FieldValueRequired:               spec.model.variant: Required value: <message>
# "Invalid value" shows the schema type of the node the rule sits on ("object"), never the field's value.
# So every rule here is Forbidden (a value that is not allowed where it is) or Required (a field that must
# be set), and names the values in its own message. The values are written with `format` ('%s' renders
# integers, numbers, booleans and strings): concatenating `string(self.x)` is refused when the CRD is
# created, because the cost estimator cannot bound the length of a number turned into a string.
FORBIDDEN = "FieldValueForbidden"
REQUIRED = "FieldValueRequired"

# `{CEL expression}` in a rule's message: a value the message names.
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
_MARK = "\0"


def cel_list(values: list[str]) -> str:
    """Render `values` as a CEL list literal."""
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _message_expression(message: str) -> str | None:
    """The CEL expression that writes `message` with its `{...}` values filled in; None without values."""
    parts = _PLACEHOLDER.split(message)
    if len(parts) == 1:
        return None
    # Even parts are text, odd parts CEL expressions.
    text = "".join("%s" if index % 2 else part.replace("%", "%%") for index, part in enumerate(parts))
    return f"{_cel_string(text)}.format([{', '.join(parts[1::2])}])"


def _static_message(message: str) -> str:
    """`message` without the values it names (what the API server shows if the expression fails).

    A parenthesised part or a last `; ...` clause that names a value is left out.
    """
    marked = _PLACEHOLDER.sub(_MARK, message)
    marked = re.sub(rf" ?\([^()]*{_MARK}[^()]*\)", "", marked)
    marked = re.sub(rf";[^;]*{_MARK}[^;]*$", "", marked)
    if _MARK in marked:
        raise ValueError(f"a value outside parentheses or a last '; ...' clause: {message!r}")
    return marked


def cel_rule(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: str = FORBIDDEN,
    fallback: str | None = None,
) -> JsonDict:
    """One `x-kubernetes-validations` entry.

    `message` may name values as `{CEL expression}` (evaluated on the node the rule sits on): they become
    the rule's `messageExpression`, and the static `message` leaves them out (or is `fallback`).
    `field_path` is relative to that node.
    """
    entry: JsonDict = {"rule": rule, "message": fallback or _static_message(message)}
    expression = _message_expression(message)
    if expression is not None:
        entry["messageExpression"] = expression
    entry["reason"] = reason
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def _only_for(attribute: str, condition: str, what: str, field_path: str) -> JsonDict:
    """A rule allowing `condition` only for model types whose knowledge flag `attribute` is set."""
    allowed = types_where(attribute)
    return cel_rule(
        f"!({condition}) || self.model.type in {cel_list(allowed)}",
        f"{what} is supported only for model types {', '.join(allowed)}; model.type is {{self.model.type}}",
        field_path=field_path,
    )


# Names the operator derives objects from (Service names are DNS-1035 labels).
DNS_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Names of other objects (Secrets, claims, ServiceAccounts, classes): DNS-1123 subdomains, as the API server
# requires of the objects the operator creates with them.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Keys of a Secret's data.
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# What Kubernetes' own parser accepts as a quantity (resource.ParseQuantity, which CEL's `isQuantity` calls):
# a sign, digits with a fraction (either may be empty: `Gi` and `.` parse as 0), then a binary or decimal
# suffix or an integer exponent; not the empty string. The API server checks it with `isQuantity`; offline
# validation gives cel-python, which lacks that function, one that matches this pattern (the cluster tier
# checks that both judge a list of strings alike).
QUANTITY_PATTERN = r"^(?=.)[+-]?[0-9]*(\.[0-9]*)?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
QUANTITY_HINT = (
    "write a number with an optional suffix such as 500Gi (Ki, Mi, Gi, Ti, Pi, Ei or k, M, G, T, P, E)"
)
QUANTITY_RULE = cel_rule(
    "isQuantity(string(self))",
    f'"{{self}}" is not a Kubernetes quantity; {QUANTITY_HINT}',
    fallback=f"not a Kubernetes quantity; {QUANTITY_HINT}",
)
# The tensor-parallel sizes a spec may ask for (engine.tensorParallelSize).
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# Status warnings: at most this many, each at most this long (a status always fits).
MAX_WARNINGS = 32
WARNING_MAX_LENGTH = 4096
# Longest resource name: `<name>-repo-<10 hex>` and pod names derived from `<name>` must stay valid.
MAX_NAME_LENGTH = 48


class _Schema(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """A null field reads as one left out, as at the API server (its defaulting and CEL's has())."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class SecretKeyRef(_Schema):
    """A key of a Secret in the resource's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the Secret."""
    key: str = Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)
    """Key inside the Secret whose value is used."""


# A Kubernetes resource quantity (`2`, `500m`, `16Gi`), as the API server accepts it: integer or string.
# The string's syntax is checked by a CEL rule (at the API server and offline), which says it in a sentence;
# a `pattern` would answer with the regular expression. The length bound keeps the rule's estimated cost
# within the API server's budget (maps of quantities are bounded for the same reason).
QUANTITY_MAX_LENGTH = 64
Quantity = Annotated[
    int | Annotated[str, Field(max_length=QUANTITY_MAX_LENGTH)],
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "maxLength": QUANTITY_MAX_LENGTH,
            "x-kubernetes-validations": [QUANTITY_RULE],
        }
    ),
]
# Label and annotation values, and node selector terms: string to string.
StringMap = dict[str, Annotated[str, Field(max_length=63 * 1024)]]


class Toleration(_Schema):
    """A taint the pod tolerates (core/v1 Toleration)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.operator) || self.operator != 'Exists' || "
                    "!has(self.value) || self.value == ''",
                    "value ({self.value}) must be empty when operator is Exists",
                    field_path=".value",
                ),
                cel_rule(
                    "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
                    "operator ({has(self.operator) ? self.operator : 'Equal'}) must be Exists when key is "
                    "empty (an empty key matches every taint)",
                    field_path=".operator",
                ),
            ]
        }
    )

    key: str | None = Field(None, max_length=317)
    """Taint key; empty with operator Exists matches every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default Equal)."""
    value: str | None = Field(None, max_length=63)
    """Taint value for operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all."""
    toleration_seconds: int | None = None
    """How long a NoExecute taint is tolerated before eviction."""


class ResourceRequirements(_Schema):
    """CPU, memory and other resources of the pod's main container. GPUs are set by the operator."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                # Neither map is stored when the user leaves it out (no empty defaults), hence has().
                cel_rule(
                    f"!(has(self.requests) && '{GPU_RESOURCE}' in self.requests) && "
                    f"!(has(self.limits) && '{GPU_RESOURCE}' in self.limits)",
                    f"{GPU_RESOURCE} ({{has(self.requests) && '{GPU_RESOURCE}' in self.requests ? "
                    f"self.requests['{GPU_RESOURCE}'] : self.limits['{GPU_RESOURCE}']}}) is set by the "
                    "operator to engine.tensorParallelSize",
                )
            ]
        }
    )

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=32)
    """Resources the scheduler reserves, e.g. `cpu: 8`, `memory: 64Gi`."""
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=32)
    """Upper bounds, e.g. `memory: 96Gi`. `nvidia.com/gpu` is always the tensor-parallel size."""


class LocalObjectReference(_Schema):
    """A reference to an object in the same namespace, by name."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the object."""


class PodSettings(_Schema):
    """Where and how the operator's pods run: scheduling, identity and extra metadata."""

    labels: StringMap = Field(default_factory=dict)
    """Extra labels on the pods (the operator's own labels win on conflict)."""
    annotations: StringMap = Field(default_factory=dict)
    """Extra annotations on the pods."""
    node_selector: StringMap = Field(default_factory=dict)
    """Node labels the pods require, e.g. `nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    """Taints the pods tolerate (GPU nodes are often tainted)."""
    affinity: dict[str, JsonValue] | None = Field(
        None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """Node and pod affinity (core/v1 Affinity), passed to the pods unchanged."""
    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """PriorityClass of the pods."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Resources of the main container besides GPUs."""
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list, max_length=16)
    """Secrets for pulling the image from a private registry."""
    service_account_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """ServiceAccount the pods run as (default: the namespace's default)."""


class EngineCacheSpec(_Schema):
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


class BuildSpec(_Schema):
    """The engine-build Job (trtllm-serve: the weights download Job, which asks for no GPU).

    Nothing here changes the engine bytes, so nothing here is in the cacheKey.
    """

    backoff_limit: int = Field(1, ge=0, le=20)
    """Retries of a failed build pod before the Job fails."""
    active_deadline_seconds: int = Field(21600, ge=60, le=604800)
    """Longest a build may run, all retries included, before it is stopped and reported failed."""
    pod: PodSettings = Field(default_factory=PodSettings)
    """Scheduling and metadata of the build pods (GPUs = tensor-parallel size)."""


class ProbeSpec(_Schema):
    """Health checks of the serving pods. Loading engines takes minutes; the defaults allow 30."""

    startup_timeout_seconds: int = Field(1800, ge=10, le=86400)
    """Longest a pod may take to load every model before it is restarted (startup probe budget)."""
    liveness_timeout_seconds: int = Field(5, ge=2, le=120)
    """Timeout of one liveness or readiness check; more than a second, since a busy server answers late."""
    liveness_failure_threshold: int = Field(3, ge=1, le=100)
    """Failed liveness checks (10 s apart) after which the container is restarted."""


class HuggingFaceSource(_Schema):
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


class VolumeSource(_Schema):
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


class ModelSource(_Schema):
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


class LoraSpec(_Schema):
    """A LoRA adapter (Hugging Face PEFT layout) built into the engine and served per request."""

    source: ModelSource
    """Where the adapter (`adapter_config.json` and `adapter_model.*`) comes from."""
    max_rank: int = Field(256, ge=1, le=1024)
    """Largest LoRA rank the engine accepts (`--max_lora_rank`)."""


class ModelSpec(_Schema):
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


class VisionSpec(_Schema):
    """The multimodal (vision) engine. Its limits are derived; setting one asserts the derived value."""

    max_batch_size: int | None = Field(None, ge=1, le=4096)
    """Vision engine batch (images or patches). Derived: engine batch x images (or patches) per request."""
    max_patches_per_request: int | None = Field(None, ge=1, le=256)
    """llava_onevision only: image patches or video frames one request may carry (default 16)."""


class EngineSpec(_Schema):
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

    builder_image: str | None = Field(None, max_length=512)
    """Image of the build Job. Defaults to the builder matching the pinned TensorRT-LLM version.
    triton-trtllm-engine only."""
    dtype: Literal["float16", "bfloat16"] | None = None
    """Weights and activations type. Defaults per model type (bfloat16 for mllama, float16 otherwise)."""
    tensor_parallel_size: Literal[1, 2, 4, 8] = 1
    """Tensor-parallel world size: GPUs per serving pod and MPI ranks of tritonserver (trtllm-serve:
    `--tp_size`; it must split the heads of a known checkpoint)."""
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


class QueueSpec(_Schema):
    """Triton dynamic batching."""

    max_queue_delay_microseconds: int = Field(0, ge=0, le=10_000_000)
    """How long `tensorrt_llm` waits to form a batch."""
    preprocessing_max_queue_delay_microseconds: int = Field(20000, ge=0, le=10_000_000)
    """How long `preprocessing` and `multimodal_encoders` wait to form a batch."""
    max_queue_size: int = Field(0, ge=0, le=1_000_000)
    """Requests queued per model before new ones are rejected; 0 means no limit."""


class InstanceCounts(_Schema):
    """Python model instances (CPU) per serving pod."""

    preprocessing: int = Field(1, ge=1, le=64)
    """Instances of `preprocessing`."""
    postprocessing: int = Field(1, ge=1, le=64)
    """Instances of `postprocessing`."""
    bls: int | None = Field(None, ge=1, le=256)
    """Instances of `tensorrt_llm_bls` (about the engine batch size for full concurrency) or of
    `whisper_bls`. Defaults to 1, and to 8 for whisper_bls."""


class LoraCacheSpec(_Schema):
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


class LabelSelectorRequirement(_Schema):
    """One expression of a label selector (metav1.LabelSelectorRequirement)."""

    key: str = Field(min_length=1, max_length=LABEL_KEY_MAX_LENGTH)
    """Label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """In, NotIn, Exists or DoesNotExist."""
    values: list[Annotated[str, Field(max_length=63, description="A label value.")]] = Field(
        default_factory=list, max_length=64
    )
    """Values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(_Schema):
    """A label selector (metav1.LabelSelector). Empty selects everything."""

    match_labels: StringMap = Field(default_factory=dict)
    """Labels that must all be present with these values."""
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=32)
    """Expressions that must all hold."""


class NetworkClient(_Schema):
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


class NetworkPort(_Schema):
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


class EgressAllowance(_Schema):
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


class NetworkPolicySpec(_Schema):
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


class ScalingMetricSpec(_Schema):
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


class AutoscalingSpec(_Schema):
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
    """Most serving pods; each takes engine.tensorParallelSize GPUs."""
    metric: ScalingMetricSpec
    """What to scale on, and its target per pod."""
    scale_up_stabilization_seconds: int = Field(0, ge=0, le=3600)
    """How long the autoscaler looks back before adding pods: it adds only as many as the lowest
    recommendation of that window asks for. 0 reacts at once (a new pod takes minutes to load anyway)."""
    scale_down_stabilization_seconds: int = Field(300, ge=0, le=3600)
    """How long the autoscaler looks back before removing pods: it removes only what the highest
    recommendation of that window allows, so a short lull does not give away a loaded pod."""
    max_gpus: int | None = Field(None, ge=1, le=100_000)
    """A GPU budget: maxReplicas x engine.tensorParallelSize may not exceed it (checked at admission)."""


class ServingSpec(_Schema):
    """How Triton serves the engines, or trtllm-serve the snapshot.

    Changing these re-renders the model repository (the `--config` YAML); it never rebuilds or downloads.
    """

    image: str | None = Field(None, max_length=512)
    """tritonserver image (trtllm-serve: its image). Defaults to the one pinned with the TensorRT-LLM
    version."""
    replicas: int = Field(1, ge=0, le=1000)
    """Serving pods. Also set by `kubectl scale mmd` (the scale subresource): when it owns it, leave
    `replicas` out of the file you apply, or `kubectl apply --server-side` stops with a conflict on this
    field (`--force-conflicts` takes it back). Not with `autoscaling`, which decides the number of pods
    itself: leave it out then (the stored default, 1, is ignored)."""
    autoscaling: AutoscalingSpec | None = None
    """Scale the serving pods with demand: a HorizontalPodAutoscaler on the serving Deployment, on queue
    time or pending requests (never CPU). Removing the section deletes it and gives the Deployment
    `replicas` back. The prometheus-adapter rules it needs: docs/autoscaling.md."""
    triton_max_batch_size: int | None = Field(None, ge=1, le=2048)
    """Triton `max_batch_size` of every model. Defaults per model type; at most the engine batch."""
    streaming: bool = False
    """Decoupled mode: stream tokens (`/generate_stream`, gRPC streaming)."""
    max_beam_width: int | None = Field(None, ge=1, le=16)
    """Beam width `tensorrt_llm` serves (`max_beam_width` of its config). The executor refuses a request
    whose beam width differs from it. Defaults to the engine's, and to 1 for whisper types (whisper_bls
    sends no beam width); at most engine.maxBeamWidth."""
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
    pod: PodSettings = Field(default_factory=PodSettings)
    """Scheduling and metadata of the serving pods (GPUs = tensor-parallel size)."""
    probes: ProbeSpec = Field(default_factory=ProbeSpec)
    """Health checks of the serving pods."""
    shared_memory_size: Quantity = "2Gi"
    """Size of the memory-backed /dev/shm (Python backend tensors and MPI use it)."""
    model_code_path: str | None = Field(None, max_length=1024, pattern=r"^/")
    """Directory in the serving image holding the Triton Python model code (a tensorrtllm_backend
    `all_models` tree). Default from the operator's configuration; set it with your own image."""
    cuda_memory_pool_bytes: int | None = Field(None, ge=0)
    """CUDA memory pool on GPU 0 for tensors passed between models. Defaults to the larger of the reference
    workflow's 300000000 bytes and an estimate from the prompt table and encoder feature sizes; a value
    below that estimate is refused, any other is used."""


def _engine_and_common_rules() -> list[JsonDict]:
    lora_types = types_where("lora")
    encoder_decoder = types_where("encoder_decoder")
    whisper = ", ".join(WHISPER_TYPES)
    rules: list[JsonDict] = [
        # A transition rule: only an update can break it (the API server gives it the stored spec as oldSelf).
        cel_rule(
            "self.model.type == oldSelf.model.type",
            "model.type is immutable ({oldSelf.model.type}, now {self.model.type}): another model type is "
            "another deployment (engines, repository layout and serving pods all differ); create a new "
            "MultimodalDeployment instead",
            field_path=".model.type",
        ),
        cel_rule(
            f"!(self.model.type in {cel_list(WHISPER_TYPES)}) || has(self.model.variant)",
            f"model.variant is required for {whisper} (the Whisper checkpoint, e.g. large-v3)",
            field_path=".model.variant",
            reason=REQUIRED,
        ),
        _only_for("whisper_variants", "has(self.model.variant)", "model.variant", ".model.variant"),
        cel_rule(
            f"!(self.model.type in {cel_list(lora_types)}) || has(self.model.lora)",
            f"model.lora is required for {', '.join(lora_types)}",
            field_path=".model.lora",
            reason=REQUIRED,
        ),
        _only_for("lora", "has(self.model.lora)", "model.lora", ".model.lora"),
        _only_for(
            "multi_image",
            "self.engine.maxImagesPerRequest > 1",
            "maxImagesPerRequest above 1 (here {self.engine.maxImagesPerRequest})",
            ".engine.maxImagesPerRequest",
        ),
        # engine.vision is stored only when the user writes it (no empty defaults), hence has() first.
        _only_for(
            "video",
            "has(self.engine.vision) && has(self.engine.vision.maxPatchesPerRequest)",
            "engine.vision.maxPatchesPerRequest ({self.engine.vision.maxPatchesPerRequest})",
            ".engine.vision.maxPatchesPerRequest",
        ),
        _only_for(
            "has_vision_engine",
            "has(self.engine.vision) && has(self.engine.vision.maxBatchSize)",
            "engine.vision.maxBatchSize ({self.engine.vision.maxBatchSize})",
            ".engine.vision.maxBatchSize",
        ),
        _only_for(
            "uses_prompt_table",
            "has(self.engine.maxMultimodalLen)",
            "maxMultimodalLen ({self.engine.maxMultimodalLen})",
            ".engine.maxMultimodalLen",
        ),
        _only_for(
            "encoder_decoder",
            "has(self.engine.maxEncoderInputLen)",
            "maxEncoderInputLen ({self.engine.maxEncoderInputLen})",
            ".engine.maxEncoderInputLen",
        ),
        _only_for(
            "fp8_kv_cache", "self.engine.kvCacheDtype == 'fp8'", "kvCacheDtype fp8", ".engine.kvCacheDtype"
        ),
        _only_for(
            "image_urls",
            "self.serving.imageUrlInput",
            "imageUrlInput (the server fetching image URLs)",
            ".serving.imageUrlInput",
        ),
        _only_for("kv_cache_reuse", "self.serving.kvCacheReuse", "kvCacheReuse", ".serving.kvCacheReuse"),
        _only_for(
            "chunked_context", "self.serving.chunkedContext", "chunkedContext", ".serving.chunkedContext"
        ),
        cel_rule(
            f"!has(self.serving.crossKvCacheFraction) || self.model.type in {cel_list(encoder_decoder)}",
            "crossKvCacheFraction must not be set for decoder-only model types (TensorRT-LLM refuses it); "
            f"it applies to {', '.join(encoder_decoder)}; model.type is {{self.model.type}}",
            field_path=".serving.crossKvCacheFraction",
        ),
        _only_for(
            "bls",
            "has(self.serving.enableBls) && self.serving.enableBls",
            "enableBls (the tensorrt_llm_bls entry point)",
            ".serving.enableBls",
        ),
        cel_rule(
            "!self.serving.accumulateTokens || self.serving.streaming",
            "accumulateTokens needs streaming: set serving.streaming to true",
            field_path=".serving.accumulateTokens",
        ),
        cel_rule(
            "!has(self.serving.tritonMaxBatchSize) || !has(self.engine.maxBatchSize) || "
            "self.serving.tritonMaxBatchSize <= self.engine.maxBatchSize",
            "serving.tritonMaxBatchSize ({self.serving.tritonMaxBatchSize}) must not exceed "
            "engine.maxBatchSize ({self.engine.maxBatchSize})",
            field_path=".serving.tritonMaxBatchSize",
        ),
        cel_rule(
            "!has(self.serving.maxBeamWidth) || !has(self.engine.maxBeamWidth) || "
            "self.serving.maxBeamWidth <= self.engine.maxBeamWidth",
            "serving.maxBeamWidth ({self.serving.maxBeamWidth}) must not exceed engine.maxBeamWidth "
            "({self.engine.maxBeamWidth})",
            field_path=".serving.maxBeamWidth",
        ),
        cel_rule(
            f"!(self.model.type in {cel_list(WHISPER_TYPES)}) || !has(self.serving.maxBeamWidth) || "
            "self.serving.maxBeamWidth == 1",
            f"serving.maxBeamWidth ({{self.serving.maxBeamWidth}}) must be 1 for {whisper}: whisper_bls "
            "sends no beam width and the executor refuses requests whose beam width differs from the served "
            "one",
            field_path=".serving.maxBeamWidth",
        ),
        _only_for("whisper_variants", "self.serving.zeroPad", "zeroPad", ".serving.zeroPad"),
    ]
    for model_type in WHISPER_TYPES:
        knowledge = KNOWLEDGE[ModelType(model_type)]
        supported = [v.name for v in knowledge.whisper_variants if not v.english_only]
        english = [v.name for v in knowledge.whisper_variants if v.english_only]
        rules.append(
            cel_rule(
                f"self.model.type != '{model_type}' || !has(self.model.variant) || "
                f"self.model.variant in {cel_list(supported)}",
                f"model.variant ({{self.model.variant}}) for {model_type} must be one of "
                f"{', '.join(supported)}"
                + (
                    f" (English-only {', '.join(english)} are not supported: whisper_bls decodes with the "
                    "multilingual tokenizer)"
                    if english
                    else ""
                ),
                field_path=".model.variant",
            )
        )
    # The rules about fields whose meaning is the engine runtime's hold only there; on trtllm-serve its own
    # rules (below) say what these fields may be.
    return [_on_engine(rule) if rule.get("fieldPath") in _ENGINE_RULE_PATHS else rule for rule in rules]


# The runtime a spec names, in CEL (a spec that names none is served by triton-trtllm-engine).
SERVE_RUNTIME = f"has(self.runtime) && self.runtime == '{Runtime.TRTLLM_SERVE}'"
ENGINE_RUNTIME = f"!has(self.runtime) || self.runtime == '{Runtime.TRITON_TRTLLM_ENGINE}'"
_RUNTIME_OF_SELF = f"(has(self.runtime) ? self.runtime : '{Runtime.TRITON_TRTLLM_ENGINE}')"
_RUNTIME_OF_OLD = f"(has(oldSelf.runtime) ? oldSelf.runtime : '{Runtime.TRITON_TRTLLM_ENGINE}')"
_ENGINE_RULE_PATHS = frozenset(
    {
        ".engine.maxImagesPerRequest",
        ".engine.vision.maxPatchesPerRequest",
        ".engine.vision.maxBatchSize",
        ".engine.maxMultimodalLen",
        ".engine.maxEncoderInputLen",
        ".engine.kvCacheDtype",
        ".serving.imageUrlInput",
        ".serving.kvCacheReuse",
        ".serving.chunkedContext",
        ".serving.enableBls",
        ".serving.accumulateTokens",
        ".serving.tritonMaxBatchSize",
        ".serving.maxBeamWidth",
    }
)


def _on_engine(rule: JsonDict) -> JsonDict:
    """`rule`, holding only on the triton-trtllm-engine runtime."""
    return {**rule, "rule": f"({SERVE_RUNTIME}) || ({rule['rule']})"}


def _serve_only_for(attribute: str, condition: str, what: str, field_path: str) -> JsonDict:
    """On trtllm-serve, `condition` only for the model types whose serve knowledge flag `attribute` is set."""
    allowed = serve_types_where(attribute)
    return cel_rule(
        f"!({SERVE_RUNTIME}) || !({condition}) || self.model.type in {cel_list(allowed)}",
        f"{what} is supported on trtllm-serve only for model types {', '.join(allowed)} (TensorRT-LLM "
        "1.2.1's multimodal support matrix); model.type is {self.model.type}",
        field_path=field_path,
    )


# Fields with no meaning on trtllm-serve: (field path from the spec, the condition that it is set, its value
# in the message or None, what it belongs to). Fields the CRD defaults are compared with their default.
_BUILD = "a setting of the TensorRT engine build, and trtllm-serve builds nothing"
_TRITON = "a setting of Triton's TensorRT-LLM backend (runtime triton-trtllm-engine)"
_NOT_ON_SERVE: tuple[tuple[str, str, str | None, str], ...] = (
    ("engine.builderImage", "has(self.engine.builderImage)", "self.engine.builderImage", _BUILD),
    ("engine.maxInputLen", "has(self.engine.maxInputLen)", "self.engine.maxInputLen", _BUILD),
    ("engine.maxMultimodalLen", "has(self.engine.maxMultimodalLen)", "self.engine.maxMultimodalLen", _BUILD),
    (
        "engine.maxEncoderInputLen",
        "has(self.engine.maxEncoderInputLen)",
        "self.engine.maxEncoderInputLen",
        _BUILD,
    ),
    ("engine.maxBeamWidth", "has(self.engine.maxBeamWidth)", "self.engine.maxBeamWidth", _BUILD),
    ("engine.vision", "has(self.engine.vision)", None, _BUILD),
    (
        "engine.weightOnlyPrecision",
        "self.engine.weightOnlyPrecision != 'none'",
        "self.engine.weightOnlyPrecision",
        _BUILD,
    ),
    ("engine.calibrationSize", "self.engine.calibrationSize != 512", "self.engine.calibrationSize", _BUILD),
    (
        "engine.maxImagesPerRequest",
        "self.engine.maxImagesPerRequest != 1",
        "self.engine.maxImagesPerRequest",
        _BUILD,
    ),
    (
        "model.hiddenSize",
        "has(self.model.hiddenSize)",
        "self.model.hiddenSize",
        "sizes Triton's CUDA memory pool",
    ),
    (
        "serving.tritonMaxBatchSize",
        "has(self.serving.tritonMaxBatchSize)",
        "self.serving.tritonMaxBatchSize",
        _TRITON,
    ),
    (
        "serving.streaming",
        "self.serving.streaming",
        "self.serving.streaming",
        _TRITON + "; OpenAI clients ask for streaming per request",
    ),
    ("serving.maxBeamWidth", "has(self.serving.maxBeamWidth)", "self.serving.maxBeamWidth", _TRITON),
    ("serving.enableBls", "has(self.serving.enableBls)", "self.serving.enableBls", _TRITON),
    ("serving.accumulateTokens", "self.serving.accumulateTokens", "self.serving.accumulateTokens", _TRITON),
    (
        "serving.imageUrlInput",
        "self.serving.imageUrlInput",
        "self.serving.imageUrlInput",
        "a Triton input; trtllm-serve always fetches the http(s) image URLs clients send, and "
        "serving.networkPolicy.egress decides where it may connect",
    ),
    (
        "serving.batchSchedulerPolicy",
        "has(self.serving.batchSchedulerPolicy)",
        "self.serving.batchSchedulerPolicy",
        _TRITON,
    ),
    (
        "serving.excludeInputInOutput",
        "has(self.serving.excludeInputInOutput)",
        "self.serving.excludeInputInOutput",
        _TRITON,
    ),
    (
        "serving.batchingStrategy",
        "self.serving.batchingStrategy != 'inflight_fused_batching'",
        "self.serving.batchingStrategy",
        _TRITON,
    ),
    (
        "serving.logitsDatatype",
        "self.serving.logitsDatatype != 'TYPE_FP32'",
        "self.serving.logitsDatatype",
        _TRITON,
    ),
    (
        "serving.queue",
        "self.serving.queue.maxQueueDelayMicroseconds != 0 || "
        "self.serving.queue.preprocessingMaxQueueDelayMicroseconds != 20000 || "
        "self.serving.queue.maxQueueSize != 0",
        None,
        "Triton's dynamic batching",
    ),
    (
        "serving.instances",
        "self.serving.instances.preprocessing != 1 || self.serving.instances.postprocessing != 1 || "
        "has(self.serving.instances.bls)",
        None,
        "Triton's Python model instances",
    ),
    ("serving.loraCache", "has(self.serving.loraCache)", None, _TRITON),
    ("serving.modelCodePath", "has(self.serving.modelCodePath)", "self.serving.modelCodePath", _TRITON),
    (
        "serving.cudaMemoryPoolBytes",
        "has(self.serving.cudaMemoryPoolBytes)",
        "self.serving.cudaMemoryPoolBytes",
        _TRITON,
    ),
)


def _not_on_serve(path: str, present: str, value: str | None, belongs: str) -> JsonDict:
    shown = f" ({{{value}}})" if value is not None else ""
    return cel_rule(
        f"!({SERVE_RUNTIME}) || !({present})",
        f"{path}{shown} has no meaning on runtime trtllm-serve: it is {belongs}; leave it out",
        field_path=f".{path}",
    )


def _modality_rules() -> list[JsonDict]:
    """serving.modalities names only what the model type takes on its runtime: one rule per modality."""
    rules = []
    for modality in Modality:
        takers = {
            runtime: [t for t in types_of(runtime) if modality in modalities_of(runtime, t)]
            for runtime in Runtime
        }
        serve, engine = takers[Runtime.TRTLLM_SERVE], takers[Runtime.TRITON_TRTLLM_ENGINE]
        who = " and by ".join(
            f"{', '.join(types)} on {runtime}" for runtime, types in takers.items() if types
        )
        rules.append(
            cel_rule(
                f"!has(self.serving.modalities) || !('{modality}' in self.serving.modalities) || "
                f"(({SERVE_RUNTIME}) ? self.model.type in {cel_list(serve)} : "
                f"self.model.type in {cel_list(engine)})",
                f"serving.modalities names {modality}, which the model type does not take on its runtime "
                f"({modality} is taken by {who}; model.type is {{self.model.type}} on runtime "
                f"{{{_RUNTIME_OF_SELF}}})",
                field_path=".serving.modalities",
            )
        )
    return rules


def _heads_rules() -> list[JsonDict]:
    """On trtllm-serve, the tensor-parallel size must split the heads of a known checkpoint.

    One rule per head count that some allowed size cannot split, naming the sizes that can.
    """
    by_heads: dict[Heads, list[str]] = {}
    for repo, heads in checkpoint_heads().items():
        by_heads.setdefault(heads, []).append(repo)
    rules = []
    for heads, repos in by_heads.items():
        sizes = [size for size in TENSOR_PARALLEL_SIZES if heads.split_by(size)]
        if len(sizes) == len(TENSOR_PARALLEL_SIZES):
            continue
        rules.append(
            cel_rule(
                f"!({SERVE_RUNTIME}) || !has(self.model.source.huggingface) || "
                f"!(self.model.source.huggingface.repo in {cel_list(repos)}) || "
                f"self.engine.tensorParallelSize in {sizes}",
                "engine.tensorParallelSize ({self.engine.tensorParallelSize}) cannot split the checkpoint's "
                "heads among its ranks: every rank needs whole attention heads, and key-value heads are "
                "split or, when fewer than the ranks, replicated; {self.model.source.huggingface.repo} has "
                f"{heads.attention} attention heads and {heads.key_value} key-value heads, so the size can "
                f"be {', '.join(map(str, sizes[:-1]))} or {sizes[-1]}",
                field_path=".engine.tensorParallelSize",
            )
        )
    return rules


def _runtime_rules() -> list[JsonDict]:
    serve_types, engine_types = types_of(Runtime.TRTLLM_SERVE), types_of(Runtime.TRITON_TRTLLM_ENGINE)
    return [
        cel_rule(
            f"{_RUNTIME_OF_SELF} == {_RUNTIME_OF_OLD}",
            f"runtime is immutable ({{{_RUNTIME_OF_OLD}}}, now {{{_RUNTIME_OF_SELF}}}): the other runtime "
            "serves from other files in the engine cache with other pods and another API; create a new "
            "MultimodalDeployment instead",
            field_path=".runtime",
        ),
        cel_rule(
            f"!({SERVE_RUNTIME}) || self.model.type in {cel_list(serve_types)}",
            "model.type ({self.model.type}) is not served by runtime trtllm-serve: TensorRT-LLM 1.2.1's "
            f"PyTorch backend lists no multimodal support for it (it serves {', '.join(serve_types)}); leave "
            "runtime out to build engines for it with triton-trtllm-engine",
            field_path=".model.type",
        ),
        cel_rule(
            f"!({ENGINE_RUNTIME}) || self.model.type in {cel_list(engine_types)}",
            "model.type ({self.model.type}) is served only by runtime trtllm-serve: there is no TensorRT "
            f"engine recipe for it (triton-trtllm-engine serves {', '.join(engine_types)}); set spec.runtime "
            "to trtllm-serve",
            field_path=".model.type",
        ),
        *_modality_rules(),
        *_heads_rules(),
        _serve_only_for(
            "fp8_kv_cache", "self.engine.kvCacheDtype == 'fp8'", "kvCacheDtype fp8", ".engine.kvCacheDtype"
        ),
        _serve_only_for(
            "kv_cache_reuse", "self.serving.kvCacheReuse", "kvCacheReuse", ".serving.kvCacheReuse"
        ),
        _serve_only_for(
            "chunked_prefill",
            "self.serving.chunkedContext",
            "chunkedContext (enable_chunked_prefill)",
            ".serving.chunkedContext",
        ),
        *(_not_on_serve(*entry) for entry in _NOT_ON_SERVE),
    ]


def _autoscaling_rules() -> list[JsonDict]:
    """`serving.autoscaling` against the rest of the spec: replicas, the runtime's metrics, the GPU budget."""
    autoscaling = "self.serving.autoscaling"
    rules = [
        # `replicas` is stored as 1 when left out (the scale subresource needs a value), so 1 reads as unset.
        cel_rule(
            f"!has({autoscaling}) || self.serving.replicas == 1",
            "serving.replicas ({self.serving.replicas}) cannot be set together with serving.autoscaling: "
            "the HorizontalPodAutoscaler sets the number of serving pods itself, between minReplicas "
            f"({{{autoscaling}.minReplicas}}) and maxReplicas ({{{autoscaling}.maxReplicas}}); leave "
            "replicas out (the default the API server stores, 1, is ignored while autoscaling is on), or "
            "remove serving.autoscaling to set a fixed number",
            field_path=".serving.replicas",
        ),
        cel_rule(
            f"!has({autoscaling}) || !has({autoscaling}.maxGpus) || "
            f"{autoscaling}.maxReplicas * self.engine.tensorParallelSize <= {autoscaling}.maxGpus",
            f"serving.autoscaling.maxReplicas ({{{autoscaling}.maxReplicas}}) pods of "
            "engine.tensorParallelSize ({self.engine.tensorParallelSize}) GPUs each need more GPUs than "
            f"serving.autoscaling.maxGpus ({{{autoscaling}.maxGpus}}) allows; lower maxReplicas or raise "
            f"maxGpus ({{{autoscaling}.maxReplicas}} x {{self.engine.tensorParallelSize}} = "
            f"{{{autoscaling}.maxReplicas * self.engine.tensorParallelSize}} GPUs; maxReplicas may be at "
            f"most {{{autoscaling}.maxGpus / self.engine.tensorParallelSize}})",
            field_path=".serving.autoscaling.maxReplicas",
        ),
    ]
    for facts in SCALING_METRICS.values():
        for runtime, why in facts.unavailable.items():
            others = [other.metric for other in SCALING_METRICS.values() if runtime in other.sources]
            rules.append(
                cel_rule(
                    f"!has({autoscaling}) || {autoscaling}.metric.name != '{facts.metric}' || "
                    f"{_RUNTIME_OF_SELF} != '{runtime}'",
                    f"serving.autoscaling.metric.name {facts.metric} is not available on runtime {runtime}: "
                    f"{why}; scale on {' or '.join(others)} instead",
                    field_path=".serving.autoscaling.metric.name",
                )
            )
    return rules


def _spec_rules() -> list[JsonValue]:
    return [*_engine_and_common_rules(), *_runtime_rules(), *_autoscaling_rules()]


class MultimodalDeploymentSpec(_Schema):
    """Desired state: the model, how to build its engines and how to serve them."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _spec_rules()})

    @property
    def serving_runtime(self) -> Runtime:
        """The runtime, `triton-trtllm-engine` when the spec names none."""
        return self.runtime or Runtime.TRITON_TRTLLM_ENGINE

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


class ConditionStatus(StrEnum):
    """Status of a condition, as in metav1.Condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Schema):
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


class DerivedLimits(_Schema):
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
    vision_max_batch_size: int | None = None
    """Vision engine batch."""
    max_num_images: int | None = None
    """Images per request, as preprocessing expects."""
    triton_max_batch_size: int
    """Triton max_batch_size of every model."""
    triton_max_beam_width: int
    """Beam width `tensorrt_llm` serves; requests must use exactly this width."""
    cuda_memory_pool_bytes: int
    """CUDA memory pool on GPU 0."""


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


class EngineStatus(_Schema):
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


class WeightsSource(StrEnum):
    """Where the weights a trtllm-serve resource serves came from."""

    CACHE_HIT = "CacheHit"
    DOWNLOADED = "Downloaded"
    # A model.source.pvc claim: served where it lies, nothing downloaded.
    VOLUME = "Volume"


class WeightsStatus(_Schema):
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


class Endpoints(_Schema):
    """In-cluster addresses of the Triton server."""

    http: str | None = None
    """HTTP/REST (KServe v2 protocol, generate endpoints; on trtllm-serve the OpenAI API, `/v1`)."""
    grpc: str | None = None
    """gRPC (KServe v2 protocol, streaming)."""
    metrics: str | None = None
    """Prometheus metrics of the server."""


class AutoscalingStatus(_Schema):
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


class MultimodalDeploymentStatus(_Schema):
    """Observed state, written by the operator."""

    observed_generation: int | None = None
    """The metadata.generation the status describes."""
    phase: Phase | None = None
    """Pending, Building (trtllm-serve: Downloading), Deploying, Ready, Degraded or Failed."""
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    """Validated, EngineReady, ModelRepositoryReady, Available and the summary Ready."""
    derived: DerivedLimits | None = None
    """Build limits and sizes computed from the spec."""
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
    """Serving pods wanted: spec.serving.replicas, or with autoscaling what the autoscaler set."""
    updated_replicas: int | None = None
    """Serving pods running the current model repository and engine."""
    ready_replicas: int | None = None
    """Serving pods ready."""
    selector: str | None = None
    """Label selector of the serving pods (for the scale subresource and autoscalers)."""
    autoscaling: AutoscalingStatus | None = None
    """The autoscaler's decision, with serving.autoscaling (the Autoscaling condition says it in words)."""
    warnings: list[Annotated[str, Field(max_length=WARNING_MAX_LENGTH)]] | None = Field(
        None, max_length=MAX_WARNINGS
    )
    """Traps the spec walks into that the API server admits but a real cluster punishes (a ReadWriteOnce
    engine cache with several replicas, a model revision that is not a commit, ...), one `field path:
    message` each: the words `kubectl apply` prints where the chart's admission policy is installed, and
    `mmctl validate` offline. A note only: they never hold Ready back."""


class MultimodalDeployment(_Schema):
    """A vision-language or speech model built with TensorRT-LLM and served by Triton Inference Server."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["serving.multimodal.dev/v1alpha1"] = "serving.multimodal.dev/v1alpha1"
    """API version."""
    kind: Literal["MultimodalDeployment"] = "MultimodalDeployment"
    """Kind."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Standard object metadata."""
    spec: MultimodalDeploymentSpec
    """Desired state."""
    status: MultimodalDeploymentStatus | None = None
    """Observed state."""
