"""Honest failure: one line naming the step, its exit code and the error; nothing left that looks built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_builder.plan_runner import check_engines
from mmd_operator.api.validation import parse_spec
from mmd_operator.plan.build_plan import build_plan
from mmd_operator.plan.cache_key import cache_key
from mmd_operator.plan.settings import resolve
from mmd_testbed.build_tools.trtllm_tools import trtllm_build
from tests.engine_builder.conftest import Toolbox, rendered_plan

LLAVA_KEY = rendered_plan("llava")["cache_key"]


def failed(toolbox: Toolbox, capsys: pytest.CaptureFixture[str], example: str = "llava") -> dict[str, object]:
    """Build `example`, which must fail; return the termination message after the common checks."""
    assert toolbox.build(toolbox.plan(example)) == 1
    stderr = capsys.readouterr().err.splitlines()
    result = toolbox.result()
    assert result["result"] == "failed"
    assert stderr[-1] == f"engine_builder: build failed: {result['reason']}"
    assert "\n" not in toolbox.termination_log.read_text().rstrip("\n")
    # No entry, no work directory: only the lock file may remain.
    if toolbox.cache.exists():
        assert [p.name for p in toolbox.cache.iterdir() if not p.name.startswith(".lock-")] == []
    return result


def test_a_failing_step_is_reported_with_its_exit_code_and_last_error_line_and_stops_the_build(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOUBLE_FAIL", "trtllm-build")
    result = failed(toolbox, capsys)
    assert result == {
        "result": "failed",
        "format_version": 1,
        "cache_key": LLAVA_KEY,
        "step": "build-llm",
        "exit_code": 1,
        "reason": "step build-llm (4/6) exited with code 1: "
        "RuntimeError: [TensorRT-LLM][ERROR] trtllm-build failed on demand (test double)",
    }
    assert [call["tool"] for call in toolbox.calls()] == [
        "huggingface-cli",
        "llama/convert_checkpoint.py",
        "trtllm-build",
    ]


def test_a_tool_killed_by_the_kernel_is_named_as_such(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOUBLE_KILL", "build_multimodal_engine")
    result = failed(toolbox, capsys)
    assert result["step"] == "build-vision-engine" and result["exit_code"] == -9
    assert str(result["reason"]).startswith(
        "step build-vision-engine (5/6) was killed by SIGKILL (the kernel's OOM"
    )


def test_a_step_that_succeeds_without_its_outputs_fails_the_build(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOUBLE_NO_OUTPUT", "build_multimodal_engine")
    result = failed(toolbox, capsys)
    assert result["reason"] == (
        "step build-vision-engine (5/6) exited 0 but did not produce "
        "encoder/model.engine, encoder/config.json"
    )
    assert result["exit_code"] == 0


def test_an_engine_that_disagrees_with_the_plan_fails_the_build(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A trtllm-build that drops --max_multimodal_len builds an engine without room for the images.
    monkeypatch.setenv("DOUBLE_IGNORE_FLAG", "--max_multimodal_len")
    monkeypatch.setenv("DOUBLE_TRTLLM_VERSION", "0.18.2")
    result = failed(toolbox, capsys)
    assert result["step"] == "verify"
    assert result["reason"] == (
        "the engines disagree with the plan: "
        "llm/config.json: version is '0.18.2', the plan asks for '0.19.0'; "
        "llm/config.json: build_config.max_prompt_embedding_table_size is 0, the plan asks for 4608"
    )


def test_a_plan_for_another_tensorrt_llm_is_refused_before_anything_runs(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENGINE_BUILDER_ASSUME_TRTLLM_VERSION", "0.20.0")
    result = failed(toolbox, capsys)
    assert result["step"] is None
    assert result["reason"] == (
        "refused: the plan was made for TensorRT-LLM 0.19.0 but this image has 0.20.0; "
        "run it in ghcr.io/mmd-operator/engine-builder:0.1.0-trtllm0.19.0"
    )
    assert toolbox.calls() == [] and not toolbox.cache.exists()

    monkeypatch.delenv("ENGINE_BUILDER_ASSUME_TRTLLM_VERSION")
    result = failed(toolbox, capsys)
    assert str(result["reason"]).startswith("refused: tensorrt_llm is not installed here; run the plan in ")


def test_a_missing_job_secret_is_refused_before_anything_runs(
    toolbox: Toolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    result = failed(toolbox, capsys, "mllama")
    assert (
        result["reason"]
        == "refused: step fetch-model needs HF_TOKEN from the Job's environment, which is not set"
    )
    assert toolbox.calls() == []


def test_a_missing_tool_is_named(toolbox: Toolbox, capsys: pytest.CaptureFixture[str]) -> None:
    (toolbox.bin / "trtllm-build").unlink()
    result = failed(toolbox, capsys)
    assert result["reason"] == "step build-llm (4/6) could not start trtllm-build: No such file or directory"


def test_an_unreadable_plan_is_a_reported_failure(
    toolbox: Toolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = toolbox.root / "plan.json"
    plan.write_text('{"cache_key": "abc"}')
    assert toolbox.build(plan) == 1
    result = toolbox.result()
    assert result["cache_key"] is None
    assert result["reason"] == f"{plan} is not a build plan this builder reads: model_type: Field required"
    assert capsys.readouterr().err.startswith("engine_builder: build failed: ")


@pytest.mark.parametrize("leak", ["1", "fail"])
def test_the_hugging_face_token_never_reaches_logs_manifest_or_termination_message(
    leak: str,
    toolbox: Toolbox,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = "hf_TopSecretTokenValue0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    # A careless tool prints the token (and, with "fail", fails with it in its last error line).
    monkeypatch.setenv("DOUBLE_LEAK_TOKEN", leak)
    code = toolbox.build(toolbox.plan("mllama"))
    out, err = capsys.readouterr()
    assert code == (0 if leak == "1" else 1)
    assert "***" in out
    for text in (out, err, toolbox.termination_log.read_text()):
        assert secret not in text
    for path in toolbox.root.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    if leak == "fail":
        assert toolbox.result()["reason"] == (
            "step fetch-model (1/6) exited with code 1: "
            "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized: invalid token ***"
        )
    else:
        # Only the step that declares the token gets it.
        seen = {call["tool"]: call["hf_token_seen"] for call in toolbox.calls()}
        assert seen == {
            "huggingface-cli": True,
            "mllama/convert_checkpoint.py": False,
            "trtllm-build": False,
            "multimodal/build_multimodal_engine.py": False,
        }


def test_a_token_no_step_declares_reaches_no_step_and_no_output(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "hf_PassedByHandToAPublicModel0123"
    monkeypatch.setenv("HF_TOKEN", secret)
    assert toolbox.build(toolbox.plan("llava")) == 0
    assert not any(call["hf_token_seen"] for call in toolbox.calls())
    assert secret not in capsys.readouterr().out


@pytest.mark.parametrize("kv_cache", [None, "INT8"])
def test_an_engine_built_without_the_paged_context_fmha_kv_reuse_needs_fails_the_check(
    tmp_path: Path, kv_cache: str | None
) -> None:
    # trtllm-build turns the switch off by itself with an int8 KV cache (and others), only in its log.
    spec = {
        "model": {"type": "llava", "source": {"huggingface": {"repo": "org/llava"}}},
        "serving": {"kvCacheReuse": True},
    }
    settings = resolve(parse_spec(spec))
    plan = build_plan(settings, cache_key=cache_key(settings))
    (step,) = [s for s in plan.steps if s.name == "build-llm"]
    argv = list(step.argv[1:])
    checkpoint, engine = tmp_path / "checkpoint", tmp_path / "llm"
    argv[argv.index("--checkpoint_dir") + 1] = str(checkpoint)
    argv[argv.index("--output_dir") + 1] = str(engine)
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(
        json.dumps(
            {
                "architecture": "LlamaForCausalLM",
                "dtype": settings.dtype,
                "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
                "quantization": {"quant_algo": None, "kv_cache_quant_algo": kv_cache},
            }
        )
    )
    trtllm_build(argv)
    switched_off = (
        "llm/config.json: build_config.plugin_config.use_paged_context_fmha is False, the plan asks for True"
    )
    problems = [p for p in check_engines(tmp_path, plan) if p.startswith("llm/")]
    assert problems == ([switched_off] if kv_cache else [])
