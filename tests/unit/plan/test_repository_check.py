"""The offline ensemble-wiring check finds the mistakes Triton would find at load time."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from google.protobuf import text_format

from mmd_operator.api.validation import parse_spec
from mmd_operator.plan import repository_check
from mmd_operator.plan.repository_check import (
    RepositoryError,
    check_repository,
    model_config_class,
    parse_config,
)
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


GOLDEN_CONFIGS = sorted(Path(__file__).parents[2].joinpath("golden").rglob("config.pbtxt"))


@pytest.mark.parametrize("path", GOLDEN_CONFIGS, ids=lambda path: "/".join(path.parts[-4:-1]))
def test_parsing_by_statement_reads_every_rendered_config_as_protobuf_does(path: Path) -> None:
    text = path.read_text()
    whole = text_format.Parse(text, model_config_class()())
    assert repository_check._parse_by_statement(text) == whole  # the statements' parses, remembered
    assert repository_check._parse_by_statement(text) == whole  # and taken from memory


def test_a_singular_field_set_twice_is_refused_as_protobuf_refuses_it() -> None:
    text = 'name: "tensorrt_llm"\nmax_batch_size: 8\ninput {\n  name: "x"\n}\nmax_batch_size: 0\n'
    with pytest.raises(RepositoryError, match=r'tensorrt_llm/config.pbtxt: 6:17 .*multiple "max_batch_size"'):
        parse_config("tensorrt_llm", text)


def test_a_line_of_two_fields_is_parsed_whole() -> None:
    text = 'name: "m" max_batch_size: 4\nmax_batch_size: 8\n'
    with pytest.raises(RepositoryError, match='multiple "max_batch_size"'):
        parse_config("m", text)
    assert parse_config("m", 'name: "m" max_batch_size: 8\n').max_batch_size == 8


def test_workers_planning_at_once_share_one_descriptor_pool() -> None:
    # The operator's first plans run on several workers at once; statements parsed by one are merged
    # into another's config, which only works when both use the same pool's ModelConfig class.
    configs = llava_configs()
    repository_check._made_pool.cache_clear()
    repository_check._statements.clear()
    start = threading.Barrier(8)

    def check() -> None:
        start.wait()
        check_repository(configs)

    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(check) for _ in range(8)]:
            future.result()
    assert len({type(parsed) for parsed in check_repository(configs).values()}) == 1
