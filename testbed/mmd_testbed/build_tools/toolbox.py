#!/usr/bin/env python3
"""Lay out the GPU tools' doubles where a build image holds the real tools.

Used by the builder tier's fixture (in a temporary directory) and by the CPU stand-in of the builder image
(Dockerfile target `engine-builder-cpu`, at the real image's paths): `trtllm-build` and `huggingface-cli`
on PATH, every TensorRT-LLM example script a plan runs under the examples directory, the InternLM-XComposer2
vision recipe, and on PYTHONPATH a `tensorrt` package and an `openai-whisper` package with its two assets.
Each tool is `trtllm_tools.py` linked under the tool's name (it dispatches on the name it was run as), but
`nvidia-smi`, which is `nvidia_smi.py` (the GPUs the node's device plugin double gave the container).

    python3 -m mmd_testbed.build_tools.toolbox --bin /usr/local/bin --examples /opt/tensorrt_llm/examples \
        --pythonpath /opt/doubles/site --xcomposer2 /opt/internlm-xcomposer2/build_visual_engine.py
    python3 -m mmd_testbed.build_tools.toolbox --examples /opt/tensorrt_llm/examples --release 1.2.1

The example scripts lie where the engine-path release (`--release`, default the default one) keeps them
(`models/core/<model>/` from 1.x); with `--examples` alone, only they are laid out again, for another
release (the Dockerfile's `release-cpu` stage).

Imports the standard library, numpy (for the mel filters' .npz) and the pinned releases.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from engine_builder import versions

HERE = Path(__file__).resolve().parent
TOOL = HERE / "trtllm_tools.py"
# Every TensorRT-LLM example script a plan may run, relative to the examples directory.
EXAMPLE_SCRIPTS = (
    "opt/convert_checkpoint.py",
    "llama/convert_checkpoint.py",
    "qwen/convert_checkpoint.py",
    "mllama/convert_checkpoint.py",
    "internlm2/convert_checkpoint.py",
    "whisper/convert_checkpoint.py",
    "whisper/distil_whisper/convert_from_distil_whisper.py",
    "quantization/quantize.py",
    "multimodal/build_multimodal_engine.py",
    "hf_lora_convert.py",
)
TOOLS_ON_PATH = ("trtllm-build", "huggingface-cli")
NVIDIA_SMI = HERE / "nvidia_smi.py"


def write_whisper_package(root: Path) -> None:
    """A stand-in for the openai-whisper package: just its two assets, shaped like the real ones."""
    assets = root / "whisper" / "assets"
    assets.mkdir(parents=True)
    (root / "whisper" / "__init__.py").write_text('"""openai-whisper test double: assets only."""\n')
    np.savez(
        assets / "mel_filters.npz",
        mel_80=np.zeros((80, 201), np.float32),
        mel_128=np.zeros((128, 201), np.float32),
    )
    (assets / "multilingual.tiktoken").write_text("IQ== 0\nIg== 1\nIw== 2\n")


def install_examples(examples: Path, release: str = versions.TRTLLM_VERSION) -> None:
    """Link every example script where `release` keeps it under `examples`, and nothing else there."""
    shutil.rmtree(examples, ignore_errors=True)
    at = versions.ENGINE_RELEASES[release]
    for script in EXAMPLE_SCRIPTS:
        path = examples / at.example(script).removeprefix(versions.TRTLLM_EXAMPLES_DIR + "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(TOOL)


def install(
    bin_dir: Path,
    examples: Path,
    pythonpath: Path,
    xcomposer2: Path | None = None,
    release: str = versions.TRTLLM_VERSION,
) -> None:
    """Link the tools and scripts, and write the `tensorrt` and `whisper` packages."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for program in (TOOL, HERE / "xcomposer2_recipe.py", NVIDIA_SMI):
        # A wheel may not keep the executable bit of a package file; the links run these as programs.
        if not program.stat().st_mode & 0o111:
            program.chmod(0o755)
    for tool in TOOLS_ON_PATH:
        # The doubles take the real tools' places: huggingface_hub, which the CPU builder image installs for
        # the weights download, puts its own `huggingface-cli` there (it would fetch from a Hub).
        (bin_dir / tool).unlink(missing_ok=True)
        (bin_dir / tool).symlink_to(TOOL)
    (bin_dir / "nvidia-smi").unlink(missing_ok=True)
    (bin_dir / "nvidia-smi").symlink_to(NVIDIA_SMI)
    install_examples(examples, release)
    if xcomposer2 is not None:
        xcomposer2.parent.mkdir(parents=True, exist_ok=True)
        xcomposer2.symlink_to(HERE / "xcomposer2_recipe.py")
    write_whisper_package(pythonpath)
    (pythonpath / "tensorrt").mkdir()
    (pythonpath / "tensorrt" / "__init__.py").write_text((HERE / "tensorrt_runtime.py").read_text())


def main() -> None:
    """Lay the doubles out where the command line says."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", type=Path)
    parser.add_argument("--examples", type=Path, required=True)
    parser.add_argument("--pythonpath", type=Path)
    parser.add_argument("--xcomposer2", type=Path)
    parser.add_argument(
        "--release", choices=sorted(versions.ENGINE_RELEASES), default=versions.TRTLLM_VERSION
    )
    args = parser.parse_args()
    if args.bin is None and args.pythonpath is None:
        install_examples(args.examples, args.release)
    elif args.bin is None or args.pythonpath is None:
        parser.error("--bin and --pythonpath go together")
    else:
        install(args.bin, args.examples, args.pythonpath, args.xcomposer2, args.release)


if __name__ == "__main__":
    main()
