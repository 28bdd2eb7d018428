"""Build steps of our own, which plans run as `python3 -m engine_builder.steps <command>`.

`keep-tokenizer` copies from a model directory the small files serving reads (tokenizer, processor and
model configs, vocabularies and merges, remote code for `trust_remote_code`, chat templates), never the
weights; subdirectories keep their layout (VILA keeps its tokenizer under `llm/`). LLaVA-OneVision's
`image_newlines.safetensors` is not among them: the multimodal builder writes it into the engine
directory. `whisper-assets` stages `multilingual.tiktoken` and `mel_filters.npz`, which whisper_bls loads
from its model directory, out of the openai-whisper package that ships both.

`check-context` reads the fetched checkpoint's `config.json` (its language model's part: `text_config`,
`llm_config` or the top level) and refuses a `maxSeqLen` beyond its `max_position_embeddings` before any
GPU work: past them the model answers garbage. Where the config sets `rope_scaling`, the positions may
reach further, so it only warns; a config without the field (or no config) is not checked. The operator
refuses the same at admission for the checkpoints its knowledge records; this step covers every other one.

`xcomposer2-vision-engine` builds InternLM-XComposer2's ViT plan with the recipe its serving code was
written for: the fork's `build_visual_engine.py`, pinned in the builder image. Run as a script, that file
refuses its own model type (a comma is missing from its `--model_type` choices) and loads the checkpoint
from the Hugging Face Hub by name; so this step imports it, calls its builder with the fetched checkpoint
in place of the Hub name, offline, and then checks that the plan has exactly the tensors `input` and
`output` that the fork's preprocessing asserts.

Standard library only, besides the recipe and TensorRT that the last step imports in the build image;
errors are one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("*.json", "*.model", "*.tiktoken", "*.txt", "*.py", "*.jinja")
WHISPER_ASSETS = ("multilingual.tiktoken", "mel_filters.npz")
# whisper_bls reads mel_<n_mels> for 80-bin models and 128-bin ones (large-v3 family).
MEL_FILTERS = ("mel_80.npy", "mel_128.npy")
# The fork's recipe loads the checkpoint as `internlm/<model type>` and writes this plan.
XCOMPOSER2_HUB_OWNER = "internlm"
XCOMPOSER2_PLAN = "visual_encoder.engine"
# What the fork's preprocessing asserts about the plan it deserialises.
XCOMPOSER2_PLAN_TENSORS = ("input", "output")


class StepError(Exception):
    """A step cannot do its work; the message is the one line the builder reports."""


# Where multimodal checkpoints keep their language model's config (LLaVA, Qwen2-VL: `text_config`; VILA:
# `llm_config`), else the top level.
_LANGUAGE_CONFIGS = ("text_config", "llm_config")


def check_context(config: Path, max_seq_len: int) -> str:
    """What `max_seq_len` is to the checkpoint whose `config.json` is `config`, in one line.

    Raises:
        StepError: when it is beyond `max_position_embeddings` and the config scales no RoPE.
    """
    if not config.is_file():
        return f"no {config}: maxSeqLen {max_seq_len} not checked"
    try:
        document = json.loads(config.read_text())
    except (OSError, ValueError) as error:
        raise StepError(f"cannot read {config}: {error}") from None
    language = next(
        (document[key] for key in _LANGUAGE_CONFIGS if isinstance(document.get(key), dict)), document
    )
    positions = language.get("max_position_embeddings", document.get("max_position_embeddings"))
    if not isinstance(positions, int):
        return f"{config} states no max_position_embeddings: maxSeqLen {max_seq_len} not checked"
    if max_seq_len <= positions:
        return f"maxSeqLen {max_seq_len} is within the {positions} positions of {config}"
    scaling = language.get("rope_scaling", document.get("rope_scaling"))
    if scaling:
        return (
            f"warning: maxSeqLen {max_seq_len} is beyond the {positions} positions of {config}, which "
            f"scales RoPE ({json.dumps(scaling, sort_keys=True)}): the answers past them are as good as "
            "that scaling"
        )
    raise StepError(
        f"maxSeqLen {max_seq_len} is beyond the {positions} positions of the checkpoint "
        f"(max_position_embeddings in {config}), which scales no RoPE: tokens past them are answered "
        f"with garbage; set spec.engine.maxSeqLen to at most {positions}"
    )


def keep_tokenizer(source: Path, dest: Path) -> int:
    """Copy the tokenizer, processor and config files of `source` into `dest`; return how many."""
    if not (source / "config.json").is_file():
        raise StepError(f"{source} has no config.json: not a model directory")

    def ignore(directory: str, names: list[str]) -> set[str]:
        # Hidden entries include huggingface-cli's .cache/ download metadata.
        return {
            name
            for name in names
            if name.startswith(".")
            or (
                not Path(directory, name).is_dir()
                and not any(fnmatch.fnmatch(name, pattern) for pattern in TOKENIZER_FILES)
            )
        }

    shutil.copytree(source, dest, ignore=ignore, dirs_exist_ok=True)
    return sum(1 for path in dest.rglob("*") if path.is_file())


def whisper_assets(dest: Path) -> list[str]:
    """Copy the multilingual tokenizer and mel filters of the openai-whisper package into `dest`."""
    # find_spec does not import the package (which would import torch).
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        raise StepError(
            "the openai-whisper package is not installed; it ships " + " and ".join(WHISPER_ASSETS)
        )
    assets = Path(next(iter(spec.submodule_search_locations))) / "assets"
    missing = [name for name in WHISPER_ASSETS if not (assets / name).is_file()]
    if missing:
        raise StepError(f"{assets} lacks {', '.join(missing)}: not the openai-whisper package")
    try:
        with zipfile.ZipFile(assets / "mel_filters.npz") as npz:
            filters = set(npz.namelist())
    except zipfile.BadZipFile:
        raise StepError(f"{assets / 'mel_filters.npz'} is not an .npz archive") from None
    if not set(MEL_FILTERS) <= filters:
        raise StepError(f"{assets / 'mel_filters.npz'} lacks {sorted(set(MEL_FILTERS) - filters)}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in WHISPER_ASSETS:
        shutil.copy2(assets / name, dest / name)
    return list(WHISPER_ASSETS)


def _load_recipe(recipe: Path) -> Any:
    """Import the recipe file as a module; its `__main__` block (and argument parsing) does not run."""
    spec = importlib.util.spec_from_file_location("xcomposer2_vision_recipe", recipe)
    if spec is None or spec.loader is None:
        raise StepError(f"{recipe} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "VisionEngineBuilder"):
        raise StepError(f"{recipe} has no VisionEngineBuilder: not the pinned fork recipe")
    return module


def check_plan_tensors(tensorrt: Any, plan: Path) -> list[str]:
    """Deserialise `plan` as the fork's preprocessing does and return its tensor names.

    Raises:
        StepError: if the plan does not load or its tensors are not exactly `input` and `output`.
    """
    engine = tensorrt.Runtime(tensorrt.Logger(tensorrt.Logger.WARNING)).deserialize_cuda_engine(
        plan.read_bytes()
    )
    if engine is None:
        raise StepError(f"{plan}: TensorRT cannot deserialise this plan")
    names = [engine.get_tensor_name(index) for index in range(engine.num_io_tensors)]
    if sorted(names) != sorted(XCOMPOSER2_PLAN_TENSORS):
        raise StepError(
            f"{plan} has tensors {names}; the InternLM-XComposer2 preprocessing needs exactly "
            + " and ".join(XCOMPOSER2_PLAN_TENSORS)
        )
    return names


def xcomposer2_vision_engine(
    recipe: Path, model_type: str, model_dir: Path, output_dir: Path, max_batch_size: int
) -> Path:
    """Build `<output_dir>/visual_encoder.engine` from the checkpoint in `model_dir` with the fork recipe."""
    if not recipe.is_file():
        raise StepError(f"{recipe} is missing: the builder image carries the pinned fork recipe there")
    if not (model_dir / "config.json").is_file():
        raise StepError(f"{model_dir} has no config.json: not a model directory")
    module = _load_recipe(recipe)
    tensorrt = importlib.import_module("tensorrt")
    # The recipe logs through a module-level logger that only its `__main__` block creates.
    module.logger = tensorrt.Logger(tensorrt.Logger.INFO)
    output_dir = output_dir.resolve()
    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="xcomposer2-") as hub:
        # `from_pretrained("internlm/<type>")` finds a directory of that relative name before the Hub.
        checkpoint = Path(hub, XCOMPOSER2_HUB_OWNER, model_type)
        checkpoint.parent.mkdir()
        checkpoint.symlink_to(model_dir.resolve(), target_is_directory=True)
        previous = Path.cwd()
        os.chdir(hub)
        try:
            arguments = argparse.Namespace(
                model_type=model_type,
                model_path=f"{XCOMPOSER2_HUB_OWNER}/{model_type}",
                vila_path=None,
                output_dir=str(output_dir),
                max_batch_size=max_batch_size,
            )
            module.VisionEngineBuilder(arguments).build()
        finally:
            os.chdir(previous)
    plan = output_dir / XCOMPOSER2_PLAN
    if not plan.is_file():
        raise StepError(f"the recipe finished without writing {plan}")
    check_plan_tensors(tensorrt, plan)
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    """Run one step command."""
    parser = argparse.ArgumentParser(prog="python3 -m engine_builder.steps", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    tokenizer = commands.add_parser("keep-tokenizer", help="copy the files serving reads, not weights")
    tokenizer.add_argument("--source", type=Path, required=True)
    tokenizer.add_argument("--dest", type=Path, required=True)
    context = commands.add_parser(
        "check-context", help="refuse a maxSeqLen beyond the checkpoint's positions"
    )
    context.add_argument("--config", type=Path, required=True)
    context.add_argument("--max-seq-len", type=int, required=True)
    whisper = commands.add_parser("whisper-assets", help="stage multilingual.tiktoken and mel_filters.npz")
    whisper.add_argument("--dest", type=Path, required=True)
    vision = commands.add_parser(
        "xcomposer2-vision-engine", help="build the InternLM-XComposer2 ViT plan with the fork's recipe"
    )
    vision.add_argument("--recipe", type=Path, required=True, help="the fork's build_visual_engine.py")
    vision.add_argument("--model-type", required=True, help="the recipe's model type")
    vision.add_argument("--model-dir", type=Path, required=True)
    vision.add_argument("--output-dir", type=Path, required=True)
    vision.add_argument("--max-batch-size", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "keep-tokenizer":
            count = keep_tokenizer(args.source, args.dest)
            print(f"kept {count} tokenizer, processor and config files of {args.source} in {args.dest}")
        elif args.command == "check-context":
            print(check_context(args.config, args.max_seq_len))
        elif args.command == "whisper-assets":
            names = whisper_assets(args.dest)
            print(f"staged {', '.join(names)} in {args.dest}")
        else:
            plan = xcomposer2_vision_engine(
                args.recipe, args.model_type, args.model_dir, args.output_dir, args.max_batch_size
            )
            print(f"built {plan} (tensors {' and '.join(XCOMPOSER2_PLAN_TENSORS)})")
    except (StepError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
