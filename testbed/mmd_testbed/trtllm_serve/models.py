"""The model directory `trtllm-serve MODEL` is given, checked as the real server would at its boundary.

The real PyTorch backend reads the Hugging Face snapshot's `config.json` and picks the model class by
`architectures[0]`; an architecture it has no class for stops the server with `Unknown architecture for
AutoModelForCausalLM: <name>` (tensorrt_llm/_torch/models/modeling_auto.py). The double serves the multimodal
architectures below and nothing else, and never downloads: MODEL must be a local directory. Which modalities
each architecture takes is the PyTorch backend's multimodal support matrix (docs/source/models/
supported-models.md, shared/reference/runtime2-autoscale-multinode.md §2.4); a part of another modality is
refused per request like the real server does (`chat`). Imports the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Modality(StrEnum):
    """What a content part carries besides text."""

    IMAGE = "image"
    VIDEO = "video"
    AUDIO = "audio"


@dataclass(frozen=True)
class Architecture:
    """A multimodal architecture of the PyTorch backend: its Hugging Face model type and modalities."""

    name: str
    model_type: str
    modalities: frozenset[Modality]


_IMAGE = frozenset({Modality.IMAGE})
_IMAGE_VIDEO = frozenset({Modality.IMAGE, Modality.VIDEO})
ARCHITECTURES = {
    a.name: a
    for a in (
        Architecture("Qwen2VLForConditionalGeneration", "qwen2_vl", _IMAGE_VIDEO),
        Architecture("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", _IMAGE_VIDEO),
        Architecture("Qwen3VLForConditionalGeneration", "qwen3_vl", _IMAGE_VIDEO),
        Architecture("LlavaLlamaModel", "llava_llama", _IMAGE_VIDEO),  # VILA / NVILA
        Architecture("LlavaNextForConditionalGeneration", "llava_next", _IMAGE),
        Architecture("Llama4ForConditionalGeneration", "llama4", _IMAGE),
        Architecture("Gemma3ForConditionalGeneration", "gemma3", _IMAGE),
        Architecture("Mistral3ForConditionalGeneration", "mistral3", _IMAGE),
        Architecture("Phi4MMForCausalLM", "phi4mm", frozenset({Modality.IMAGE, Modality.AUDIO})),
    )
}


class ModelDirError(Exception):
    """MODEL is not a snapshot the double (and the real server) can load; the message is the real one."""


@dataclass(frozen=True)
class ServedModel:
    """The loaded model: what `/v1/models` lists and what the chat endpoint accepts."""

    path: Path
    architecture: Architecture
    # The doubles' knobs in the snapshot's config.json (`mmd_double`): `seconds_per_request` and
    # `fail_share`, the share of requests answered with an error (a bad revision, for a canary to catch).
    knobs: Mapping[str, float] = field(default_factory=dict)

    @property
    def model_id(self) -> str:
        """The id `/v1/models` lists: the directory's name (openai_server.py: `Path(model).name`)."""
        return self.path.name


def load_model(model: str) -> ServedModel:
    """The served model for MODEL, or ModelDirError saying what the real server would."""
    path = Path(model)
    if not path.is_dir():
        raise ModelDirError(
            f"{model} is not a local directory: the real server would look it up on the Hugging Face Hub; "
            "the trtllm-serve double serves local snapshots only"
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelDirError(f"Failed to infer model format because no config.json exists in {model}")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as error:
        raise ModelDirError(f"{config_file} is not readable JSON: {error}") from error
    names = config.get("architectures") if isinstance(config, dict) else None
    name = names[0] if isinstance(names, list) and names else None
    architecture = ARCHITECTURES.get(name) if isinstance(name, str) else None
    if architecture is None:
        raise ModelDirError(f"Unknown architecture for AutoModelForCausalLM: {name}")
    knobs = config.get("mmd_double") if isinstance(config.get("mmd_double"), dict) else {}
    return ServedModel(path=path, architecture=architecture, knobs={k: float(v) for k, v in knobs.items()})
