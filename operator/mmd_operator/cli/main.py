"""Entry point of `mmctl`: wires the sub-command modules into one argparse parser.

The sub-commands need the `cli` extra (Triton client, images, audio, the local control plane); without it
`mmctl` says so in one line instead of a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

# Each sub-command module exposes `register(subparsers)`, which adds its parser and sets
# `handler` (a function of the parsed namespace returning an exit code).
_SUBCOMMAND_MODULES = (
    "render",
    "validate",
    "generate",
    "cluster",
    "images",
    "run_operator",
    "infer",
    "eval_asr",
    "chat",
)
EXIT_MISSING_EXTRA = 2


def build_parser() -> argparse.ArgumentParser:
    """Return the full `mmctl` parser.

    Raises:
        ModuleNotFoundError: when a library of the `cli` extra is not installed.
    """
    parser = argparse.ArgumentParser(
        prog="mmctl",
        description="Render, validate and serve MultimodalDeployment resources.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(f"mmd_operator.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `mmctl` with `argv` and return its exit code."""
    try:
        parser = build_parser()
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] in ("mmd_operator", "engine_builder"):
            raise  # our own module: a bug, not a missing extra
        print(
            f"mmctl needs the cli extra (missing {missing.name}): pip install 'mmd-operator[cli]'",
            file=sys.stderr,
        )
        return EXIT_MISSING_EXTRA
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
