"""The names every knowledge table shares: model types, runtimes, modalities, worlds, checkpoint shapes.

The runtimes, the model types, the modalities, the largest worlds, and the shape of a known checkpoint's
language model (`LanguageModelShape`). Pure data: imports nothing of ours and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Runtime(StrEnum):
    """How a MultimodalDeployment is served."""

    # TensorRT engines built by a Job, served by Triton's TensorRT-LLM backend (tensorrtllm_backend v0.19.0).
    TRITON_TRTLLM_ENGINE = "triton-trtllm-engine"
    # TensorRT-LLM's PyTorch backend behind `trtllm-serve` (OpenAI API): no build, a Hugging Face snapshot.
    TRTLLM_SERVE = "trtllm-serve"


class Modality(StrEnum):
    """What a request carries besides text."""

    IMAGE = "image"
    VIDEO = "video"
    AUDIO = "audio"


class ModelType(StrEnum):
    """The model types a MultimodalDeployment can serve (each by one runtime or both)."""

    BLIP2 = "blip2"
    LLAVA = "llava"
    VILA = "vila"
    LLAVA_ONEVISION = "llava_onevision"
    MLLAMA = "mllama"
    QWEN2_VL = "qwen2_vl"
    INTERNLM_XCOMPOSER2 = "internlm_xcomposer2"
    WHISPER = "whisper"
    DISTIL_WHISPER = "distil_whisper"
    # trtllm-serve only.
    QWEN2_5_VL = "qwen2_5_vl"
    QWEN3_VL = "qwen3_vl"
    LLAVA_NEXT = "llava_next"
    LLAMA4 = "llama4"
    GEMMA3 = "gemma3"
    MISTRAL3 = "mistral3"
    PHI4MM = "phi4mm"


# The largest worlds (ranks of one replica) offered: one node of 8 GPUs; two, which hold a 70-90 B model
# at 16 bits on 40 GB cards; four, for Llama 4 Maverick's 800 GB at 16 bits (with pipeline parallelism).
NODE_WORLD, LARGE_WORLD, LARGEST_SERVE_WORLD = 8, 16, 32


@dataclass(frozen=True)
class LanguageModelShape:
    """A known checkpoint's language model (Whisper's: its decoder), as its config.json describes it.

    What parallelism splits (attention and key-value heads for tensor ranks, layers for pipeline stages),
    what the KV cache holds per token (layers x key-value heads x `head_dim`, keys and values), and how long
    a sequence its positions reach (`context`: `max_position_embeddings`, Whisper's
    `max_target_positions`; None where not recorded here). Where a config scales RoPE (Llama 3.2's
    llama3, Gemma 3's linear, Phi-4's longrope), its `max_position_embeddings` already counts the scaling.
    """

    attention: int
    key_value: int
    layers: int
    parameters_b: float | None = None  # the whole checkpoint's, vision included (billions, its model card)
    head_dim: int = 128
    context: int | None = None

    def split_by(self, tensor_parallel_size: int) -> bool:
        """Whether `tensor_parallel_size` ranks can share the heads (whole attention heads each)."""
        # Key-value heads are split too or, when fewer than the ranks, replicated (ranks a multiple of them).
        tp = tensor_parallel_size
        return self.attention % tp == 0 and (self.key_value % tp == 0 or tp % self.key_value == 0)

    def kv_bytes_per_token(self, *, tensor_parallel_size: int, bytes_per_value: int) -> int:
        """Bytes one token's keys and values take on one tensor-parallel rank."""
        heads_per_rank = max(1, self.key_value // tensor_parallel_size)
        return 2 * self.layers * heads_per_rank * self.head_dim * bytes_per_value


# The one checkpoint both runtimes serve by the same repository (Qwen2-VL's reference).
QWEN2_VL_7B = LanguageModelShape(28, 4, 28, 8.29, context=32768)
