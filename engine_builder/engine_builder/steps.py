"""Build steps of our own, which plans run as `python3 -m engine_builder.steps <command>`.

`keep-tokenizer` copies from a model directory the small files serving reads (tokenizer, processor and
model configs, vocabularies and merges, remote code for `trust_remote_code`, chat templates), never the
weights; subdirectories keep their layout (VILA keeps its tokenizer under `llm/`). LLaVA-OneVision's
`image_newlines.safetensors` is not among them: the multimodal builder writes it into the engine
directory. `whisper-assets` stages `multilingual.tiktoken` and `mel_filters.npz`, which whisper_bls loads
from its model directory, out of the openai-whisper package that ships both.

Standard library only; errors are one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import shutil
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

TOKENIZER_FILES = ("*.json", "*.model", "*.tiktoken", "*.txt", "*.py", "*.jinja")
WHISPER_ASSETS = ("multilingual.tiktoken", "mel_filters.npz")
# whisper_bls reads mel_<n_mels> for 80-bin models and 128-bin ones (large-v3 family).
MEL_FILTERS = ("mel_80.npy", "mel_128.npy")


class StepError(Exception):
    """A step cannot do its work; the message is the one line the builder reports."""


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run one step command."""
    parser = argparse.ArgumentParser(prog="python3 -m engine_builder.steps", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    tokenizer = commands.add_parser("keep-tokenizer", help="copy the files serving reads, not weights")
    tokenizer.add_argument("--source", type=Path, required=True)
    tokenizer.add_argument("--dest", type=Path, required=True)
    whisper = commands.add_parser("whisper-assets", help="stage multilingual.tiktoken and mel_filters.npz")
    whisper.add_argument("--dest", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "keep-tokenizer":
            count = keep_tokenizer(args.source, args.dest)
            print(f"kept {count} tokenizer, processor and config files of {args.source} in {args.dest}")
        else:
            names = whisper_assets(args.dest)
            print(f"staged {', '.join(names)} in {args.dest}")
    except (StepError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
