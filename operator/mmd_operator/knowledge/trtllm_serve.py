"""What the trtllm-serve runtime knows about each model type it serves, in one table (`SERVE_KNOWLEDGE`).

TensorRT-LLM 1.2.1's PyTorch backend: the Hugging Face architecture, the modalities, which serving
features the backend's multimodal support matrix marks supported, and the heads, layers and parameters of
known checkpoints. Adding a model type means adding one entry to `_SERVE_ENTRIES`. Pure data: imports only
`shared` of ours and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mmd_operator.knowledge.shared import (
    LARGEST_SERVE_WORLD,
    NODE_WORLD,
    QWEN2_VL_7B,
    LanguageModelShape,
    Modality,
    ModelType,
)

# Sources: the PyTorch backend's "Multimodal Feature Support Matrix" in
# docs/source/models/supported-models.md, the 1.2-era version (it lists NemotronH_Nano_VL_V2 and Qwen3Next
# but not yet Qwen3-VL; the v1.2.1 tag itself could not be read, see
# docs/development/trtllm-serve-double.md), for the architectures, modalities, chunked prefill and
# KV-cache reuse; a feature the matrix marks No or N/A, or a type it does not list, is not offered. The
# matrix has no FP8 KV-cache column: it is offered only where the language model is of a family
# TensorRT-LLM quantizes with an FP8 KV cache (Llama, Mistral, Qwen2), not verified for the multimodal
# wrappers (decided conservatively). Heads, layers and context: each checkpoint's text model (config.json),
# if known.


@dataclass(frozen=True)
class ServeKnowledge:
    """What the trtllm-serve runtime knows of one model type."""

    model_type: ModelType
    title: str
    # `architectures[0]` of the checkpoint's config.json: the PyTorch backend picks its model class by it.
    architecture: str
    reference_checkpoint: str
    modalities: frozenset[Modality]
    # `enable_chunked_prefill` (the matrix's Chunked Prefill), `kv_cache_config.enable_block_reuse` (KV
    # Cache Reuse), `kv_cache_config.dtype: fp8`.
    chunked_prefill: bool = False
    kv_cache_reuse: bool = False
    fp8_kv_cache: bool = False
    # Where the chat template `/v1/chat/completions` applies comes from: trtllm-serve serves the chat API
    # only with one (its `--chat_template` flag overrides it).
    chat_template: str = "the checkpoint's processor (chat_template.json or tokenizer_config.json)"
    # Known checkpoints of the type, by Hugging Face repository, with their heads and layers.
    checkpoints: Mapping[str, LanguageModelShape] = field(default_factory=dict)
    # `--pp_size` above 1: offered where the language model's family is split into stages by the PyTorch
    # backend (Llama, Qwen2) and a checkpoint needs more than one node; not verified for the wrappers.
    pipeline_parallel: bool = False
    largest_world: int = NODE_WORLD
    # The reference checkpoint's parameters (billions), when `checkpoints` does not know them.
    reference_parameters_b: float | None = None


_IMAGE_ONLY = frozenset({Modality.IMAGE})
_IMAGE_VIDEO = frozenset({Modality.IMAGE, Modality.VIDEO})

_SERVE_ENTRIES = (
    ServeKnowledge(
        model_type=ModelType.QWEN2_VL,
        title="Qwen2-VL",
        architecture="Qwen2VLForConditionalGeneration",
        reference_checkpoint="Qwen/Qwen2-VL-7B-Instruct",
        modalities=_IMAGE_VIDEO,
        kv_cache_reuse=True,
        fp8_kv_cache=True,
        pipeline_parallel=True,
        largest_world=LARGEST_SERVE_WORLD,
        checkpoints={
            "Qwen/Qwen2-VL-2B-Instruct": LanguageModelShape(12, 2, 28, 2.21, context=32768),
            "Qwen/Qwen2-VL-7B-Instruct": QWEN2_VL_7B,
            "Qwen/Qwen2-VL-72B-Instruct": LanguageModelShape(64, 8, 80, 73.4, context=32768),
        },
    ),
    ServeKnowledge(
        model_type=ModelType.QWEN2_5_VL,
        title="Qwen2.5-VL",
        architecture="Qwen2_5_VLForConditionalGeneration",
        reference_checkpoint="Qwen/Qwen2.5-VL-3B-Instruct",
        modalities=_IMAGE_VIDEO,
        kv_cache_reuse=True,
        fp8_kv_cache=True,
        pipeline_parallel=True,
        largest_world=LARGEST_SERVE_WORLD,
        checkpoints={
            "Qwen/Qwen2.5-VL-3B-Instruct": LanguageModelShape(16, 2, 36, 3.75, context=128000),
            "Qwen/Qwen2.5-VL-7B-Instruct": LanguageModelShape(28, 4, 28, 8.29, context=128000),
            "Qwen/Qwen2.5-VL-32B-Instruct": LanguageModelShape(40, 8, 64, 33.5, context=128000),
            "Qwen/Qwen2.5-VL-72B-Instruct": LanguageModelShape(64, 8, 80, 73.4, context=128000),
        },
    ),
    # Not in the 1.2-era matrix (later ones list it): that 1.2.1 serves it is not verified.
    ServeKnowledge(
        model_type=ModelType.QWEN3_VL,
        title="Qwen3-VL (dense)",
        architecture="Qwen3VLForConditionalGeneration",
        reference_checkpoint="Qwen/Qwen3-VL-8B-Instruct",
        modalities=_IMAGE_VIDEO,
        checkpoints={
            "Qwen/Qwen3-VL-4B-Instruct": LanguageModelShape(32, 8, 36, 4.44, context=262144),
            "Qwen/Qwen3-VL-8B-Instruct": LanguageModelShape(32, 8, 36, 8.77, context=262144),
        },
    ),
    ServeKnowledge(
        model_type=ModelType.VILA,
        title="VILA / NVILA",
        architecture="LlavaLlamaModel",
        reference_checkpoint="Efficient-Large-Model/NVILA-8B",
        modalities=_IMAGE_VIDEO,
        reference_parameters_b=8.0,
    ),
    ServeKnowledge(
        model_type=ModelType.LLAVA_NEXT,
        title="LLaVA-NeXT (1.6)",
        architecture="LlavaNextForConditionalGeneration",
        reference_checkpoint="llava-hf/llava-v1.6-mistral-7b-hf",
        modalities=_IMAGE_ONLY,
        fp8_kv_cache=True,
        checkpoints={
            "llava-hf/llava-v1.6-mistral-7b-hf": LanguageModelShape(32, 8, 32, 7.57, context=32768),
            "llava-hf/llava-v1.6-vicuna-7b-hf": LanguageModelShape(32, 32, 32, 7.06, context=4096),
            "llava-hf/llava-v1.6-vicuna-13b-hf": LanguageModelShape(40, 40, 40, 13.4, context=4096),
        },
    ),
    ServeKnowledge(
        model_type=ModelType.LLAMA4,
        title="Llama 4",
        architecture="Llama4ForConditionalGeneration",
        reference_checkpoint="meta-llama/Llama-4-Scout-17B-16E-Instruct",
        modalities=_IMAGE_ONLY,
        fp8_kv_cache=True,
        pipeline_parallel=True,
        largest_world=LARGEST_SERVE_WORLD,
        checkpoints={
            "meta-llama/Llama-4-Scout-17B-16E-Instruct": LanguageModelShape(40, 8, 48, 109, context=10485760),
            "meta-llama/Llama-4-Maverick-17B-128E-Instruct": LanguageModelShape(
                40, 8, 48, 402, context=1048576
            ),
        },
    ),
    ServeKnowledge(
        model_type=ModelType.GEMMA3,
        title="Gemma 3",
        architecture="Gemma3ForConditionalGeneration",
        reference_checkpoint="google/gemma-3-4b-it",
        modalities=_IMAGE_ONLY,
        checkpoints={
            "google/gemma-3-4b-it": LanguageModelShape(8, 4, 34, 4.3, head_dim=256, context=131072),
            "google/gemma-3-12b-it": LanguageModelShape(16, 8, 48, 12.2, head_dim=256, context=131072),
            "google/gemma-3-27b-it": LanguageModelShape(32, 16, 62, 27.4, context=131072),
        },
    ),
    ServeKnowledge(
        model_type=ModelType.MISTRAL3,
        title="Mistral Small 3.1",
        architecture="Mistral3ForConditionalGeneration",
        reference_checkpoint="mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        modalities=_IMAGE_ONLY,
        chunked_prefill=True,
        kv_cache_reuse=True,
        fp8_kv_cache=True,
        checkpoints={
            "mistralai/Mistral-Small-3.1-24B-Instruct-2503": LanguageModelShape(
                32, 8, 40, 24.0, context=131072
            )
        },
    ),
    ServeKnowledge(
        model_type=ModelType.PHI4MM,
        title="Phi-4-multimodal",
        architecture="Phi4MMForCausalLM",
        reference_checkpoint="microsoft/Phi-4-multimodal-instruct",
        modalities=frozenset({Modality.IMAGE, Modality.AUDIO}),
        chunked_prefill=True,
        kv_cache_reuse=True,
        checkpoints={
            "microsoft/Phi-4-multimodal-instruct": LanguageModelShape(24, 8, 32, 5.57, context=131072)
        },
    ),
)

SERVE_KNOWLEDGE: MappingProxyType[ModelType, ServeKnowledge] = MappingProxyType(
    {entry.model_type: entry for entry in _SERVE_ENTRIES}
)


def serve_knowledge_of(model_type: ModelType | str) -> ServeKnowledge:
    """Return the trtllm-serve knowledge entry of `model_type`."""
    return SERVE_KNOWLEDGE[ModelType(model_type)]


def serve_types_where(predicate: str) -> list[str]:
    """The trtllm-serve model types whose attribute `predicate` is set, sorted."""
    return sorted(t.value for t, k in SERVE_KNOWLEDGE.items() if getattr(k, predicate))


def checkpoint_shapes() -> dict[str, LanguageModelShape]:
    """Every known trtllm-serve checkpoint's heads and layers, by Hugging Face repository."""
    return {repo: heads for entry in _SERVE_ENTRIES for repo, heads in entry.checkpoints.items()}
