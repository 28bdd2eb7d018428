"""Where each Triton model's Python code sits in the serving image's tensorrtllm_backend `all_models` tree.

The serving pods' init container copies it into the model repository (`model_repository`); the test bed's
stand-in serving image installs its doubles at the same places. Pure: imports the knowledge table alone,
so an image that installs the operator without its dependencies can still import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from mmd_operator.knowledge import RepositoryLayout

# Where each model's Python code sits in a tensorrtllm_backend `all_models` tree (the serving image's
# model code directory); a model without an entry has none (the ensemble; tensorrt_llm runs in C++).
_MODEL_CODE: Mapping[str, str] = MappingProxyType(
    {
        "preprocessing": "inflight_batcher_llm/preprocessing",
        "postprocessing": "inflight_batcher_llm/postprocessing",
        "tensorrt_llm_bls": "inflight_batcher_llm/tensorrt_llm_bls",
        "multimodal_encoders": "multimodal/multimodal_encoders",
        "whisper_bls": "whisper/whisper_bls",
    }
)
# The InternLM-XComposer2 fork's preprocessing, which runs the ViT itself.
_LAYOUT_MODEL_CODE: Mapping[tuple[RepositoryLayout, str], str] = MappingProxyType(
    {(RepositoryLayout.XCOMPOSER2, "preprocessing"): "internlm_xcomposer2/preprocessing"}
)


def model_code(layout: RepositoryLayout, model: str) -> str | None:
    """The directory (relative to the model code directory) whose `1/` holds `model`'s code, if any."""
    return _LAYOUT_MODEL_CODE.get((layout, model), _MODEL_CODE.get(model))


def model_code_directories() -> tuple[str, ...]:
    """Every model-code directory a rendered repository may copy from the serving image's code dir."""
    return tuple(sorted({*_MODEL_CODE.values(), *_LAYOUT_MODEL_CODE.values()}))
