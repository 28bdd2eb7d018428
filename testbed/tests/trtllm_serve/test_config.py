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
    """Every nested class (its required keys only), build_config (dropped for PyTorch): the double starts."""
    from mmd_testbed.trtllm_serve import config as config_module

    facts = load().llm_args

    def required(nested: str) -> str:
        keys = [f for f, d in facts.types[nested].items() if d.get("required")]
        return "{" + ", ".join(f"{key}: x" for key in keys) + "}"

    # ray_placement_config needs the Ray orchestrator (TorchLlmArgs.validate_ray_placement_config).
    text = "build_config:\n  max_batch_size: 4\n_mpi_session: null\norchestrator_type: ray\n" + "".join(
        f"{field}: {required(nested)}\n" for field, nested in facts.fields.items() if nested is not None
    )
    path = tmp_path / "all.yml"
    path.write_text(text)
    values = config_module.load_config(str(path), config_module.ArgsModels(facts))
    assert set(values) == {"build_config", "_mpi_session", "orchestrator_type"} | {
        f for f, n in facts.fields.items() if n
    }


# The four values a check against the real TorchLlmArgs of the 1.2 line found the server refusing (issue
# 45), with the lines of pydantic's message that name the class, the field path and the rule.
REFUSED_VALUES = [
    (  # built as KvCacheConfig(**value) by serve.py first: the message names that class
        "kv_cache_config:\n  free_gpu_memory_fraction: 1.5\n",
        [
            "1 validation error for KvCacheConfig",
            "free_gpu_memory_fraction",
            "Input should be less than or equal to 1",
        ],
    ),
    (
        "enable_chunked_prefill: maybe\n",
        [
            "1 validation error for TorchLlmArgs",
            "enable_chunked_prefill",
            "Input should be a valid boolean, unable to interpret input",
        ],
    ),
    (
        "scheduler_config:\n  capacity_scheduler_policy: FASTEST\n",
        [
            "1 validation error for TorchLlmArgs",
            "scheduler_config.capacity_scheduler_policy",
            "Input should be 'MAX_UTILIZATION', 'GUARANTEED_NO_EVICT' or 'STATIC_BATCH'",
        ],
    ),
    (
        "cuda_graph_config:\n  batch_sizes: [1, 2, 4]\n  max_batch_size: 8\n",
        [
            "1 validation error for TorchLlmArgs",
            "cuda_graph_config",
            "Value error, CudaGraphConfig.max_batch_size is incompatible with CudaGraphConfig.batch_sizes. "
            "When both are provided, max_batch_size must equal max(batch_sizes).",
            "CudaGraphConfig.batch_sizes: [1, 2, 4], max(batch_sizes): 4, CudaGraphConfig.max_batch_size: 8",
        ],
    ),
]


@pytest.mark.parametrize(
    ("yaml_text", "lines"), REFUSED_VALUES, ids=["fraction", "bool", "enum", "cuda-graph"]
)
def test_values_the_real_server_refuses_are_refused_in_its_words(
    qwen_dir: Path, tmp_path: Path, yaml_text: str, lines: list[str]
) -> None:
    result = _with_config(qwen_dir, tmp_path, yaml_text)
    assert result.exit_code == FAILED
    assert result.stderr.startswith("ValidationError: ")
    for line in lines:
        assert line in result.stderr


def test_the_program_exits_on_a_bad_value_as_on_an_unknown_key(qwen_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.yml"
    config.write_text(REFUSED_VALUES[0][0])
    result = run_cli([str(qwen_dir), "--config", str(config)])
    assert result.returncode == FAILED
    assert "Input should be less than or equal to 1" in result.stderr


@pytest.mark.parametrize(
    ("yaml_text", "words"),
    [
        (
            "attention_dp_config:\n  enable_balance: true\n  timeout_iters: -1\n",
            "timeout_iters must be greater",
        ),
        ("layer_wise_benchmarks_config:\n  calibration_mode: COLLECT\n", "Expect calibration_file_path"),
        ("peft_cache_config:\n  lora_prefetch_dir: /tmp\n", "while LoRA prefetch is not supported"),
        ("ray_worker_extension_cls: a.B\n", "only supported with orchestrator_type='ray'"),
        ("load_format: safetensors\n", "Invalid LoadFormat: safetensors"),
        ("kv_cache_config:\n  max_attention_window: []\n", "List should have at least 1 item"),
        ("stream_interval: 0\n", "Input should be greater than 0"),
        ("batch_wait_max_tokens_ratio: 2\n", "Input should be less than or equal to 1"),
        ("kv_connector_config:\n  connector_module: m\n", "Field required"),
    ],
)
def test_the_other_rules_and_bounds_are_checked(
    qwen_dir: Path, tmp_path: Path, yaml_text: str, words: str
) -> None:
    result = _with_config(qwen_dir, tmp_path, yaml_text)
    assert result.exit_code == FAILED and words in result.stderr


def test_values_the_real_server_takes_are_taken(qwen_dir: Path, tmp_path: Path) -> None:
    from mmd_testbed.trtllm_serve import config as config_module

    path = tmp_path / "good.yml"
    path.write_text(
        "kv_cache_config: {free_gpu_memory_fraction: 1, dtype: fp8, max_tokens: 4096}\n"
        "scheduler_config:\n  capacity_scheduler_policy: MAX_UTILIZATION\n"
        "  context_chunking_policy: EQUAL_PROGRESS\n"
        "cuda_graph_config: {batch_sizes: [4, 1, 2], max_batch_size: 4}\n"
        "enable_chunked_prefill: true\nload_format: dummy\nmax_batch_size: 8\nreturn_perf_metrics: true\n"
    )
    values = config_module.load_config(str(path), config_module.ArgsModels(load().llm_args))
    assert values["kv_cache_config"]["free_gpu_memory_fraction"] == 1
