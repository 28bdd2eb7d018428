"""The offline ensemble-wiring check finds the mistakes Triton would find at load time."""

from __future__ import annotations

import pytest

from mmd_operator.api.validation import parse_spec
from mmd_operator.plan.repository_check import RepositoryError, check_repository
from mmd_operator.plan.resource_plan import plan_spec


def llava_configs() -> dict[str, str]:
    spec = parse_spec({"model": {"type": "llava", "source": {"huggingface": {"repo": "llava-hf/llava"}}}})
    return dict(plan_spec(spec).repository.configs)


def problems_after(model: str, old: str, new: str) -> list[str]:
    configs = llava_configs()
    assert old in configs[model], f"{old!r} not in {model}"
    configs[model] = configs[model].replace(old, new, 1)
    with pytest.raises(RepositoryError) as error:
        check_repository(configs)
    return error.value.problems


def test_the_rendered_repository_passes() -> None:
    assert set(check_repository(llava_configs())) == {
        "ensemble",
        "preprocessing",
        "multimodal_encoders",
        "tensorrt_llm",
        "postprocessing",
        "tensorrt_llm_bls",
    }


def test_unknown_step_tensor_is_found() -> None:
    problems = problems_after("ensemble", 'key: "QUERY"', 'key: "QUESTION"')
    assert any("'QUESTION' is not an input of preprocessing" in p for p in problems)
    assert any("required input 'QUERY' of preprocessing is not mapped" in p for p in problems)


def test_datatype_disagreement_is_found() -> None:
    problems = problems_after(
        "tensorrt_llm",
        'name: "input_ids"\n  data_type: TYPE_INT32',
        'name: "input_ids"\n  data_type: TYPE_INT64',
    )
    assert any("'_INPUT_ID' is TYPE_INT32" in p and "expects TYPE_INT64" in p for p in problems)


def test_shape_disagreement_is_found() -> None:
    declared = 'name: "SEQUENCE_LENGTH"\n  data_type: TYPE_INT32\n  dims: [ -1 ]'
    problems = problems_after("postprocessing", declared, declared.replace("[ -1 ]", "[ -1, 2 ]"))
    assert any("'_SEQUENCE_LENGTH'" in p and "expects TYPE_INT32[-1, 2]" in p for p in problems)


def test_tensor_used_before_it_is_produced_is_found() -> None:
    problems = problems_after(
        "ensemble", 'value: "_TOKENS_BATCH" }\n    output_map', 'value: "_TOKENS" }\n    output_map'
    )
    assert any("'_TOKENS_BATCH' is used before any step produces it" in p for p in problems)


def test_missing_model_and_unused_input_are_found() -> None:
    configs = llava_configs()
    del configs["postprocessing"]
    with pytest.raises(RepositoryError) as error:
        check_repository(configs)
    assert any("model 'postprocessing' is not in the repository" in p for p in error.value.problems)
    assert any("output 'text_output' is never produced" in p for p in error.value.problems)


def test_unparsable_config_names_the_file() -> None:
    configs = llava_configs()
    configs["preprocessing"] = configs["preprocessing"].replace("max_batch_size: 8", "max_batch_size: ${x}")
    with pytest.raises(RepositoryError) as error:
        check_repository(configs)
    assert error.value.problems[0].startswith("preprocessing/config.pbtxt:")
