"""The engine path's end upstream, and the way off it for each model type the engine runtime serves.

TensorRT-LLM 1.2.1 (in Triton's 26.04-26.07 `trtllm-python-py3` images) is the last release that builds
TensorRT engines and runs them in Triton's TensorRT-LLM backend: upstream then removed `trtllm-build`,
the per-model checkpoint converters and the backend with its multimodal and Whisper model templates
(whose notice already called the multimodal part end-of-life at 1.2). What TensorRT-LLM keeps is its
PyTorch backend, which the trtllm-serve runtime runs. `WAYS_OFF` says, per engine model type, whether
that backend serves the architecture at 1.2.1 (the same model type on trtllm-serve), and if not, why.
Pure data: imports `shared` and `trtllm_serve` of ours and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from mmd_operator.knowledge.shared import ModelType
from mmd_operator.knowledge.trtllm_serve import SERVE_KNOWLEDGE

LAST_RELEASE = "TensorRT-LLM 1.2.1 (Triton 26.04-26.07 trtllm-python-py3)"
# What every move off the engine path changes, whatever the model type.
GIVEN_UP = (
    "Triton's request API (the ensemble's tensors: per-request sampling tensors, prompt_table_extra_id, "
    "LoRA tensors, logits and per-request metrics outputs) for the OpenAI API (/v1/chat/completions)"
)
GAINED = "no engine build (the Hugging Face checkpoint loads as it is) and TensorRT-LLM's later releases"


@dataclass(frozen=True)
class WayOff:
    """Whether the trtllm-serve runtime serves an engine model type, and what moving there means."""

    model_type: ModelType
    # Where the type has a way off: what changes there; else why there is none.
    why: str

    @property
    def to_serve(self) -> bool:
        """Whether runtime trtllm-serve serves the same model type (its own table says)."""
        return self.model_type in SERVE_KNOWLEDGE


_NO_SPEECH = (
    "TensorRT-LLM 1.2.1's PyTorch backend has no speech recognition model (its one audio model is "
    "Phi-4-multimodal, model type phi4mm, a chat model), so whisper_bls's WAV path has no equivalent"
)
_WAYS = (
    WayOff(
        ModelType.BLIP2,
        "TensorRT-LLM 1.2.1's PyTorch backend has no BLIP-2 (Blip2ForConditionalGeneration is not in its "
        "multimodal support matrix)",
    ),
    WayOff(
        ModelType.LLAVA,
        "TensorRT-LLM 1.2.1's PyTorch backend has no LLaVA-1.5 (LlavaForConditionalGeneration); it serves "
        "LLaVA-NeXT (model type llava_next, another checkpoint)",
    ),
    WayOff(
        ModelType.VILA,
        "the PyTorch backend's VILA (LlavaLlamaModel) is written for NVILA (examples/nvila.yaml); that a "
        "VILA 1.5 checkpoint loads there is not verified, so try NVILA's checkpoint if it does not",
    ),
    WayOff(
        ModelType.LLAVA_ONEVISION,
        "TensorRT-LLM 1.2.1's PyTorch backend has no LLaVA-OneVision "
        "(LlavaOnevisionForConditionalGeneration is not in its multimodal support matrix)",
    ),
    WayOff(
        ModelType.MLLAMA,
        "TensorRT-LLM 1.2.1's PyTorch backend serves MllamaForConditionalGeneration for text only: its "
        "image path is not implemented; Llama 4 (model type llama4) takes images there",
    ),
    WayOff(
        ModelType.QWEN2_VL,
        "the same checkpoint, images and video; chunked prefill is not offered for it there",
    ),
    WayOff(
        ModelType.INTERNLM_XCOMPOSER2,
        "TensorRT-LLM 1.2.1's PyTorch backend has no InternLM-XComposer2 (its remote-code architecture is "
        "not in the multimodal support matrix), and nothing there takes its per-request LoRA",
    ),
    WayOff(ModelType.WHISPER, _NO_SPEECH),
    WayOff(ModelType.DISTIL_WHISPER, _NO_SPEECH),
)
WAYS_OFF: MappingProxyType[ModelType, WayOff] = MappingProxyType({way.model_type: way for way in _WAYS})


def frozen_notice(model_type: ModelType) -> str:
    """What an engine resource's status says of the runtime's end upstream, and of its way off."""
    way = WAYS_OFF[model_type]
    ending = (
        f"{model_type} can move to runtime trtllm-serve ({way.why}): `mmctl migrate -f FILE` prints the "
        "resource"
        if way.to_serve
        else f"{model_type} has no way off: {way.why}"
    )
    return (
        f"runtime triton-trtllm-engine is frozen upstream: {LAST_RELEASE} is the last release with "
        f"TensorRT engines and Triton's TensorRT-LLM backend, and no later one fixes it or adds GPUs to it; "
        f"{ending} (docs/engine-path-end.md)"
    )
