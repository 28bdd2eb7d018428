"""Resources that must be refused, with the field path and a fragment of the rule's message.

Shared by the unit tier (offline validation) and the cluster tier (the API server's CEL rules).
"""

from __future__ import annotations

import copy
from typing import Any

from mmd_operator.api.validation import InvalidSpecError
from mmd_operator.plan.resource_plan import plan_resource

DELETE = object()

BASE_MODELS: dict[str, dict[str, Any]] = {
    "llava": {"type": "llava", "source": {"huggingface": {"repo": "llava-hf/llava-1.5-7b-hf"}}},
    "vila": {"type": "vila", "source": {"huggingface": {"repo": "Efficient-Large-Model/vila1.5-3b"}}},
    "mllama": {"type": "mllama", "source": {"huggingface": {"repo": "meta-llama/Llama-3.2-11B-Vision"}}},
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
}


def resource(model: str, patch: dict[str, Any] | None = None) -> dict[str, Any]:
    document = {
        "apiVersion": "serving.multimodal.dev/v1alpha1",
        "kind": "MultimodalDeployment",
        "metadata": {"name": "test"},
        "spec": {"model": copy.deepcopy(BASE_MODELS[model])},
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


CASES: list[tuple[str, str, dict[str, Any], str, str]] = [
    # (id, base model, patch, field path, message fragment)
    ("type-missing", "llava", {"spec": {"model": {"type": DELETE}}}, "spec.model.type", "required"),
    ("type-unknown", "llava", {"spec": {"model": {"type": "llama"}}}, "spec.model.type", "must be 'blip2'"),
    ("source-missing", "llava", {"spec": {"model": {"source": DELETE}}}, "spec.model.source", "required"),
    (
        "source-both",
        "llava",
        {"spec": {"model": {"source": {"pvc": {"claimName": "models"}}}}},
        "spec.model.source",
        "exactly one of huggingface or pvc",
    ),
    (
        "source-none",
        "llava",
        {"spec": {"model": {"source": {"huggingface": DELETE}}}},
        "spec.model.source",
        "exactly one of huggingface or pvc",
    ),
    (
        "repo-format",
        "llava",
        {"spec": {"model": {"source": {"huggingface": {"repo": "llava"}}}}},
        "spec.model.source.huggingface.repo",
        "must match pattern",
    ),
    (
        "pvc-path-escapes",
        "llava",
        {"spec": {"model": {"source": {"huggingface": DELETE, "pvc": {"claimName": "m", "path": "../etc"}}}}},
        "spec.model.source.pvc.path",
        "must not contain '..'",
    ),
    (
        "token-secret-without-key",
        "llava",
        {"spec": {"model": {"source": {"huggingface": {"tokenSecretRef": {"name": "hf"}}}}}},
        "spec.model.source.huggingface.tokenSecretRef.key",
        "required",
    ),
    (
        "unknown-field",
        "llava",
        {"spec": {"engine": {"maxBatch": 8}}},
        "spec.engine.maxBatch",
        "unknown field",
    ),
    (
        "tp-size",
        "llava",
        {"spec": {"engine": {"tensorParallelSize": 3}}},
        "spec.engine.tensorParallelSize",
        "must be 1, 2, 4 or 8",
    ),
    (
        "batch-zero",
        "llava",
        {"spec": {"engine": {"maxBatchSize": 0}}},
        "spec.engine.maxBatchSize",
        "greater than or equal to 1",
    ),
    (
        "seq-not-above-input",
        "llava",
        {"spec": {"engine": {"maxInputLen": 2048, "maxSeqLen": 2048}}},
        "spec.engine.maxSeqLen",
        "maxSeqLen must be greater than maxInputLen",
    ),
    (
        "seq-below-default-input",
        "llava",
        {"spec": {"engine": {"maxSeqLen": 1000}}},
        "spec.engine.maxSeqLen",
        "maxSeqLen is 1000, maxInputLen is 2048",
    ),
    (
        "images-on-single-image-type",
        "llava",
        {"spec": {"engine": {"maxImagesPerRequest": 2}}},
        "spec.engine.maxImagesPerRequest",
        "supported only for model types vila",
    ),
    (
        "multimodal-len-contradicts",
        "llava",
        {"spec": {"engine": {"maxMultimodalLen": 4000}}},
        "spec.engine.maxMultimodalLen",
        "is 4000 but must equal maxBatchSize x features per image x maxImagesPerRequest = 8 x 576 x 1 = 4608",
    ),
    (
        "vision-batch-contradicts",
        "vila",
        {"spec": {"engine": {"maxImagesPerRequest": 4, "vision": {"maxBatchSize": 8}}}},
        "spec.engine.vision.maxBatchSize",
        "is 8 but must equal maxBatchSize x maxImagesPerRequest = 8 x 4 = 32",
    ),
    (
        "multimodal-len-without-prompt-table",
        "mllama",
        {"spec": {"engine": {"maxMultimodalLen": 100}}},
        "spec.engine.maxMultimodalLen",
        "supported only for model types",
    ),
    (
        "encoder-len-on-decoder-only",
        "llava",
        {"spec": {"engine": {"maxEncoderInputLen": 100}}},
        "spec.engine.maxEncoderInputLen",
        "supported only for model types distil_whisper, mllama, whisper",
    ),
    (
        "whisper-encoder-len-fixed",
        "whisper",
        {"spec": {"engine": {"maxEncoderInputLen": 1500}}},
        "spec.engine.maxEncoderInputLen",
        "is 1500 but the whisper encoder takes exactly 3000 mel frames",
    ),
    (
        "fp8-unsupported",
        "mllama",
        {"spec": {"engine": {"kvCacheDtype": "fp8"}}},
        "spec.engine.kvCacheDtype",
        "kvCacheDtype fp8 is supported only for model types",
    ),
    (
        "fp8-with-weight-only",
        "llava",
        {"spec": {"engine": {"kvCacheDtype": "fp8", "weightOnlyPrecision": "int8"}}},
        "spec.engine.weightOnlyPrecision",
        "cannot be combined",
    ),
    (
        "kv-reuse-qwen2",
        "qwen2_vl",
        {"spec": {"serving": {"kvCacheReuse": True}}},
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported only for model types",
    ),
    (
        # Its ensemble has no prompt_table_extra_id: different images with the same text would share blocks.
        "kv-reuse-xcomposer2",
        "internlm_xcomposer2",
        {"spec": {"serving": {"kvCacheReuse": True}}},
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported only for model types",
    ),
    (
        "serving-beam-above-engine",
        "llava",
        {"spec": {"engine": {"maxBeamWidth": 2}, "serving": {"maxBeamWidth": 4}}},
        "spec.serving.maxBeamWidth",
        "serving.maxBeamWidth must not exceed engine.maxBeamWidth",
    ),
    (
        "serving-beam-above-default-engine",
        "llava",
        {"spec": {"serving": {"maxBeamWidth": 2}}},
        "spec.serving.maxBeamWidth",
        "is 2 but must not exceed the engine's maxBeamWidth 1",
    ),
    (
        "serving-beam-whisper",
        "whisper",
        {"spec": {"engine": {"maxBeamWidth": 4}, "serving": {"maxBeamWidth": 4}}},
        "spec.serving.maxBeamWidth",
        "must be 1 for distil_whisper, whisper: whisper_bls sends no beam width",
    ),
    (
        "chunked-context-whisper",
        "whisper",
        {"spec": {"serving": {"chunkedContext": True}}},
        "spec.serving.chunkedContext",
        "chunkedContext is supported only for model types",
    ),
    (
        "cross-fraction-decoder-only",
        "llava",
        {"spec": {"serving": {"crossKvCacheFraction": 0.5}}},
        "spec.serving.crossKvCacheFraction",
        "must not be set for decoder-only model types",
    ),
    (
        "cross-fraction-range",
        "mllama",
        {"spec": {"serving": {"crossKvCacheFraction": 1.0}}},
        "spec.serving.crossKvCacheFraction",
        "less than 1",
    ),
    (
        "whisper-variant-missing",
        "whisper",
        {"spec": {"model": {"variant": DELETE}}},
        "spec.model.variant",
        "model.variant is required for distil_whisper, whisper",
    ),
    (
        "variant-on-llava",
        "llava",
        {"spec": {"model": {"variant": "large-v3"}}},
        "spec.model.variant",
        "not allowed for other types",
    ),
    (
        "whisper-variant-unknown",
        "whisper",
        {"spec": {"model": {"variant": "large-v4"}}},
        "spec.model.variant",
        "must be one of large-v3, large-v3-turbo",
    ),
    (
        "whisper-english-only",
        "whisper",
        {"spec": {"model": {"variant": "small.en"}}},
        "spec.model.variant",
        "English-only medium.en, small.en",
    ),
    (
        "distil-variant-of-whisper",
        "distil_whisper",
        {"spec": {"model": {"variant": "large-v3"}}},
        "spec.model.variant",
        "model.variant for distil_whisper must be one of distil-large-v3, distil-large-v2",
    ),
    (
        "xcomposer2-without-lora",
        "internlm_xcomposer2",
        {"spec": {"model": {"lora": DELETE}}},
        "spec.model.lora",
        "model.lora is required for internlm_xcomposer2",
    ),
    (
        "lora-on-llava",
        "llava",
        {"spec": {"model": {"lora": {"source": {"pvc": {"claimName": "a"}}}}}},
        "spec.model.lora",
        "not allowed for other types",
    ),
    (
        "bls-on-whisper",
        "whisper",
        {"spec": {"serving": {"enableBls": True}}},
        "spec.serving.enableBls",
        "enableBls (the tensorrt_llm_bls entry point) is supported only for model types blip2, llava,",
    ),
    (
        "bls-on-xcomposer2",
        "internlm_xcomposer2",
        {"spec": {"serving": {"enableBls": True}}},
        "spec.serving.enableBls",
        "is supported only for model types",
    ),
    (
        "bls-on-mllama",
        "mllama",
        {"spec": {"serving": {"enableBls": True}}},
        "spec.serving.enableBls",
        "is supported only for model types",
    ),
    (
        "accumulate-without-streaming",
        "llava",
        {"spec": {"serving": {"accumulateTokens": True}}},
        "spec.serving.accumulateTokens",
        "needs streaming",
    ),
    (
        "triton-batch-above-engine",
        "llava",
        {"spec": {"engine": {"maxBatchSize": 4}, "serving": {"tritonMaxBatchSize": 8}}},
        "spec.serving.tritonMaxBatchSize",
        "must not exceed engine.maxBatchSize",
    ),
    (
        "triton-batch-above-default-engine",
        "whisper",
        {"spec": {"serving": {"tritonMaxBatchSize": 128}}},
        "spec.serving.tritonMaxBatchSize",
        "is 128 but must not exceed the engine's maxBatchSize 64",
    ),
    (
        "pool-too-small",
        "llava",
        {"spec": {"serving": {"cudaMemoryPoolBytes": 1000}}},
        "spec.serving.cudaMemoryPoolBytes",
        "is 1000 but the prompt tables and encoder features need at least 142606336 bytes",
    ),
    (
        "zero-pad-on-llava",
        "llava",
        {"spec": {"serving": {"zeroPad": True}}},
        "spec.serving.zeroPad",
        "applies to distil_whisper, whisper only",
    ),
    (
        "kv-fraction-zero",
        "llava",
        {"spec": {"serving": {"kvCacheFreeGpuMemFraction": 0}}},
        "spec.serving.kvCacheFreeGpuMemFraction",
        "greater than 0",
    ),
    (
        "images-exceed-input",
        "vila",
        {"spec": {"engine": {"maxImagesPerRequest": 8, "maxInputLen": 1024}}},
        "spec.engine.maxInputLen",
        "is 1024 but one request carries 196 x 8 = 1568 visual tokens",
    ),
    (
        "patches-on-llava",
        "llava",
        {"spec": {"engine": {"vision": {"maxPatchesPerRequest": 4}}}},
        "spec.engine.vision",
        "maxPatchesPerRequest is supported only for model types llava_onevision",
    ),
    ("api-version", "llava", {"apiVersion": "v1"}, "apiVersion", "must be serving.multimodal.dev/v1alpha1"),
    ("kind", "llava", {"kind": "Deployment"}, "kind", "must be MultimodalDeployment"),
    ("name-missing", "llava", {"metadata": {"name": DELETE}}, "metadata.name", "required"),
    (
        "replicas-negative",
        "llava",
        {"spec": {"serving": {"replicas": -1}}},
        "spec.serving.replicas",
        "greater than or equal to 0",
    ),
    (
        "dtype",
        "llava",
        {"spec": {"engine": {"dtype": "float32"}}},
        "spec.engine.dtype",
        "must be 'float16' or 'bfloat16'",
    ),
    (
        "logits-dtype",
        "llava",
        {"spec": {"serving": {"logitsDatatype": "TYPE_BF16"}}},
        "spec.serving.logitsDatatype",
        "must be 'TYPE_FP32' or 'TYPE_FP16'",
    ),
    (
        "batching-strategy",
        "llava",
        {"spec": {"serving": {"batchingStrategy": "V1"}}},
        "spec.serving.batchingStrategy",
        "must be 'inflight_fused_batching' or 'inflight_batching'",
    ),
    (
        "prompt-table-bf16",
        "llava",
        {"spec": {"serving": {"promptTableDatatype": "TYPE_BF16"}}},
        "spec.serving.promptTableDatatype",
        "must be 'TYPE_FP16'",
    ),
    (
        "image-url-input-without-server-loading",
        "llava",
        {"spec": {"serving": {"imageUrlInput": True}}},
        "spec.serving.imageUrlInput",
        "imageUrlInput (the server fetching image URLs) is supported only for model types llava_onevision",
    ),
    (
        "network-policy-client-without-selector",
        "llava",
        {"spec": {"serving": {"networkPolicy": {"clients": [{}]}}}},
        "spec.serving.networkPolicy.clients[0]",
        "a client needs a podSelector, a namespaceSelector or both",
    ),
]
