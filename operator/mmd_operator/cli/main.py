"""Entry point of `mmctl`: wires the sub-command modules into one argparse parser."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from mmd_operator.cli import cluster, eval_asr, generate, infer, render

# Each sub-command module exposes `register(subparsers)`, which adds its parser and sets
# `handler` (a function of the parsed namespace returning an exit code).
_SUBCOMMAND_MODULES = (render, generate, cluster, infer, eval_asr)


def build_parser() -> argparse.ArgumentParser:
    """Return the full `mmctl` parser."""
    parser = argparse.ArgumentParser(
        prog="mmctl",
        description="Render, validate and serve MultimodalDeployment resources.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _SUBCOMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `mmctl` with `argv` and return its exit code."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
