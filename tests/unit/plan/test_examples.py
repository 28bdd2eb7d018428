"""Every example renders; its output is pinned by golden files (`make generate` rewrites them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import text_format

from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifest_files
from mmd_operator.knowledge import KNOWLEDGE, Runtime, types_of
from mmd_operator.plan import model_repository
from mmd_operator.plan.repository_check import check_repository, model_config_class
from mmd_operator.plan.resource_plan import plan_resource
from tests.support.examples import ALL_EXAMPLE_PATHS, EXAMPLES_DIR, plan_any_example
from tests.support.examples import EXAMPLE_PATHS as EXAMPLES
from tests.support.examples import plan_example as load_and_plan

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden"


def example_id(path: Path) -> str:
    return path.stem


@pytest.fixture(params=EXAMPLES, ids=example_id)
def example(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


def test_every_model_type_of_every_runtime_has_an_example() -> None:
    # The README and docs/resource.md promise one resource per model type under examples/, on each
    # runtime that serves it; a type added to a knowledge table without one fails here.
    served = set()
    for path in ALL_EXAMPLE_PATHS:
        spec = yaml.safe_load(path.read_text())["spec"]
        served.add((Runtime(spec.get("runtime", Runtime.TRITON_TRTLLM_ENGINE)), spec["model"]["type"]))
    wanted = {(runtime, model_type) for runtime in Runtime for model_type in types_of(runtime)}
    assert sorted(wanted - served) == []
    assert {"llava-tp2-fp8", "internlm-xcomposer2-lora"} <= {path.stem for path in EXAMPLES}


def rendered_files(example: Path) -> dict[str, str]:
    """What `mmctl render` writes for `example`: the plan's files and the operator's manifests."""
    resource, plan = plan_any_example(example)
    manifests = manifest_files(resource, plan, config=OperatorConfig())
    return {**plan.files(), **{f"manifests/{name}": text for name, text in manifests.items()}}


@pytest.mark.parametrize("any_example", ALL_EXAMPLE_PATHS, ids=example_id)
def test_rendered_files_match_golden(any_example: Path, request: pytest.FixtureRequest) -> None:
    example = any_example
    files = rendered_files(example)
    golden_dir = GOLDEN / example.stem
    if request.config.getoption("--update-golden"):
        for stale in sorted(golden_dir.rglob("*"), reverse=True) if golden_dir.exists() else []:
            stale.unlink() if stale.is_file() else stale.rmdir()
        for relative, content in files.items():
            target = golden_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        pytest.skip("golden files rewritten")
    expected = {str(p.relative_to(golden_dir)): p.read_text() for p in golden_dir.rglob("*") if p.is_file()}
    assert sorted(files) == sorted(expected), "set of rendered files changed; run `make generate`"
    for relative, content in files.items():
        assert content == expected[relative], (
            f"{relative} differs from golden; run `make generate` and review"
        )


def test_every_rendered_config_parses_with_tritons_own_proto(example: Path) -> None:
    _, plan = load_and_plan(example)
    for name, text in plan.repository.configs.items():
        config = text_format.Parse(text, model_config_class()())
        assert config.name == name
        assert "${" not in text and "{{" not in text
    for model in plan.repository.configs:
        assert f"{model}/1/.keep" in plan.repository.files(), f"{model} has no version directory"


def test_ensemble_wiring_is_consistent(example: Path) -> None:
    _, plan = load_and_plan(example)
    models = check_repository(plan.repository.configs)
    assert models


def _configs(stem: str) -> dict[str, Any]:
    _, plan = load_and_plan(stem)
    return {
        name: text_format.Parse(text, model_config_class()())
        for name, text in plan.repository.configs.items()
    }


def _parameters(config: Any) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def _derived(stem: str) -> dict[str, object]:
    _, plan = load_and_plan(stem)
    summary: dict[str, object] = json.loads(plan.files()["derived.json"])
    return summary


@pytest.mark.parametrize(
    ("stem", "max_multimodal_len", "vision_batch"),
    [("llava", 4608, 8), ("vila", 6272, 32), ("blip2", 256, 8), ("qwen2_vl", 1296, 4)],
)
def test_acceptance_multimodal_lengths(stem: str, max_multimodal_len: int, vision_batch: int) -> None:
    derived = _derived(stem)
    assert derived["max_multimodal_len"] == max_multimodal_len
    assert derived["vision_max_batch_size"] == vision_batch


def test_mllama_has_no_prompt_table_and_renders_bf16_encoder_inputs_with_cross_fraction() -> None:
    assert "max_multimodal_len" not in _derived("mllama")
    configs = _configs("mllama")
    data_types = model_config_class().DESCRIPTOR.file.enum_types_by_name["DataType"]
    bf16 = data_types.values_by_name["TYPE_BF16"].number
    encoder_features = next(t for t in configs["tensorrt_llm"].input if t.name == "encoder_input_features")
    assert encoder_features.data_type == bf16
    produced = next(t for t in configs["multimodal_encoders"].output if t.name == "ENCODER_INPUT_FEATURES")
    assert produced.data_type == bf16
    assert _parameters(configs["tensorrt_llm"])["cross_kv_cache_fraction"] == "0.5"


@pytest.mark.parametrize(
    "stem", ["blip2", "llava", "vila", "llava_onevision", "qwen2_vl", "internlm_xcomposer2"]
)
def test_decoder_only_models_render_no_cross_kv_cache_fraction(stem: str) -> None:
    parameters = _parameters(_configs(stem)["tensorrt_llm"])
    assert "cross_kv_cache_fraction" not in parameters
    assert parameters["enable_kv_cache_reuse"] in {"true", "false"}, "reuse must always be explicit"


def test_whisper_large_v3_renders_128_mel_bins_and_an_encoder_decoder_engine() -> None:
    configs = _configs("whisper")
    assert _parameters(configs["whisper_bls"])["n_mels"] == "128"
    parameters = _parameters(configs["tensorrt_llm"])
    assert parameters["cross_kv_cache_fraction"] == "0.5"
    assert parameters["encoder_model_path"].endswith("/encoder")
    assert parameters["gpt_model_path"].endswith("/llm")


def test_whisper_serves_beam_width_1_from_an_engine_built_for_4() -> None:
    for stem in ("whisper", "distil_whisper"):
        _, plan = load_and_plan(stem)
        build = next(step for step in plan.build.steps if step.name == "build-decoder")
        assert build.argv[build.argv.index("--max_beam_width") + 1] == "4"
        assert _parameters(_configs(stem)["tensorrt_llm"])["max_beam_width"] == "1"


def test_the_xcomposer2_example_renders_the_reference_triton_batch_32() -> None:
    configs = _configs("internlm_xcomposer2")
    assert {name: config.max_batch_size for name, config in configs.items()} == dict.fromkeys(configs, 32)


def test_tp2_fp8_example_streams_with_chunked_context() -> None:
    configs = _configs("llava-tp2-fp8")
    assert configs["tensorrt_llm"].model_transaction_policy.decoupled
    assert configs["tensorrt_llm_bls"].model_transaction_policy.decoupled
    parameters = _parameters(configs["tensorrt_llm"])
    assert parameters["enable_chunked_context"] == "true"
    assert parameters["kv_cache_free_gpu_mem_fraction"] == "0.9"


def test_xcomposer2_renders_the_lora_cache_and_lora_inputs() -> None:
    configs = _configs("internlm-xcomposer2-lora")
    parameters = _parameters(configs["tensorrt_llm"])
    assert parameters["lora_cache_optimal_adapter_size"] == "256"
    assert parameters["lora_cache_max_adapter_size"] == "256"
    assert parameters["lora_cache_gpu_memory_fraction"] == "0.3"
    assert parameters["lora_cache_host_memory_bytes"] == "2147483648"
    ensemble_inputs = {t.name for t in configs["ensemble"].input}
    assert {"lora_task_id", "lora_weights", "lora_config", "image_input"} <= ensemble_inputs
    assert "multimodal_encoders" not in configs
    assert _parameters(configs["preprocessing"])["vit_model_dir"].endswith("/encoder/visual_encoder.engine")
    assert configs["ensemble"].max_batch_size == 32


@pytest.mark.parametrize(
    ("stem", "inputs"),
    [
        ("llava", {"image_input"}),
        ("blip2", {"image_input"}),
        ("vila", {"image_input"}),
        ("mllama", {"image_bytes_input"}),
        ("qwen2_vl", {"image_bytes_input"}),
        ("llava_onevision", {"image_bytes_input", "video_bytes_input"}),
    ],
)
def test_ensemble_declares_only_the_image_inputs_the_type_decodes(stem: str, inputs: set[str]) -> None:
    declared = {t.name for t in _configs(stem)["ensemble"].input}
    image_inputs = {"image_input", "image_bytes_input", "image_url_input", "video_bytes_input"}
    assert declared & image_inputs == inputs


def _declared_url_inputs(stem: str, image_url_input: bool) -> dict[str, set[str]]:
    """Per model directory, which URL inputs it declares (ensemble and BLS: image_url_input;
    preprocessing: IMAGE_URL), with `serving.imageUrlInput` set as given."""
    document = yaml.safe_load((EXAMPLES_DIR / f"{stem}.yaml").read_text())
    document["spec"].setdefault("serving", {})["imageUrlInput"] = image_url_input
    _, plan = plan_resource(document)
    declared = {}
    for name, text in plan.repository.configs.items():
        config = text_format.Parse(text, model_config_class()())
        declared[name] = {t.name for t in config.input} & {"image_url_input", "IMAGE_URL"}
        assert "image_url_input" not in text or image_url_input, name  # nor in an ensemble step's map
    return declared


@pytest.mark.parametrize("stem", ["llava_onevision", "mllama", "qwen2_vl"])
def test_image_url_input_is_declared_only_when_the_spec_allows_it(stem: str) -> None:
    assert not any(_declared_url_inputs(stem, False).values())
    declared = _declared_url_inputs(stem, True)
    assert declared["ensemble"] == {"image_url_input"}
    assert declared["preprocessing"] == {"IMAGE_URL"}
    if "tensorrt_llm_bls" in declared:
        assert declared["tensorrt_llm_bls"] == {"image_url_input"}


@pytest.mark.parametrize("stem", ["llava", "blip2", "vila", "internlm_xcomposer2"])
def test_types_without_server_side_images_declare_no_url_input(stem: str) -> None:
    assert not any(_declared_url_inputs(stem, False).values())


@pytest.mark.parametrize(
    ("stem", "accepted"),
    [
        # The reference ensemble takes it for every type; with KV-cache reuse off it changes nothing.
        ("blip2", True),
        ("llava", True),
        ("vila", True),
        ("llava_onevision", True),
        ("mllama", True),
        # Its v0.19.0 preprocessing fails on the id; the fork's ensemble has no such input.
        ("qwen2_vl", False),
        ("internlm_xcomposer2", False),
    ],
)
def test_prompt_table_extra_id_is_an_input_wherever_the_reference_preprocessing_takes_it(
    stem: str, accepted: bool
) -> None:
    configs = _configs(stem)
    entry_points = [name for name in ("ensemble", "tensorrt_llm_bls") if name in configs]
    for name in entry_points:
        assert ("prompt_table_extra_id" in {t.name for t in configs[name].input}) is accepted, name
    mapped = any(
        step.input_map.get("PROMPT_TABLE_EXTRA_ID") == "prompt_table_extra_id"
        for step in configs["ensemble"].ensemble_scheduling.step
    )
    assert mapped is accepted


def test_kv_cache_reuse_only_where_requests_can_name_their_image() -> None:
    for knowledge in KNOWLEDGE.values():
        assert knowledge.prompt_table_extra_id or not knowledge.kv_cache_reuse, knowledge.model_type


def test_preprocessing_max_num_images_matches_the_build() -> None:
    assert _parameters(_configs("vila")["preprocessing"])["max_num_images"] == "4"


@pytest.mark.parametrize("example", EXAMPLES, ids=example_id)
def test_decoupled_mode_follows_streaming(example: Path) -> None:
    _, plan = load_and_plan(example)
    streaming = plan.settings.spec.serving.streaming
    for name, text in plan.repository.configs.items():
        config = text_format.Parse(text, model_config_class()())
        if config.HasField("model_transaction_policy"):
            assert config.model_transaction_policy.decoupled == streaming, name


def test_bls_is_rendered_only_where_it_can_serve_the_type() -> None:
    assert "tensorrt_llm_bls" in _configs("llava")
    assert "tensorrt_llm_bls" not in _configs("internlm_xcomposer2")
    assert "tensorrt_llm_bls" not in _configs("whisper")


def test_no_template_macro_is_shadowed_by_a_context_value() -> None:
    # A context value named like a macro silently replaces it (or the reverse) inside templates.
    macros = {
        name
        for name in dir(model_repository._ENVIRONMENT.get_template("_macros.j2").module)
        if not name.startswith("_")
    }
    _, plan = load_and_plan(EXAMPLES[0])
    context = model_repository.render_context(plan.settings, cache_key=plan.cache_key)
    assert macros and not macros & set(context)
