"""The cacheKey: a digest of every input that changes the engine bytes, and of nothing else.

Two deployments with the same key share one build and one engine; a change that does not touch the key
(replicas, streaming, queue delays) never rebuilds. The key covers the model source and revision, the
model type and variant, the builder image and TensorRT-LLM version, dtype, parallelism, every build limit
(derived ones included), quantization, LoRA build settings, the paged context FMHA that KV-cache reuse
needs, the kind of GPU it is built for (when known: `judgement.gpu_kinds` says why the product), and the
format of the key itself. It is the
hex digest's first 20 characters, so `build-<key>` is a valid Kubernetes name. Pure.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mmd_operator.api.v1alpha1 import ModelSource
from mmd_operator.plan.settings import Settings

# Bump when the meaning of an input changes, so old cache entries are never mistaken for new ones.
CACHE_KEY_FORMAT = 1
CACHE_KEY_LENGTH = 20

_ENGINE_LIMITS = (
    "max_batch_size",
    "max_input_len",
    "max_seq_len",
    "max_beam_width",
    "max_num_tokens",
    "max_multimodal_len",
    "max_encoder_input_len",
    "vision_max_batch_size",
)


def source_identity(source: ModelSource) -> dict[str, str]:
    """What identifies the weights of `source` (never the access token)."""
    if source.huggingface is not None:
        return {"huggingface": source.huggingface.repo, "revision": source.huggingface.revision}
    assert source.pvc is not None
    return {"pvc": source.pvc.claim_name, "path": "/" + source.pvc.path.strip("/")}


def cache_key_inputs(settings: Settings) -> dict[str, Any]:
    """Every input of the cacheKey, as a JSON-able mapping (shown by `mmctl render`)."""
    spec, limits = settings.spec, settings.limits
    engine = spec.engine
    lora = spec.model.lora
    return {
        "format": CACHE_KEY_FORMAT,
        "model_type": spec.model.type.value,
        "variant": spec.model.variant,
        "source": source_identity(spec.model.source),
        "lora": None if lora is None else {"source": source_identity(lora.source), "max_rank": lora.max_rank},
        "builder_image": settings.builder_image,
        "trtllm_version": settings.release.tensorrt_llm,
        "dtype": settings.dtype,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "limits": {name: getattr(limits, name) for name in _ENGINE_LIMITS},
        "quantization": {
            "kv_cache_dtype": engine.kv_cache_dtype,
            "weight_only_precision": engine.weight_only_precision,
            # Calibration only runs for fp8, so only then does its size change the engine.
            "calibration_size": engine.calibration_size if engine.kv_cache_dtype == "fp8" else None,
        },
        # KV-cache reuse builds with paged context FMHA said explicitly (`build_plan`); only then is it
        # an input, so the keys of every other engine stay what they were.
        **({"paged_context_fmha": "enable"} if spec.serving.kv_cache_reuse else {}),
        # TensorRT loads an engine only on the kind of GPU it was built on. Unknown (no GPU feature
        # discovery), it is no input, and the key is what it was before kinds were read.
        **(
            {"gpu": {"product": kind.product, "compute_capability": kind.compute_capability}}
            if (kind := settings.gpu_kind) is not None
            else {}
        ),
    }


def cache_key(settings: Settings) -> str:
    """Return the cacheKey of `settings`."""
    canonical = json.dumps(cache_key_inputs(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:CACHE_KEY_LENGTH]
