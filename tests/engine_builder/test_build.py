"""The build of every example's plan, with the GPU tools replaced by doubles: steps, layout, manifest."""

from __future__ import annotations

import hashlib
import json

import pytest

from engine_builder.plan_runner import resolve_argv
from engine_builder.result_format import parse_termination_message
from tests.engine_builder.conftest import EXAMPLES, Toolbox, rendered_plan


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_builds_into_one_complete_cache_entry(
    example: str, toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_example_token_value")
    plan_path = toolbox.plan(example)
    plan = json.loads(plan_path.read_text())
    key = plan["cache_key"]

    assert toolbox.build(plan_path) == 0

    output = capsys.readouterr().out
    # The steps ran in the plan's order, each announced and then done with its time.
    names = [step["name"] for step in plan["steps"]]
    total = len(names)
    started = [
        line.split(":")[0] for line in output.splitlines() if line.startswith("[") and "done in" not in line
    ]
    assert started == [f"[{i}/{total}] {name}" for i, name in enumerate(names, 1)]
    assert sum(f"[{i}/{total}] {name}: done in " in output for i, name in enumerate(names, 1)) == total
    # Each double got exactly the plan's argv, {work} resolved to the private work directory.
    work = toolbox.cache / f".work-{key}"
    expected = []
    for step in plan["steps"]:
        argv = resolve_argv(step["argv"], work, str(toolbox.examples))
        if argv[:2] != ["python3", "-m"]:
            expected.append(argv[2:] if argv[0] == "python3" else argv[1:])
    assert [call["argv"] for call in toolbox.calls()] == expected

    # Only the kept directories and the manifest are left; no work directory, no intermediates.
    entry = toolbox.cache / key
    assert sorted(p.name for p in toolbox.cache.iterdir()) == sorted([key, f".lock-{key}"])
    assert sorted(p.name for p in entry.iterdir()) == sorted([*plan["keep"], "manifest.json"])

    manifest = toolbox.manifest(key)
    assert manifest["cache_key"] == key
    assert manifest["plan"] == plan
    assert manifest["versions"]["tensorrt_llm"] == plan["trtllm_version"]
    assert manifest["versions"]["tensorrt_llm_assumed"] is True
    assert manifest["gpu"] == {"name": "unknown", "compute_capability": "unknown", "count": 0}
    assert [step["name"] for step in manifest["steps"]] == names
    files = {p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == files
    for relative, record in manifest["files"].items():
        content = (entry / relative).read_bytes()
        assert record == {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    # Weights never reach the cache; the tokenizer files serving reads do.
    assert not [
        name
        for name in files
        if name.endswith((".safetensors", ".bin", ".pt")) and "image_newlines" not in name
    ]

    summary = parse_termination_message(toolbox.termination_log.read_text())
    assert summary.result == "succeeded"
    assert summary.cache_key == key and summary.cache_hit is False  # type: ignore[union-attr]
    assert set(summary.sizes) == set(plan["keep"])  # type: ignore[union-attr]


def test_tensor_parallel_engines_have_one_file_per_rank_and_fp8_is_recorded(toolbox: Toolbox) -> None:
    key = rendered_plan("llava-tp2-fp8")["cache_key"]
    assert toolbox.build(toolbox.plan("llava-tp2-fp8")) == 0
    llm = toolbox.cache / key / "llm"
    assert sorted(p.name for p in llm.iterdir()) == ["config.json", "rank0.engine", "rank1.engine"]
    config = json.loads((llm / "config.json").read_text())
    assert config["pretrained_config"]["quantization"]["kv_cache_quant_algo"] == "FP8"


def test_whisper_assets_land_where_whisper_bls_reads_them(toolbox: Toolbox) -> None:
    key = rendered_plan("whisper")["cache_key"]
    assert toolbox.build(toolbox.plan("whisper")) == 0
    entry = toolbox.cache / key
    assert sorted(p.name for p in (entry / "assets").iterdir()) == [
        "mel_filters.npz",
        "multilingual.tiktoken",
    ]
    assert (entry / "encoder" / "rank0.engine").is_file() and (entry / "llm" / "rank0.engine").is_file()


def test_the_gpu_is_recorded_when_nvidia_smi_answers(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the real nodes' device plugin double gives a build pod with two H100s.
    monkeypatch.setenv("FAKE_NVIDIA_GPUS", "NVIDIA H100 80GB HBM3,9.0;NVIDIA H100 80GB HBM3,9.0")
    monkeypatch.setenv("CUDA_VERSION", "12.9.0.043")
    key = rendered_plan("llava")["cache_key"]
    assert toolbox.build(toolbox.plan("llava")) == 0
    manifest = toolbox.manifest(key)
    assert manifest["gpu"] == {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "count": 2}
    assert manifest["versions"]["cuda"] == "12.9.0.043"
    assert toolbox.result()["gpu"]["name"] == "NVIDIA H100 80GB HBM3"


def test_the_plan_can_come_as_an_argument_as_the_operators_jobs_pass_it(toolbox: Toolbox) -> None:
    plan = toolbox.plan("llava")
    args = toolbox.args(plan)
    args[args.index("--plan") : args.index("--plan") + 2] = ["--plan-json", plan.read_text()]
    from engine_builder.__main__ import main

    assert main(args) == 0
    assert toolbox.result()["result"] == "succeeded"
    assert toolbox.result()["cache_key"] == json.loads(plan.read_text())["cache_key"]


def test_a_plan_argument_that_is_not_a_plan_fails_with_one_line(toolbox: Toolbox) -> None:
    from engine_builder.__main__ import main

    args = toolbox.args(toolbox.plan("llava"))
    args[args.index("--plan") : args.index("--plan") + 2] = ["--plan-json", '{"cache_key": 1}']
    assert main(args) == 1
    assert toolbox.result()["reason"].startswith("--plan-json is not a build plan this builder reads")
