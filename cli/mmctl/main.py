"""Entry point of `mmctl`: one argparse parser whose sub-commands are imported only when they run.

`mmctl --help` lists every command from the table below without importing any of them, so a base install
(`pip install ./engine_builder ./operator ./cli` from a checkout) runs `render` and `validate`, which need
nothing beyond the operator's own dependencies. A command whose optional libraries are missing names its
extra in one line, with the command that installs it from a checkout (never a name on a package index:
this project registers none), instead of a traceback. `mmctl --version` names mmctl's version and the
operator's whose rules it checks.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata

EXIT_MISSING_EXTRA = 2
_OURS = ("mmctl", "mmd_operator", "engine_builder")
# The one install command of docs/clients.md#install, run from the root of a checkout.
INSTALL = "pip install ./engine_builder ./operator {cli}"


@dataclass(frozen=True)
class Command:
    """One sub-command: its module (which has `configure(parser)`), its one-line help, its extra."""

    module: str
    help: str
    extra: str | None = None


COMMANDS = {
    "render": Command(
        "mmctl.render", "write the model repository, derived limits, build plan and launch argv of a resource"
    ),
    "validate": Command(
        "mmctl.validate", "check MultimodalDeployments in files, directories or stdin, for CI"
    ),
    "migrate": Command(
        "mmctl.migrate",
        "print the trtllm-serve resource equivalent to an engine resource, or why there is none",
    ),
    "infer": Command(
        "mmctl.infer", "send one request (text, images, video or audio) to a serving model", "triton"
    ),
    "eval-asr": Command(
        "mmctl.eval_asr",
        "transcribe a manifest of audio files through whisper_bls and report WER and CER",
        "asr",
    ),
    "chat": Command(
        "mmctl.chat",
        "send one OpenAI chat request (text, images, video, audio) to a trtllm-serve endpoint",
        "chat",
    ),
}


class MissingExtraError(Exception):
    """The command's module needs a library of an extra that is not installed."""


def _version() -> str:
    """Mmctl's version and the operator's, whose rules `validate` checks."""
    return f"mmctl {metadata.version('mmctl')} (mmd-operator {metadata.version('mmd-operator')})"


def _chosen(argv: Sequence[str]) -> str | None:
    """The sub-command named in `argv`: its first argument that is not an option."""
    return next((argument for argument in argv if not argument.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The `mmctl` parser, with the arguments of the command `argv` names (only its module is imported).

    Raises:
        MissingExtraError: when that command's optional libraries are not installed.
    """
    parser = argparse.ArgumentParser(
        prog="mmctl",
        description="Render, validate and try MultimodalDeployment resources.",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen(argv)
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help)
        if name != chosen:
            continue
        try:
            module = importlib.import_module(command.module)
        except ModuleNotFoundError as missing:
            if (missing.name or "").split(".")[0] in _OURS:
                raise  # our own module: a bug, not a missing extra
            raise MissingExtraError(
                f"mmctl {name} needs the {command.extra} extra (missing {missing.name}); from the root "
                f"of a checkout: {INSTALL.format(cli=repr(f'./cli[{command.extra}]'))}"
            ) from None
        module.configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `mmctl` with `argv` and return its exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(arguments)
    except MissingExtraError as missing:
        print(missing, file=sys.stderr)
        return EXIT_MISSING_EXTRA
    args = parser.parse_args(arguments)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
