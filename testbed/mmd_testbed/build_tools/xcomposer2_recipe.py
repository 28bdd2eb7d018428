"""Test double of the InternLM-XComposer2 fork's `build_visual_engine.py`, as the builder step imports it.

Like the pinned file: importing it runs nothing; `VisionEngineBuilder(args).build()` dispatches on
`args.model_type` (only the fork's `internlm-xcomposer2-vl-7b` builds here), loads the checkpoint as
`internlm/<model type>` relative to the working directory (the real `from_pretrained` falls back to the
Hub, which fails offline), logs through the module-level `logger` its `__main__` block would create, and
writes `<output_dir>/visual_encoder.engine` and `config.json`. The plan is a few bytes of JSON naming the
plan's tensors, which the `tensorrt` double deserialises.

Faults: DOUBLE_FAIL containing `build_visual_engine` raises like a failed build; DOUBLE_VISION_TENSORS
(comma-separated) names the tensors the plan gets instead of `input,output`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

logger: Any = None  # set by the caller, as the recipe's own __main__ block would


class VisionEngineBuilder:
    """Dispatches to the engine builder of one model type."""

    def __init__(self, args: Any) -> None:
        args.device = "cuda"
        if args.output_dir is None:
            args.output_dir = f"visual_engines/{args.model_path.split('/')[-1]}"
        os.makedirs(args.output_dir, exist_ok=True)
        self.args = args

    def build(self) -> None:
        """Build the vision engine of the model type asked for."""
        if self.args.model_type == "internlm-xcomposer2-vl-7b":
            build_interlm_xcomposer2_engine(self.args)
        else:
            raise RuntimeError(f"Invalid model type {self.args.model_type}")


def build_interlm_xcomposer2_engine(args: Any) -> None:
    """Export and build InternLM-XComposer2's ViT as the recipe does (a small plan file)."""
    if logger is None:  # the real module has no such name until its __main__ block runs
        raise NameError("name 'logger' is not defined")
    logger.log(logger.INFO, "Exporting onnx")
    if "build_visual_engine" in os.environ.get("DOUBLE_FAIL", ""):
        raise RuntimeError("Failed building visual_encoder.engine (double: DOUBLE_FAIL)")
    model_type = "internlm/" + args.model_type
    checkpoint = Path(model_type)
    if not (checkpoint / "config.json").is_file():
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            raise OSError(f"We couldn't connect to 'https://huggingface.co' to load {model_type} (offline)")
        raise RuntimeError(f"the double would download {model_type} from the Hugging Face Hub")
    tensors = os.environ.get("DOUBLE_VISION_TENSORS", "input,output").split(",")
    output = Path(args.output_dir)
    (output / "visual_encoder.engine").write_text(json.dumps({"tensors": tensors}))
    config = {"builder_config": {"precision": "float16", "model_type": model_type}, "plugin_config": {}}
    (output / "config.json").write_text(json.dumps(config, indent=4))
