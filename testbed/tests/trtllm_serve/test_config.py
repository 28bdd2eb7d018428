"""`--config` / `--extra_llm_api_options`: YAML keys checked against the real TorchLlmArgs field names."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mmd_testbed.trtllm_serve import cli
from mmd_testbed.trtllm_serve.facts import load
from testbed.tests.trtllm_serve.double import run_cli

FAILED = 1


def _with_config(model: Path, tmp_path: Path, text: str, flag: str = "--config") -> Result:
    config = tmp_path / "extra-llm-api-config.yml"
    config.write_text(text)
    return CliRunner().invoke(cli.build(load()), [str(model), flag, str(config)])


@pytest.mark.parametrize(
    ("yaml_text", "lines"),
    [
        ("max_images_per_request: 4\n", ["1 validation error for TorchLlmArgs", "max_images_per_request"]),
        (  # built as KvCacheConfig(**value) by serve.py: the error names that class
            "kv_cache_config:\n  free_gpu_memory_fraction: 0.8\n  enable_kv_cache_reuse: false\n",
            ["1 validation error for KvCacheConfig", "enable_kv_cache_reuse"],
        ),
        (
            "scheduler_config:\n  dynamic_batch_config:\n    window: 3\n",
            ["1 validation error for TorchLlmArgs", "scheduler_config.dynamic_batch_config.window"],
        ),
        ("cuda_graph_config:\n  enable: true\n", ["cuda_graph_config.enable"]),
        ("mpi_session: 1\n", ["mpi_session"]),  # its key is the alias _mpi_session
        ("quant_config:\n  quant_algo: FP8\n", ["quant_config"]),  # no TorchLlmArgs field
    ],
)
def test_unknown_keys_are_refused_as_pydantic_would(
    qwen_dir: Path, tmp_path: Path, yaml_text: str, lines: list[str]
) -> None:
    result = _with_config(qwen_dir, tmp_path, yaml_text)
    assert result.exit_code == FAILED
    assert result.stderr.startswith("ValidationError: ")
    assert "Extra inputs are not permitted" in result.stderr
    for line in lines:
        assert line in result.stderr


def test_a_yaml_that_is_no_mapping_is_refused(qwen_dir: Path, tmp_path: Path) -> None:
    result = _with_config(qwen_dir, tmp_path, "- kv_cache_config\n")
    assert result.exit_code == FAILED and "must be a mapping" in result.stderr
    broken = _with_config(qwen_dir, tmp_path, "kv_cache_config: [\n", flag="--extra_llm_api_options")
    assert broken.exit_code == FAILED and broken.stderr.startswith("ParserError:")


def test_a_missing_config_file_is_refused_by_the_program(qwen_dir: Path, tmp_path: Path) -> None:
    result = run_cli([str(qwen_dir), "--extra_llm_api_options", str(tmp_path / "none.yml")])
    assert result.returncode == FAILED
    assert "FileNotFoundError: [Errno 2] No such file or directory" in result.stderr


def test_a_known_config_is_taken_with_build_config_dropped(qwen_dir: Path, tmp_path: Path) -> None:
    """Every nested class, keys from the facts, build_config (dropped for PyTorch): the double starts."""
    from mmd_testbed.trtllm_serve import config as config_module

    facts = load().llm_args
    text = "build_config:\n  max_batch_size: 4\n_mpi_session: null\n" + "".join(
        f"{field}:\n  {next(iter(facts.classes[nested]))}: null\n"
        for field, nested in facts.fields.items()
        if nested is not None
    )
    path = tmp_path / "all.yml"
    path.write_text(text)
    values = config_module.load_config(str(path), config_module.ArgsModels(facts))
    assert set(values) == {"build_config", "_mpi_session"} | {f for f, n in facts.fields.items() if n}
