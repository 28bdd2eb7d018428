"""The names every knowledge table shares: the runtimes, the model types, the modalities, the largest worlds.

Pure data: imports nothing of ours and does no I/O.
"""

from __future__ import annotations

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
