import argparse
import subprocess
import sys

import pytest

from mmctl import main
from mmd_operator import __version__
from mmd_operator.knowledge import KNOWLEDGE, SERVE_KNOWLEDGE

SUBCOMMANDS = {"render", "validate", "migrate", "infer", "eval-asr", "chat"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_the_users_commands_are_listed_and_nothing_else() -> None:
    assert set(_subcommands(main.build_parser())) == SUBCOMMANDS


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_each_command_configures_its_parser_and_a_handler(command: str) -> None:
    parser = _subcommands(main.build_parser([command]))[command]
    assert parser.get_default("handler") is not None
    assert parser.description


def test_help_imports_no_command_module() -> None:
    probe = (
        "import sys; from mmctl import main; main.build_parser(['--help']); "
        "print(sorted(m for m in sys.modules if m.startswith('mmctl.')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['mmctl.main']"


def test_mmctl_help_runs_as_a_program() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mmctl", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "MultimodalDeployment" in result.stdout
    listed = {
        line.split()[0] for line in result.stdout.splitlines() if line.startswith("    ") and line[4] != " "
    }
    assert listed == SUBCOMMANDS


def test_a_missing_extra_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As if tritonclient were not installed: its import fails the way a missing package does.
    monkeypatch.setitem(sys.modules, "tritonclient", None)
    monkeypatch.delitem(sys.modules, "mmctl.infer", raising=False)
    monkeypatch.delitem(sys.modules, "mmctl.triton.client", raising=False)
    assert main.main(["infer", "--url", "http://127.0.0.1:1"]) == main.EXIT_MISSING_EXTRA
    assert capsys.readouterr().err.strip() == (
        "mmctl infer needs the triton extra (missing tritonclient); from the root of a checkout: "
        "pip install ./engine_builder ./operator './cli[triton]'"
    )


def test_version_names_mmctl_and_the_operator_whose_rules_it_checks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"mmctl 0.1.0 (mmd-operator {__version__})"


SERVE_ONLY = sorted(t.value for t in SERVE_KNOWLEDGE if t not in KNOWLEDGE)


@pytest.mark.parametrize("model_type", SERVE_ONLY)
def test_infer_with_a_type_only_trtllm_serve_serves_points_at_chat(
    capsys: pytest.CaptureFixture[str], model_type: str
) -> None:
    # Nothing listens on port 1: the answer comes before anything is sent.
    assert main.main(["infer", "--url", "http://127.0.0.1:1", "--model-type", model_type]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"mmctl infer: {model_type} is served by the trtllm-serve runtime, whose OpenAI API `mmctl infer` "
        "does not speak: use mmctl chat --url http://<host>:8000 instead (docs/clients.md)"
    ]
    assert "Traceback" not in err and "KeyError" not in err
