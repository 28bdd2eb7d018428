"""The engine path's releases: one table, chosen per resource, carried through the whole plan."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine_builder import versions
from mmd_operator.api.v1alpha1.spec import EngineSpec
from mmd_operator.api.validation import parse_spec
from mmd_operator.knowledge import KNOWLEDGE, ModelType
from mmd_operator.plan.resource_plan import plan_resource
from mmd_operator.plan.triton import TritonPlan
from mmd_testbed.build_tools.toolbox import install_examples
from tests.support.examples import EXAMPLE_PATHS, EXAMPLES_DIR

RENAMED = {"min_length": "min_tokens", "random_seed": "seed"}
# The models whose configs carry the renamed request inputs, per layout.
CARRIERS = ("tensorrt_llm", "tensorrt_llm_bls", "ensemble")


def _plan(example: str, version: str | None) -> TritonPlan:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / f"{example}.yaml").read_text())
    if version is not None:
        document["spec"].setdefault("engine", {})["tensorrtLlmVersion"] = version
    _, plan = plan_resource(document)
    assert isinstance(plan, TritonPlan)
    return plan


def _refused(example: str, release: str) -> bool:
    model_type = yaml.safe_load((EXAMPLES_DIR / f"{example}.yaml").read_text())["spec"]["model"]["type"]
    knowledge = KNOWLEDGE.get(ModelType(model_type))
    return knowledge is not None and release in dict(knowledge.refused_releases)


def test_a_release_is_refused_only_for_the_types_its_reading_names() -> None:
    refused = {
        (knowledge.model_type.value, release)
        for knowledge in KNOWLEDGE.values()
        for release, _ in knowledge.refused_releases
    }
    # docs/development/engine-path-versions.md, "Third pass": upstream's own code for it breaks at 1.2.x.
    assert refused == {("llava_onevision", "1.2.1")}
    assert all(release in versions.ENGINE_RELEASES for _, release in refused)
    with pytest.raises(Exception, match=r"engine.tensorrtLlmVersion 1.2.1 is not offered for model.type"):
        _plan("llava_onevision", "1.2.1")
    assert _plan("llava_onevision", None).settings.release is versions.DEFAULT_ENGINE_RELEASE


def test_the_spec_offers_exactly_the_releases_of_the_table() -> None:
    field = EngineSpec.model_fields["tensorrt_llm_version"].annotation
    (offered,) = [typing.get_args(arm) for arm in typing.get_args(field) if typing.get_args(arm)]
    assert set(offered) == set(versions.ENGINE_RELEASES)
    assert versions.DEFAULT_ENGINE_RELEASE is versions.ENGINE_RELEASES["0.19.0"]
    assert (versions.TRTLLM_VERSION, versions.BUILDER_IMAGE) == (
        "0.19.0",
        "ghcr.io/mmd-operator/engine-builder:0.1.0-trtllm0.19.0",
    )


def test_only_a_final_trtllm_serve_release_is_served_and_the_next_one_is_a_row() -> None:
    assert versions.DEFAULT_SERVE_RELEASE.final and versions.SERVE_TRTLLM_VERSION == "1.2.1"
    upcoming = versions.SERVE_RELEASES["1.3.0"]
    assert not upcoming.final and upcoming.needs_pmix_hostname
    assert "trtllm_num_requests_waiting" in upcoming.gauges


@pytest.mark.parametrize("example", ["llava", "blip2", "whisper", "internlm_xcomposer2", "mllama"])
def test_the_last_release_is_carried_through_the_key_the_build_and_the_images(example: str) -> None:
    default, last = _plan(example, None), _plan(example, "1.2.1")
    assert default.cache_key == _plan(example, "0.19.0").cache_key
    assert last.cache_key != default.cache_key
    assert last.build.trtllm_version == "1.2.1" and default.build.trtllm_version == "0.19.0"
    assert last.settings.builder_image.endswith("-trtllm1.2.1")
    assert last.settings.serving_image.endswith("-trtllm1.2.1")
    (llm,) = [e for e in last.build.expectations if "version" in e.values]
    assert llm.values["version"] == "1.2.1"
    summary = last.derived_summary()["versions"]
    assert (summary["trtllm"], summary["templates"]) == ("1.2.1", "TensorRT-LLM v1.2.1")
    # The example scripts sit where the release keeps them; our own steps and the tools on PATH do not move.
    examples = [
        step for step in last.build.steps if step.argv[:2] != ("python3", "-m") and step.argv[0] == "python3"
    ]
    scripts = [step.argv[1] for step in examples]
    assert scripts, "no example script in the plan"
    for script in scripts:
        assert script.startswith(versions.TRTLLM_EXAMPLES_DIR + "/"), script
        relative = script.removeprefix(versions.TRTLLM_EXAMPLES_DIR + "/")
        moved = relative.split("/")[0] not in versions.ENGINE_RELEASES["1.2.1"].moved_examples
        assert moved, f"{relative} is still at its 0.19.0 place"
    assert [s.argv[2:] for s in last.build.steps] == [s.argv[2:] for s in default.build.steps]
    assert [s.argv[0] for s in last.build.steps] == [s.argv[0] for s in default.build.steps]


def test_the_converters_move_as_the_reference_workflow_lists_them() -> None:
    last = versions.ENGINE_RELEASES["1.2.1"]
    root = versions.TRTLLM_EXAMPLES_DIR
    assert last.example("opt/convert_checkpoint.py") == f"{root}/models/contrib/opt/convert_checkpoint.py"
    assert last.example("llama/convert_checkpoint.py") == f"{root}/models/core/llama/convert_checkpoint.py"
    assert last.example("multimodal/build_multimodal_engine.py") == (
        f"{root}/models/core/multimodal/build_multimodal_engine.py"
    )
    assert last.example("hf_lora_convert.py") == f"{root}/hf_lora_convert.py"
    assert last.example("quantization/quantize.py") == f"{root}/quantization/quantize.py"
    assert versions.DEFAULT_ENGINE_RELEASE.example("opt/convert_checkpoint.py") == (
        f"{root}/opt/convert_checkpoint.py"
    )


@pytest.mark.parametrize("example", ["llava", "internlm_xcomposer2", "whisper"])
def test_the_last_release_renders_its_names_and_nothing_else_changes(example: str) -> None:
    default, last = _plan(example, None), _plan(example, "1.2.1")
    for model, text in last.repository.configs.items():
        before = default.repository.configs[model].replace(default.cache_key, last.cache_key)
        for old, new in RENAMED.items():
            assert f'"{old}"' not in text, f"{model} still names {old}"
            before = before.replace(f'"{old}"', f'"{new}"')
        if model == "preprocessing" and "multimodal_model_path" in text:
            assert 'key: "hf_model_path"' in text
            text = text.replace(_parameter(text, "hf_model_path"), "")
        assert text == before, f"{model} differs beyond the renames"
    carriers = [m for m in CARRIERS if m in last.repository.configs]
    assert carriers and all('name: "min_tokens"' in last.repository.configs[m] for m in carriers)


def _parameter(text: str, key: str) -> str:
    start = text.index(f'parameters {{\n  key: "{key}"')
    return text[start : text.index("}\n}\n", start) + 4]


def test_the_release_field_is_refused_on_trtllm_serve() -> None:
    spec = {
        "runtime": "trtllm-serve",
        "model": {"type": "qwen2_vl", "source": {"huggingface": {"repo": "Qwen/Qwen2-VL-7B-Instruct"}}},
        "engine": {"tensorrtLlmVersion": "1.2.1"},
    }
    with pytest.raises(
        Exception, match=r"engine.tensorrtLlmVersion \(1.2.1\) has no meaning on runtime trtllm-serve"
    ):
        parse_spec(spec)


@pytest.mark.parametrize("release", sorted(versions.ENGINE_RELEASES))
def test_the_builder_stand_in_lays_every_example_a_plan_runs_where_its_release_keeps_it(
    release: str, tmp_path: Path
) -> None:
    examples = tmp_path / "examples"
    install_examples(examples, release)
    for example in EXAMPLE_PATHS:
        if _refused(example.stem, release):
            continue
        plan = _plan(example.stem, release)
        for step in plan.build.steps:
            if step.argv[0] == "python3" and step.argv[1] != "-m":
                laid = examples / step.argv[1].removeprefix(versions.TRTLLM_EXAMPLES_DIR + "/")
                assert laid.is_symlink(), f"{example.stem} at {release}: {step.argv[1]} is not laid out"
