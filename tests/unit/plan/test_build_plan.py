"""The build plan: step order per model type, and the argv the reference workflow documents."""

from __future__ import annotations

import pytest

from engine_builder import versions
from engine_builder.plan_format import WORK_DIR, BuildPlan
from mmd_testbed.build_tools.trtllm_tools import PLUGIN
from tests.support.examples import EXAMPLE_PATHS, plan_example
from tests.support.reference_workflow import REFERENCE_ARGV, flag_values


def plan_of(example: str) -> BuildPlan:
    _, plan = plan_example(example)
    return plan.build


STEP_ORDER = {
    "blip2": [
        "fetch-model",
        "check-context",
        "convert-checkpoint",
        "build-llm",
        "build-vision-engine",
        "keep-tokenizer",
    ],
    "llava-tp2-fp8": [
        "fetch-model",
        "check-context",
        "quantize-checkpoint",
        "build-llm",
        "build-vision-engine",
        "keep-tokenizer",
    ],
    "internlm_xcomposer2": [
        "fetch-model",
        "check-context",
        "convert-checkpoint",
        "build-llm",
        "build-vision-engine",
        "convert-lora",
        "keep-tokenizer",
    ],
    "internlm-xcomposer2-lora": [
        "check-context",
        "convert-checkpoint",
        "build-llm",
        "build-vision-engine",
        "convert-lora",
        "keep-tokenizer",
    ],
    "whisper": [
        "fetch-model",
        "convert-to-openai-format",
        "convert-checkpoint",
        "build-encoder",
        "build-decoder",
        "stage-whisper-assets",
    ],
}


@pytest.mark.parametrize(("example", "steps"), sorted(STEP_ORDER.items()))
def test_step_order(example: str, steps: list[str]) -> None:
    assert [step.name for step in plan_of(example).steps] == steps


@pytest.mark.parametrize("example", sorted(REFERENCE_ARGV))
def test_plan_passes_every_flag_the_reference_documents(example: str) -> None:
    steps = {step.name: step for step in plan_of(example).steps}
    for step_name, (program, documented) in REFERENCE_ARGV[example].items():
        argv = steps[step_name].argv
        assert program in " ".join(argv[:2]), f"{step_name} runs {argv[:2]}, not {program}"
        emitted = flag_values(argv)
        for flag, value in flag_values(documented.split()).items():
            assert flag in emitted, f"{step_name} lacks {flag}"
            assert emitted[flag] == value, f"{step_name}: {flag} is {emitted[flag]}, reference has {value}"


def test_vila_vision_engine_gets_the_vila_repository() -> None:
    vision = next(step for step in plan_of("vila").steps if step.name == "build-vision-engine")
    assert flag_values(vision.argv)["--vila_path"] == "/opt/VILA"


def test_xcomposer2_vision_plan_is_built_by_the_pinned_fork_recipe_its_preprocessing_expects() -> None:
    _, plan = plan_example("internlm_xcomposer2")
    vision = next(step for step in plan.build.steps if step.name == "build-vision-engine")
    assert vision.argv[:4] == ("python3", "-m", "engine_builder.steps", "xcomposer2-vision-engine")
    flags = flag_values(vision.argv)
    assert flags["--recipe"] == versions.XCOMPOSER2_VISION_BUILDER
    # The fork's dispatcher knows the model by this name (not upstream's `internlm-xcomposer2`).
    assert flags["--model-type"] == "internlm-xcomposer2-vl-7b"
    assert flags["--max-batch-size"] == "48"
    assert vision.produces == ("encoder/visual_encoder.engine", "encoder/config.json")
    expectation = next(e for e in plan.build.expectations if e.config_path == "encoder/config.json")
    assert expectation.values == {"builder_config.model_type": "internlm/internlm-xcomposer2-vl-7b"}
    preprocessing = plan.repository.configs["preprocessing"]
    assert f"/engines/{plan.cache_key}/encoder/visual_encoder.engine" in preprocessing


def test_pvc_sources_are_read_in_place_and_hf_tokens_come_only_from_the_job_environment() -> None:
    plan = plan_of("internlm-xcomposer2-lora")
    convert = next(step for step in plan.steps if step.name == "convert-checkpoint")
    assert flag_values(convert.argv)["--model_dir"] == "/sources/model/internlm-xcomposer2-vl-7b"
    lora = next(step for step in plan.steps if step.name == "convert-lora")
    assert flag_values(lora.argv)["-i"] == "/sources/lora/internlm-xcomposer2-vl-7b-lora"
    fetch = next(step for step in plan_of("mllama").steps if step.name == "fetch-model")
    assert fetch.env_from_job == ("HF_TOKEN",)
    assert "token" not in " ".join(fetch.argv).lower()


@pytest.mark.parametrize("example", [p.stem for p in EXAMPLE_PATHS])
def test_outputs_land_in_the_work_directory_and_the_kept_parts_are_produced(example: str) -> None:
    plan = plan_of(example)
    produced = {path.split("/")[0] for step in plan.steps for path in step.produces}
    assert set(plan.keep) <= produced
    for step in plan.steps:
        for flag in ("--output_dir", "--dest", "-o", "--local-dir"):
            if flag in step.argv:
                assert flag_values(step.argv)[flag].startswith(WORK_DIR)  # type: ignore[union-attr]


def test_expectations_name_the_limits_the_engine_must_show() -> None:
    plan = plan_of("vila")
    llm = next(e for e in plan.expectations if e.config_path == "llm/config.json").values
    assert llm["build_config.max_prompt_embedding_table_size"] == 6272
    assert llm["build_config.max_batch_size"] == 8
    assert llm["pretrained_config.mapping.tp_size"] == 1
    vision = next(e for e in plan.expectations if e.config_path == "encoder/config.json").values
    assert vision == {"builder_config.model_type": "vila", "builder_config.max_batch_size": 32}
    assert plan.trtllm_version == "0.19.0"


@pytest.mark.parametrize("example", ["llava-tp2-fp8", "mllama"])
def test_gemm_plugin_auto_stays_an_accepted_value_on_the_engine_path(example: str) -> None:
    """An FP8 checkpoint and mllama build with `--gemm_plugin auto` (the checkpoint decides the type):
    `auto` must stay among the values trtllm-build takes (its double's choices mirror the real ones)."""
    build = next(step for step in plan_of(example).steps if step.name == "build-llm")
    assert flag_values(build.argv)["--gemm_plugin"] == "auto"
    assert "auto" in PLUGIN
