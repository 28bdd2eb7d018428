import argparse
import subprocess
import sys

from mmd_operator.cli import main

SUBCOMMANDS = {"render", "validate", "generate", "cluster", "images", "operator", "infer", "eval-asr", "chat"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def _without_handler(parser: argparse.ArgumentParser, path: str) -> list[str]:
    nested = _subcommands(parser)
    if not nested:
        return [] if parser.get_default("handler") is not None else [path]
    return [gap for name, child in nested.items() for gap in _without_handler(child, f"{path} {name}")]


def test_every_subcommand_is_registered_and_runs_a_handler() -> None:
    parser = main.build_parser()
    assert set(_subcommands(parser)) == SUBCOMMANDS
    cluster = _subcommands(_subcommands(parser)["cluster"])
    assert set(cluster) == {"build", "up", "down", "status", "kubeconfig"}
    assert _without_handler(parser, "mmctl") == []


def test_mmctl_help_runs_as_a_program() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mmd_operator.cli.main", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "MultimodalDeployment" in result.stdout
    for name in SUBCOMMANDS:
        assert name in result.stdout
