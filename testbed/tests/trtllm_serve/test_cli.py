"""The double's command line refuses what the real `trtllm-serve` refuses, with click's usage errors (exit 2)
and the real server's start-up errors (exit 1); as a program and through click's own test runner."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mmd_testbed.trtllm_serve import cli
from mmd_testbed.trtllm_serve.facts import load
from testbed.tests.trtllm_serve.double import free_port, model_dir, run_cli

USAGE = 2
FAILED = 1


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli.build(load()), list(args))


def test_an_unknown_option_is_a_usage_error_of_the_program(qwen_dir: Path) -> None:
    result = run_cli([str(qwen_dir), "--backend", "pytorch", "--max_images", "4"])
    assert result.returncode == USAGE
    assert "No such option" in result.stderr and "--max_images" in result.stderr
    assert "Usage: trtllm-serve serve [OPTIONS] MODEL" in result.stderr


def test_the_serve_subcommand_is_also_accepted(qwen_dir: Path) -> None:
    result = run_cli(["serve", str(qwen_dir), "--tp_size", "two"])
    assert result.returncode == USAGE
    assert "'two' is not a valid integer" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--backend", "vllm"), "'vllm' is not one of 'pytorch', 'tensorrt', '_autodeploy'"),
        (("--log_level", "loud"), "'loud' is not one of"),
        (("--port", "http"), "'http' is not a valid integer"),
        (("--kv_cache_free_gpu_memory_fraction", "most"), "'most' is not a valid float"),
        (("--custom_module_dirs", "/nonexistent/modules"), "does not exist"),
        (("--trust_remote_code", "yes"), "Got unexpected extra argument (yes)"),
    ],
)
def test_bad_values_are_usage_errors(qwen_dir: Path, args: tuple[str, ...], message: str) -> None:
    result = _invoke(str(qwen_dir), *args)
    assert result.exit_code == USAGE, result.output
    assert message in result.stderr


def test_model_is_required() -> None:
    result = _invoke("serve", "--port", "8000")
    assert result.exit_code == USAGE
    assert "Missing argument 'MODEL'" in result.stderr


def test_other_subcommands_are_not_doubled(qwen_dir: Path) -> None:
    for name in ("grpc", "disaggregated", "mm_embedding_serve"):
        result = _invoke(name, str(qwen_dir))
        assert result.exit_code == USAGE
        assert f"implements `serve` only, not `{name}`" in result.stderr


def test_only_the_pytorch_backend_is_doubled(qwen_dir: Path) -> None:
    result = _invoke(str(qwen_dir), "--backend", "trt")  # the real alias of tensorrt
    assert result.exit_code == FAILED
    assert "serves the pytorch backend only, not tensorrt" in result.stderr


def test_the_model_directory_is_checked_like_the_real_server(tmp_path: Path) -> None:
    missing = _invoke(str(tmp_path / "Qwen/Qwen2.5-VL-3B-Instruct"))
    assert missing.exit_code == FAILED and "is not a local directory" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = _invoke(str(tmp_path / "empty"))
    assert empty.exit_code == FAILED
    assert "no config.json exists in" in empty.stderr
    llava = model_dir(tmp_path, "LlavaForConditionalGeneration", "llava")  # LLaVA-1.5: engine runtime only
    refused = _invoke(str(llava))
    assert refused.exit_code == FAILED
    assert (
        "ValueError: Unknown architecture for AutoModelForCausalLM: LlavaForConditionalGeneration"
        in refused.stderr
    )


def test_media_io_kwargs_must_be_json(qwen_dir: Path) -> None:
    result = _invoke(str(qwen_dir), "--media_io_kwargs", "{video: 8}")
    assert result.exit_code == FAILED
    assert "ValueError: Invalid JSON for media_io_kwargs:" in result.stderr


def test_a_taken_port_is_a_bind_error(qwen_dir: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = run_cli([str(qwen_dir), "--host", "127.0.0.1", "--port", str(port)])
    assert result.returncode == FAILED
    assert f"RuntimeError: Failed to bind socket to 127.0.0.1:{port}" in result.stderr


def test_a_bad_delay_setting_is_refused(qwen_dir: Path) -> None:
    result = run_cli([str(qwen_dir), "--port", str(free_port())], env={"MMD_DOUBLE_DELAY_SECONDS": "soon"})
    assert result.returncode == FAILED
    assert "MMD_DOUBLE_DELAY_SECONDS='soon' is not a number" in result.stderr
