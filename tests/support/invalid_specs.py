"""Resources that must be refused, with the field path, a fragment of the rule's message and the values it
names.

Shared by the unit tier (offline validation) and the cluster tier (the API server's CEL rules).
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from mmd_operator.api.validation import InvalidSpecError
from mmd_operator.plan.resource_plan import plan_resource

DELETE = object()

BASE_MODELS: dict[str, dict[str, Any]] = {
    "llava": {"type": "llava", "source": {"huggingface": {"repo": "llava-hf/llava-1.5-7b-hf"}}},
    "vila": {"type": "vila", "source": {"huggingface": {"repo": "Efficient-Large-Model/vila1.5-3b"}}},
    "mllama": {"type": "mllama", "source": {"huggingface": {"repo": "meta-llama/Llama-3.2-11B-Vision"}}},
    "llava_onevision": {
        "type": "llava_onevision",
        "source": {"huggingface": {"repo": "llava-hf/llava-onevision-qwen2-7b-ov-hf"}},
    },
    "qwen2_vl": {"type": "qwen2_vl", "source": {"huggingface": {"repo": "Qwen/Qwen2-VL-7B-Instruct"}}},
    "whisper": {"type": "whisper", "variant": "large-v3", "source": {"huggingface": {"repo": "openai/w"}}},
    "distil_whisper": {
        "type": "distil_whisper",
        "variant": "distil-large-v3",
        "source": {"huggingface": {"repo": "distil-whisper/distil-large-v3"}},
    },
    "internlm_xcomposer2": {
        "type": "internlm_xcomposer2",
        "source": {"huggingface": {"repo": "internlm/internlm-xcomposer2-vl-7b"}},
        "lora": {"source": {"pvc": {"claimName": "adapters"}}},
    },
    # Types only the trtllm-serve runtime serves: the base is refused until a patch names that runtime.
    "qwen2_5_vl": {"type": "qwen2_5_vl", "source": {"huggingface": {"repo": "Qwen/Qwen2.5-VL-7B-Instruct"}}},
    "gemma3": {"type": "gemma3", "source": {"huggingface": {"repo": "google/gemma-3-4b-it"}}},
}
# The bases that need `runtime: trtllm-serve` to be valid.
SERVE_BASES = frozenset({"qwen2_5_vl", "gemma3"})
SERVE = {"runtime": "trtllm-serve"}


def resource(model: str, patch: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": copy.deepcopy(BASE_MODELS[model])}
    if model in SERVE_BASES:
        spec = {**SERVE, **spec}
    document = {
        "apiVersion": "serving.multimodal.dev/v1alpha1",
        "kind": "MultimodalDeployment",
        "metadata": {"name": "test"},
        "spec": spec,
    }
    _merge(document, patch or {})
    return document


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is DELETE:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def problems_of(document: dict[str, Any]) -> list[str]:
    try:
        plan_resource(document)
    except InvalidSpecError as invalid:
        return [str(problem) for problem in invalid.problems]
    return []


# A valid `serving.autoscaling`, which the autoscaling cases break one way each.
AUTOSCALING: dict[str, Any] = {
    "minReplicas": 1,
    "maxReplicas": 4,
    "metric": {"name": "QueueTimePerRequest", "target": 200},
}


class InvalidSpec(NamedTuple):
    """A resource (`base` with `patch` merged in) that must be refused at `path`."""

    id: str
    base: str
    patch: dict[str, Any]
    path: str
    # In the offline problem at `path`, and in the API server's message when a CEL rule refuses it.
    fragment: str
    # Where the rule compares values: each is shown, as written here, in the offline problem and in the
    # API server's message at `path` (strings quoted where the API server quotes them).
    values: tuple[str, ...] = ()


CASES: list[InvalidSpec] = [
    # (id, base model, patch, field path, message fragment)
    InvalidSpec(
        "type-missing", "llava", {"spec": {"model": {"type": DELETE}}}, "spec.model.type", "required"
    ),
    InvalidSpec(
        "type-unknown",
        "llava",
        {"spec": {"model": {"type": "llama"}}},
        "spec.model.type",
        "must be 'blip2'",
        values=('"llama"',),
    ),
    InvalidSpec(
        "source-missing", "llava", {"spec": {"model": {"source": DELETE}}}, "spec.model.source", "required"
    ),
    InvalidSpec(
        "source-both",
        "llava",
        {"spec": {"model": {"source": {"pvc": {"claimName": "models"}}}}},
        "spec.model.source",
        "exactly one of huggingface or pvc must be set; both are",
    ),
    InvalidSpec(
        "source-none",
        "llava",
        {"spec": {"model": {"source": {"huggingface": DELETE}}}},
        "spec.model.source",
        "exactly one of huggingface or pvc must be set; neither is",
    ),
    InvalidSpec(
        "repo-format",
        "llava",
        {"spec": {"model": {"source": {"huggingface": {"repo": "llava"}}}}},
        "spec.model.source.huggingface.repo",
        "must match pattern",
        values=('"llava"',),
    ),
    InvalidSpec(
        "pvc-path-escapes",
        "llava",
        {"spec": {"model": {"source": {"huggingface": DELETE, "pvc": {"claimName": "m", "path": "../etc"}}}}},
        "spec.model.source.pvc.path",
        "path (../etc) must not contain '..'",
        values=("../etc",),
    ),
    InvalidSpec(
        "token-secret-without-key",
        "llava",
        {"spec": {"model": {"source": {"huggingface": {"tokenSecretRef": {"name": "hf"}}}}}},
        "spec.model.source.huggingface.tokenSecretRef.key",
        "required",
    ),
    InvalidSpec(
        "unknown-field",
        "llava",
        {"spec": {"engine": {"maxBatch": 8}}},
        "spec.engine.maxBatch",
        "unknown field; did you mean maxBatchSize?",
    ),
    InvalidSpec(
        "quantity-in-limits",
        "llava",
        {"spec": {"serving": {"pod": {"resources": {"limits": {"memory": "96 GB"}}}}}},
        "spec.serving.pod.resources.limits[memory]",
        '"96 GB" is not a Kubernetes quantity; write a number with an optional suffix such as 500Gi',
        values=('"96 GB"',),
    ),
    InvalidSpec(
        "tp-size",
        "llava",
        {"spec": {"engine": {"tensorParallelSize": 3}}},
        "spec.engine.tensorParallelSize",
        "must be 1, 2, 4, 8, 16 or 32",
        values=("3",),
    ),
    InvalidSpec(
        "batch-zero",
        "llava",
        {"spec": {"engine": {"maxBatchSize": 0}}},
        "spec.engine.maxBatchSize",
        "greater than or equal to 1",
        values=("0",),
    ),
    InvalidSpec(
        "seq-not-above-input",
        "llava",
        {"spec": {"engine": {"maxInputLen": 2048, "maxSeqLen": 2048}}},
        "spec.engine.maxSeqLen",
        "maxSeqLen (2048) must be greater than maxInputLen (2048)",
        values=("2048",),
    ),
    InvalidSpec(
        "seq-below-default-input",
        "llava",
        {"spec": {"engine": {"maxSeqLen": 1000}}},
        "spec.engine.maxSeqLen",
        "maxSeqLen is 1000, maxInputLen is 2048",
        values=("1000", "2048"),
    ),
    InvalidSpec(
        "images-on-single-image-type",
        "llava",
        {"spec": {"engine": {"maxImagesPerRequest": 2}}},
        "spec.engine.maxImagesPerRequest",
        "maxImagesPerRequest above 1 (here 2) is supported only for model types vila; model.type is llava",
        values=("2", "llava"),
    ),
    InvalidSpec(
        "multimodal-len-contradicts",
        "llava",
        {"spec": {"engine": {"maxMultimodalLen": 4000}}},
        "spec.engine.maxMultimodalLen",
        "is 4000 but must equal maxBatchSize x features per image x maxImagesPerRequest = 8 x 576 x 1 = 4608",
        values=("4000", "4608"),
    ),
    InvalidSpec(
        "vision-batch-contradicts",
        "vila",
        {"spec": {"engine": {"maxImagesPerRequest": 4, "vision": {"maxBatchSize": 8}}}},
        "spec.engine.vision.maxBatchSize",
        "is 8 but must equal maxBatchSize x maxImagesPerRequest = 8 x 4 = 32",
        values=("8", "32"),
    ),
    InvalidSpec(
        "multimodal-len-without-prompt-table",
        "mllama",
        {"spec": {"engine": {"maxMultimodalLen": 100}}},
        "spec.engine.maxMultimodalLen",
        "maxMultimodalLen (100) is supported only for model types",
        values=("100", "mllama"),
    ),
    InvalidSpec(
        "encoder-len-on-decoder-only",
        "llava",
        {"spec": {"engine": {"maxEncoderInputLen": 100}}},
        "spec.engine.maxEncoderInputLen",
        "maxEncoderInputLen (100) is supported only for model types distil_whisper, mllama, whisper; "
        "model.type is llava",
        values=("100", "llava"),
    ),
    InvalidSpec(
        "whisper-encoder-len-fixed",
        "whisper",
        {"spec": {"engine": {"maxEncoderInputLen": 1500}}},
        "spec.engine.maxEncoderInputLen",
        "is 1500 but the whisper encoder takes exactly 3000 mel frames",
        values=("1500", "3000"),
    ),
    InvalidSpec(
        "fp8-unsupported",
        "mllama",
        {"spec": {"engine": {"kvCacheDtype": "fp8"}}},
        "spec.engine.kvCacheDtype",
        "kvCacheDtype fp8 is supported only for model types",
        values=("mllama",),
    ),
    InvalidSpec(
        "fp8-with-weight-only",
        "llava",
        {"spec": {"engine": {"kvCacheDtype": "fp8", "weightOnlyPrecision": "int8"}}},
        "spec.engine.weightOnlyPrecision",
        "kvCacheDtype fp8 and weightOnlyPrecision (int8) cannot be combined",
        values=("int8",),
    ),
    InvalidSpec(
        "kv-reuse-qwen2",
        "qwen2_vl",
        {"spec": {"serving": {"kvCacheReuse": True}}},
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported only for model types",
        values=("qwen2_vl",),
    ),
    InvalidSpec(
        "kv-reuse-xcomposer2",
        "internlm_xcomposer2",
        {"spec": {"serving": {"kvCacheReuse": True}}},
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported only for model types",
        values=("internlm_xcomposer2",),
    ),
    InvalidSpec(
        "serving-beam-above-engine",
        "llava",
        {"spec": {"engine": {"maxBeamWidth": 2}, "serving": {"maxBeamWidth": 4}}},
        "spec.serving.maxBeamWidth",
        "serving.maxBeamWidth (4) must not exceed engine.maxBeamWidth (2)",
        values=("4", "2"),
    ),
    InvalidSpec(
        "serving-beam-above-default-engine",
        "llava",
        {"spec": {"serving": {"maxBeamWidth": 2}}},
        "spec.serving.maxBeamWidth",
        "is 2 but must not exceed the engine's maxBeamWidth 1",
        values=("2", "1"),
    ),
    InvalidSpec(
        "chunked-context-whisper",
        "whisper",
        {"spec": {"serving": {"chunkedContext": True}}},
        "spec.serving.chunkedContext",
        "chunkedContext is supported only for model types",
        values=("whisper",),
    ),
    InvalidSpec(
        "cross-fraction-decoder-only",
        "llava",
        {"spec": {"serving": {"crossKvCacheFraction": 0.5}}},
        "spec.serving.crossKvCacheFraction",
        "must not be set for decoder-only model types",
        values=("llava",),
    ),
    InvalidSpec(
        "cross-fraction-range",
        "mllama",
        {"spec": {"serving": {"crossKvCacheFraction": 1.0}}},
        "spec.serving.crossKvCacheFraction",
        "less than 1",
        values=("1",),
    ),
    InvalidSpec(
        "whisper-max-utilization",
        "whisper",
        {"spec": {"serving": {"batchSchedulerPolicy": "max_utilization"}}},
        "spec.serving.batchSchedulerPolicy",
        "batchSchedulerPolicy max_utilization does not serve distil_whisper, whisper",
        values=("whisper",),
    ),
    InvalidSpec(
        "whisper-variant-missing",
        "whisper",
        {"spec": {"model": {"variant": DELETE}}},
        "spec.model.variant",
        "model.variant is required for distil_whisper, whisper",
    ),
    InvalidSpec(
        "variant-on-llava",
        "llava",
        {"spec": {"model": {"variant": "large-v3"}}},
        "spec.model.variant",
        "model.variant is supported only for model types distil_whisper, whisper; model.type is llava",
        values=("llava",),
    ),
    InvalidSpec(
        "whisper-variant-unknown",
        "whisper",
        {"spec": {"model": {"variant": "large-v4"}}},
        "spec.model.variant",
        "model.variant (large-v4) for whisper must be one of large-v3, large-v3-turbo",
        values=("large-v4",),
    ),
    InvalidSpec(
        "whisper-english-only",
        "whisper",
        {"spec": {"model": {"variant": "small.en"}}},
        "spec.model.variant",
        "English-only medium.en, small.en",
        values=("small.en",),
    ),
    InvalidSpec(
        "distil-variant-of-whisper",
        "distil_whisper",
        {"spec": {"model": {"variant": "large-v3"}}},
        "spec.model.variant",
        "model.variant (large-v3) for distil_whisper must be one of distil-large-v3, distil-large-v2",
        values=("large-v3",),
    ),
    InvalidSpec(
        "xcomposer2-without-lora",
        "internlm_xcomposer2",
        {"spec": {"model": {"lora": DELETE}}},
        "spec.model.lora",
        "model.lora is required for internlm_xcomposer2",
    ),
    InvalidSpec(
        "lora-on-llava",
        "llava",
        {"spec": {"model": {"lora": {"source": {"pvc": {"claimName": "a"}}}}}},
        "spec.model.lora",
        "model.lora is supported only for model types internlm_xcomposer2; model.type is llava",
        values=("llava",),
    ),
    InvalidSpec(
        "bls-on-whisper",
        "whisper",
        {"spec": {"serving": {"enableBls": True}}},
        "spec.serving.enableBls",
        "enableBls (the tensorrt_llm_bls entry point) is supported only for model types blip2, llava,",
        values=("whisper",),
    ),
    InvalidSpec(
        "bls-on-xcomposer2",
        "internlm_xcomposer2",
        {"spec": {"serving": {"enableBls": True}}},
        "spec.serving.enableBls",
        "is supported only for model types",
        values=("internlm_xcomposer2",),
    ),
    InvalidSpec(
        "bls-on-mllama",
        "mllama",
        {"spec": {"serving": {"enableBls": True}}},
        "spec.serving.enableBls",
        "is supported only for model types",
        values=("mllama",),
    ),
    InvalidSpec(
        "accumulate-without-streaming",
        "llava",
        {"spec": {"serving": {"accumulateTokens": True}}},
        "spec.serving.accumulateTokens",
        "accumulateTokens needs streaming: set serving.streaming to true",
    ),
    InvalidSpec(
        "triton-batch-above-engine",
        "llava",
        {"spec": {"engine": {"maxBatchSize": 4}, "serving": {"tritonMaxBatchSize": 8}}},
        "spec.serving.tritonMaxBatchSize",
        "serving.tritonMaxBatchSize (8) must not exceed engine.maxBatchSize (4)",
        values=("8", "4"),
    ),
    InvalidSpec(
        "triton-batch-above-default-engine",
        "whisper",
        {"spec": {"serving": {"tritonMaxBatchSize": 128}}},
        "spec.serving.tritonMaxBatchSize",
        "is 128 but must not exceed the engine's maxBatchSize 64",
        values=("128", "64"),
    ),
    InvalidSpec(
        "pool-too-small",
        "llava",
        {"spec": {"serving": {"cudaMemoryPoolBytes": 1000}}},
        "spec.serving.cudaMemoryPoolBytes",
        "is 1000 but the prompt tables and encoder features need at least 142606336 bytes",
        values=("1000", "142606336"),
    ),
    InvalidSpec(
        "zero-pad-on-llava",
        "llava",
        {"spec": {"serving": {"zeroPad": True}}},
        "spec.serving.zeroPad",
        "zeroPad is supported only for model types distil_whisper, whisper; model.type is llava",
        values=("llava",),
    ),
    InvalidSpec(
        "kv-fraction-zero",
        "llava",
        {"spec": {"serving": {"kvCacheFreeGpuMemFraction": 0}}},
        "spec.serving.kvCacheFreeGpuMemFraction",
        "greater than 0",
        values=("0",),
    ),
    InvalidSpec(
        "images-exceed-input",
        "vila",
        {"spec": {"engine": {"maxImagesPerRequest": 8, "maxInputLen": 1024}}},
        "spec.engine.maxInputLen",
        "is 1024 but one request carries 196 x 8 = 1568 visual tokens",
        values=("1024", "1568"),
    ),
    InvalidSpec(
        "patches-on-llava",
        "llava",
        {"spec": {"engine": {"vision": {"maxPatchesPerRequest": 4}}}},
        "spec.engine.vision.maxPatchesPerRequest",
        "engine.vision.maxPatchesPerRequest (4) is supported only for model types llava_onevision; "
        "model.type is llava",
        values=("4", "llava"),
    ),
    InvalidSpec(
        "api-version", "llava", {"apiVersion": "v1"}, "apiVersion", "must be serving.multimodal.dev/v1alpha1"
    ),
    InvalidSpec("kind", "llava", {"kind": "Deployment"}, "kind", "must be MultimodalDeployment"),
    InvalidSpec("name-missing", "llava", {"metadata": {"name": DELETE}}, "metadata.name", "required"),
    InvalidSpec(
        "replicas-negative",
        "llava",
        {"spec": {"serving": {"replicas": -1}}},
        "spec.serving.replicas",
        "greater than or equal to 0",
        values=("-1",),
    ),
    InvalidSpec(
        "dtype",
        "llava",
        {"spec": {"engine": {"dtype": "float32"}}},
        "spec.engine.dtype",
        "must be 'float16' or 'bfloat16'",
        values=('"float32"',),
    ),
    InvalidSpec(
        "logits-dtype",
        "llava",
        {"spec": {"serving": {"logitsDatatype": "TYPE_BF16"}}},
        "spec.serving.logitsDatatype",
        "must be 'TYPE_FP32' or 'TYPE_FP16'",
        values=('"TYPE_BF16"',),
    ),
    InvalidSpec(
        "batching-strategy",
        "llava",
        {"spec": {"serving": {"batchingStrategy": "V1"}}},
        "spec.serving.batchingStrategy",
        "must be 'inflight_fused_batching' or 'inflight_batching'",
        values=('"V1"',),
    ),
    InvalidSpec(
        "prompt-table-bf16",
        "llava",
        {"spec": {"serving": {"promptTableDatatype": "TYPE_BF16"}}},
        "spec.serving.promptTableDatatype",
        "must be 'TYPE_FP16'",
        values=('"TYPE_BF16"',),
    ),
    InvalidSpec(
        "image-url-input-without-server-loading",
        "llava",
        {"spec": {"serving": {"imageUrlInput": True}}},
        "spec.serving.imageUrlInput",
        "imageUrlInput (the server fetching image URLs) is supported only for model types llava_onevision",
        values=("llava",),
    ),
    InvalidSpec(
        "network-policy-client-without-selector",
        "llava",
        {"spec": {"serving": {"networkPolicy": {"clients": [{}]}}}},
        "spec.serving.networkPolicy.clients[0]",
        "a client needs a podSelector, a namespaceSelector or both",
    ),
    # -- the runtime: a model type on a runtime that cannot serve it --
    InvalidSpec(
        "serve-type-on-engine",
        "qwen2_5_vl",
        {"spec": {"runtime": DELETE}},
        "spec.model.type",
        "is served only by runtime trtllm-serve: there is no TensorRT engine recipe for it",
        values=("qwen2_5_vl",),
    ),
    InvalidSpec(
        "release-not-offered-for-type",
        "llava_onevision",
        {"spec": {"engine": {"tensorrtLlmVersion": "1.2.1"}}},
        "spec.engine.tensorrtLlmVersion",
        "is not offered for model.type llava_onevision: TensorRT-LLM 1.2.x's preprocessing gives an image",
        values=("1.2.1",),
    ),
    InvalidSpec(
        "engine-type-on-serve",
        "llava",
        {"spec": SERVE},
        "spec.model.type",
        "is not served by runtime trtllm-serve: TensorRT-LLM 1.2.1's PyTorch backend lists no multimodal",
        values=("llava",),
    ),
    InvalidSpec(
        "whisper-on-serve",
        "whisper",
        {"spec": SERVE},
        "spec.model.type",
        "is not served by runtime trtllm-serve",
        values=("whisper",),
    ),
    InvalidSpec(
        "runtime-unknown",
        "qwen2_5_vl",
        {"spec": {"runtime": "vllm"}},
        "spec.runtime",
        "must be 'triton-trtllm-engine' or 'trtllm-serve'",
        values=('"vllm"',),
    ),
    # -- a modality the type lacks --
    InvalidSpec(
        "video-to-gemma3",
        "gemma3",
        {"spec": {"serving": {"modalities": ["image", "video"]}}},
        "spec.serving.modalities",
        "serving.modalities names video, which the model type does not take on its runtime",
        values=("gemma3", "trtllm-serve"),
    ),
    InvalidSpec(
        "audio-to-qwen2_5_vl",
        "qwen2_5_vl",
        {"spec": {"serving": {"modalities": ["audio"]}}},
        "spec.serving.modalities",
        "serving.modalities names audio, which the model type does not take on its runtime (audio is taken "
        "by distil_whisper, whisper on triton-trtllm-engine and by phi4mm on trtllm-serve",
        values=("qwen2_5_vl",),
    ),
    InvalidSpec(
        "video-to-llava-engine",
        "llava",
        {"spec": {"serving": {"modalities": ["video"]}}},
        "spec.serving.modalities",
        "serving.modalities names video",
        values=("llava", "triton-trtllm-engine"),
    ),
    # -- tensor parallelism the heads cannot split --
    InvalidSpec(
        "tp-splits-no-heads",
        "qwen2_5_vl",
        {"spec": {"engine": {"tensorParallelSize": 8}}},
        "spec.engine.tensorParallelSize",
        "cannot split the checkpoint's heads among its ranks",
        values=("8", "Qwen/Qwen2.5-VL-7B-Instruct", "28 attention heads and 4 key-value heads", "1, 2 or 4"),
    ),
    # -- the world of one replica (tensor x pipeline ranks) and its pods --
    InvalidSpec(
        "world-past-the-largest",
        "llava",
        {"spec": {"engine": {"tensorParallelSize": 32}}},
        "spec.engine.tensorParallelSize",
        "is larger than the largest offered for model.type",
        values=("(32 x 1 = 32)", "(llava)", "triton-trtllm-engine, 16"),
    ),
    InvalidSpec(
        "world-past-one-node-for-whisper",
        "whisper",
        {"spec": {"engine": {"tensorParallelSize": 16}}},
        "spec.engine.tensorParallelSize",
        "its largest checkpoints fit one node of 8 GPUs",
        values=("(16 x 1 = 16)", "(whisper)", "triton-trtllm-engine, 8"),
    ),
    InvalidSpec(
        "pipeline-on-the-engine-runtime",
        "llava",
        {"spec": {"engine": {"tensorParallelSize": 8, "pipelineParallelSize": 2}}},
        "spec.engine.pipelineParallelSize",
        "pipeline parallelism is offered on runtime trtllm-serve for llama4, qwen2_5_vl, qwen2_vl only",
        values=("(2)", "(llava)", "(triton-trtllm-engine)"),
    ),
    InvalidSpec(
        "pipeline-on-a-serve-type-without-it",
        "gemma3",
        {"spec": {"engine": {"pipelineParallelSize": 2}}},
        "spec.engine.pipelineParallelSize",
        "is not offered for model.type",
        values=("(2)", "(gemma3)", "(trtllm-serve)"),
    ),
    InvalidSpec(
        "pipeline-splits-no-layers",
        "qwen2_5_vl",
        {"spec": {"engine": {"tensorParallelSize": 4, "pipelineParallelSize": 3}}},
        "spec.engine.pipelineParallelSize",
        "cannot split the checkpoint's layers evenly",
        values=("(3)", "Qwen/Qwen2.5-VL-7B-Instruct", "28 layers", "1, 2, 4, 7 or 14"),
    ),
    InvalidSpec(
        "gpus-per-pod-not-dividing-the-world",
        "llava",
        {"spec": {"engine": {"tensorParallelSize": 16}, "serving": {"gpusPerPod": 6}}},
        "spec.serving.gpusPerPod",
        "must divide the world of one replica",
        values=("(6)", "(16 x 1 = 16)"),
    ),
    InvalidSpec(
        "gpus-per-pod-above-the-world",
        "llava",
        {"spec": {"engine": {"tensorParallelSize": 2}, "serving": {"gpusPerPod": 4}}},
        "spec.serving.gpusPerPod",
        "must divide the world of one replica",
        values=("(4)", "(2 x 1 = 2)"),
    ),
    InvalidSpec(
        "world-needs-gpus-per-pod",
        "qwen2_5_vl",
        {"spec": {"engine": {"tensorParallelSize": 4, "pipelineParallelSize": 7}}},
        "spec.serving.gpusPerPod",
        "not a multiple of it; set serving.gpusPerPod to a divisor of the world",
        values=("(4 x 7 = 28)",),
    ),
    InvalidSpec(
        "one-pod-cache-for-a-group",
        "llava",
        {"spec": {"engine": {"tensorParallelSize": 16}, "engineCache": {"accessMode": "ReadWriteOnce"}}},
        "spec.engineCache.accessMode",
        "cannot serve a replica of more than one pod",
        values=("(ReadWriteOnce)", "a world of 16 ranks in 8 GPUs per pod"),
    ),
    # -- engine-only fields on trtllm-serve --
    InvalidSpec(
        "max-multimodal-len-on-serve",
        "qwen2_5_vl",
        {"spec": {"engine": {"maxMultimodalLen": 4096}}},
        "spec.engine.maxMultimodalLen",
        "has no meaning on runtime trtllm-serve: it is a setting of the TensorRT engine build",
        values=("4096",),
    ),
    InvalidSpec(
        "builder-image-on-serve",
        "gemma3",
        {"spec": {"engine": {"builderImage": "registry.example/builder:1"}}},
        "spec.engine.builderImage",
        "has no meaning on runtime trtllm-serve",
        values=("registry.example/builder:1",),
    ),
    InvalidSpec(
        "weight-only-on-serve",
        "qwen2_5_vl",
        {"spec": {"engine": {"weightOnlyPrecision": "int8"}}},
        "spec.engine.weightOnlyPrecision",
        "has no meaning on runtime trtllm-serve",
        values=("int8",),
    ),
    InvalidSpec(
        "vision-on-serve",
        "qwen2_5_vl",
        {"spec": {"engine": {"vision": {"maxBatchSize": 8}}}},
        "spec.engine.vision",
        "engine.vision has no meaning on runtime trtllm-serve",
    ),
    # -- engine-runtime serving options with no meaning on trtllm-serve --
    InvalidSpec(
        "streaming-on-serve",
        "qwen2_5_vl",
        {"spec": {"serving": {"streaming": True}}},
        "spec.serving.streaming",
        "OpenAI clients ask for streaming per request",
        values=("true",),
    ),
    InvalidSpec(
        "triton-batch-on-serve",
        "gemma3",
        {"spec": {"serving": {"tritonMaxBatchSize": 4}}},
        "spec.serving.tritonMaxBatchSize",
        "it is a setting of Triton's TensorRT-LLM backend",
        values=("4",),
    ),
    InvalidSpec(
        "image-url-input-on-serve",
        "qwen2_5_vl",
        {"spec": {"serving": {"imageUrlInput": True}}},
        "spec.serving.imageUrlInput",
        "trtllm-serve always fetches the http(s) image URLs clients send",
        values=("true",),
    ),
    InvalidSpec(
        "queue-on-serve",
        "qwen2_5_vl",
        {"spec": {"serving": {"queue": {"maxQueueSize": 16}}}},
        "spec.serving.queue",
        "serving.queue has no meaning on runtime trtllm-serve: it is Triton's dynamic batching",
    ),
    # -- what the type's PyTorch backend does not support --
    InvalidSpec(
        "kv-reuse-on-gemma3",
        "gemma3",
        {"spec": {"serving": {"kvCacheReuse": True}}},
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported on trtllm-serve only for model types mistral3, phi4mm, qwen2_5_vl, "
        "qwen2_vl",
        values=("gemma3",),
    ),
    InvalidSpec(
        "chunked-prefill-on-qwen2_5_vl",
        "qwen2_5_vl",
        {"spec": {"serving": {"chunkedContext": True}}},
        "spec.serving.chunkedContext",
        "chunkedContext (enable_chunked_prefill) is supported on trtllm-serve only for model types mistral3, "
        "phi4mm",
        values=("qwen2_5_vl",),
    ),
    InvalidSpec(
        "fp8-kv-on-gemma3",
        "gemma3",
        {"spec": {"engine": {"kvCacheDtype": "fp8"}}},
        "spec.engine.kvCacheDtype",
        "kvCacheDtype fp8 is supported on trtllm-serve only for model types",
        values=("gemma3",),
    ),
    # -- serving.autoscaling --
    InvalidSpec(
        "autoscaling-min-above-max",
        "llava",
        {"spec": {"serving": {"autoscaling": {**AUTOSCALING, "minReplicas": 5}}}},
        "spec.serving.autoscaling.minReplicas",
        "must not exceed maxReplicas",
        values=("5", "4"),
    ),
    InvalidSpec(
        "autoscaling-to-zero",
        "llava",
        {"spec": {"serving": {"autoscaling": {**AUTOSCALING, "minReplicas": 0}}}},
        "spec.serving.autoscaling.minReplicas",
        "must be at least 1: there is no scale-to-zero",
        values=("0",),
    ),
    InvalidSpec(
        "autoscaling-with-replicas",
        "llava",
        {"spec": {"serving": {"replicas": 3, "autoscaling": AUTOSCALING}}},
        "spec.serving.replicas",
        "cannot be set together with serving.autoscaling",
        values=("(3)", "minReplicas (1)", "maxReplicas (4)"),
    ),
    InvalidSpec(
        "autoscaling-over-gpu-budget",
        "llava",
        {
            "spec": {
                "engine": {"tensorParallelSize": 2},
                "serving": {"autoscaling": {**AUTOSCALING, "maxGpus": 6}},
            }
        },
        "spec.serving.autoscaling.maxReplicas",
        "need more GPUs than serving.autoscaling.maxGpus",
        values=("(4)", "(2 x 1)", "(6)", "4 x 2 = 8 GPUs", "at most 3"),
    ),
    InvalidSpec(
        "autoscaling-pending-on-serve",
        "qwen2_5_vl",
        {
            "spec": {
                "serving": {
                    "autoscaling": {**AUTOSCALING, "metric": {"name": "PendingRequests", "target": 4}}
                }
            }
        },
        "spec.serving.autoscaling.metric.name",
        "PendingRequests is not available on runtime trtllm-serve",
        values=("QueueTimePerRequest",),
    ),
    InvalidSpec(
        "memory-request-above-limit",
        "llava",
        {
            "spec": {
                "serving": {
                    "pod": {"resources": {"requests": {"memory": "32Gi"}, "limits": {"memory": "24Gi"}}}
                }
            }
        },
        "spec.serving.pod.resources.limits",
        "a request must not exceed its limit",
        values=("requests[memory] is 32Gi", "limits[memory] is 24Gi"),
    ),
    InvalidSpec(
        "cpu-request-above-limit-of-build",
        "qwen2_5_vl",
        {"spec": {"build": {"pod": {"resources": {"requests": {"cpu": 4}, "limits": {"cpu": "2500m"}}}}}},
        "spec.build.pod.resources.limits",
        "a request must not exceed its limit",
        values=("requests[cpu] is 4", "limits[cpu] is 2500m"),
    ),
    InvalidSpec(
        "negative-cpu-request",
        "llava",
        {"spec": {"serving": {"pod": {"resources": {"requests": {"cpu": "-1"}}}}}},
        "spec.serving.pod.resources.requests",
        "a quantity must not be negative",
        values=("requests[cpu] is -1",),
    ),
    InvalidSpec(
        "memory-limit-at-shared-memory",
        "llava",
        {"spec": {"serving": {"pod": {"resources": {"limits": {"memory": "2Gi"}}}}}},
        "spec.serving.pod.resources.limits",
        "must be above serving.sharedMemorySize",
        values=("limits[memory] (2Gi)", "sharedMemorySize (2Gi)"),
    ),
    InvalidSpec(
        "memory-limit-below-shared-memory-on-serve",
        "qwen2_5_vl",
        {
            "spec": {
                "serving": {"sharedMemorySize": "16Gi", "pod": {"resources": {"limits": {"memory": "12Gi"}}}}
            }
        },
        "spec.serving.pod.resources.limits",
        "the memory-backed /dev/shm is charged to the serving container's memory",
        values=("limits[memory] (12Gi)", "sharedMemorySize (16Gi)"),
    ),
    InvalidSpec(
        "build-memory-limit-below-shared-memory",
        "llava",
        {"spec": {"build": {"pod": {"resources": {"limits": {"memory": "6Gi"}}}}}},
        "spec.build.pod.resources.limits",
        "must be above the build pod's memory-backed /dev/shm of 8Gi",
        values=("limits[memory] (6Gi)",),
    ),
    InvalidSpec(
        "autoscaling-on-cpu",
        "llava",
        {"spec": {"serving": {"autoscaling": {**AUTOSCALING, "metric": {"name": "CPU", "target": 80}}}}},
        "spec.serving.autoscaling.metric.name",
        "must be 'QueueTimePerRequest' or 'PendingRequests'",
        values=('"CPU"',),
    ),
]
