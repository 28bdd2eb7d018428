import subprocess
import sys

from mmd_operator.cli import main


def test_every_subcommand_is_registered() -> None:
    parser = main.build_parser()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert "cluster" in choices


def test_mmctl_help_runs_as_a_program() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mmd_operator.cli.main", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "MultimodalDeployment" in result.stdout
