"""The MultimodalDeployment fields that become trtllm-serve LlmArgs refuse, at admission, every value the
pinned TorchLlmArgs refuses: their type is the real one and their bounds lie within the real bounds (the
trtllm-serve double's facts). The spec has no free-form pass-through of LLM API options, so nothing else of
the `--config` YAML comes from the user."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml

from mmd_operator.api.v1alpha1.serving import ServingSpec
from mmd_operator.api.v1alpha1.spec import EngineSpec
from mmd_operator.api.validation import InvalidSpecError
from mmd_operator.plan.resource_plan import plan_resource
from mmd_operator.plan.trtllm_serve import TrtllmServePlan
from mmd_testbed.trtllm_serve import config as serve_config
from mmd_testbed.trtllm_serve.facts import load
from tests.support.examples import SERVE_EXAMPLE_PATHS

# spec section, pydantic field, its camelCase name -> the LlmArgs class and field `llm_args` writes it to
SPEC_TO_LLM_ARGS = [
    (ServingSpec, "kv_cache_free_gpu_mem_fraction", "KvCacheConfig", "free_gpu_memory_fraction"),
    (ServingSpec, "max_tokens_in_paged_kv_cache", "KvCacheConfig", "max_tokens"),
    (ServingSpec, "chunked_context", "TorchLlmArgs", "enable_chunked_prefill"),
    (EngineSpec, "max_batch_size", "TorchLlmArgs", "max_batch_size"),
    (EngineSpec, "max_num_tokens", "TorchLlmArgs", "max_num_tokens"),
    (EngineSpec, "max_seq_len", "TorchLlmArgs", "max_seq_len"),
    (EngineSpec, "dtype", "TorchLlmArgs", "dtype"),
]
PYTHON_TYPES = {"bool": bool, "int": int, "float": float, "str": str}


def _bounds(metadata: list[Any]) -> dict[str, float]:
    return {name: getattr(m, name) for m in metadata for name in ("gt", "ge", "lt", "le") if hasattr(m, name)}


def _within(spec: dict[str, float], real: dict[str, float]) -> bool:
    """Whether every value the spec's bounds admit is one the real bounds admit."""
    if "ge" in real and not (
        ("ge" in spec and spec["ge"] >= real["ge"]) or ("gt" in spec and spec["gt"] >= real["ge"])
    ):
        return False
    if "gt" in real and not (
        ("gt" in spec and spec["gt"] >= real["gt"]) or ("ge" in spec and spec["ge"] > real["gt"])
    ):
        return False
    if "le" in real and not (
        ("le" in spec and spec["le"] <= real["le"]) or ("lt" in spec and spec["lt"] <= real["le"])
    ):
        return False
    return (
        "lt" not in real
        or ("lt" in spec and spec["lt"] <= real["lt"])
        or ("le" in spec and spec["le"] < real["lt"])
    )


def _types(annotation: Any) -> set[Any]:
    """The Python types an annotation admits besides None (a Literal's by its members)."""
    if get_origin(annotation) is Literal:
        return {type(member) for member in get_args(annotation)}
    if get_args(annotation):
        return {t for argument in get_args(annotation) for t in _types(argument)}
    return {annotation} - {type(None)}


def _scalar(described: dict[str, Any]) -> dict[str, Any]:
    return _scalar(described["of"]) if described["type"] == "optional" else described


@pytest.mark.parametrize(("section", "field", "llm_class", "llm_field"), SPEC_TO_LLM_ARGS)
def test_the_spec_admits_only_what_the_real_llm_args_take(
    section: Any, field: str, llm_class: str, llm_field: str
) -> None:
    described = load().llm_args.types[llm_class][llm_field]
    real_type = _scalar(described["type"])
    real_bounds = {
        **{k: real_type[k] for k in ("gt", "ge", "lt", "le") if k in real_type},
        **described.get("bounds", {}),
    }
    info = section.model_fields[field]
    assert PYTHON_TYPES[real_type["type"]] in _types(info.annotation), field
    assert _within(_bounds(info.metadata), real_bounds), (field, _bounds(info.metadata), real_bounds)


def _document(**serving: Any) -> dict[str, Any]:
    """A trtllm-serve example whose model type may chunk its prefill, with `serving` set."""
    documents = [yaml.safe_load(Path(path).read_text()) for path in SERVE_EXAMPLE_PATHS]
    document: dict[str, Any] = next(
        d for d in documents if d["spec"]["model"]["type"] in ("mistral3", "phi4mm")
    )
    document["spec"].setdefault("serving", {}).update(serving)
    return document


@pytest.mark.parametrize(("value", "words"), [(1.5, "less than or equal to 1"), ("maybe", "valid number")])
def test_a_fraction_trtllm_serve_refuses_is_refused_before_a_pod_starts(value: Any, words: str) -> None:
    with pytest.raises(InvalidSpecError) as refused:
        plan_resource(_document(kvCacheFreeGpuMemFraction=value))
    message = str(refused.value)
    assert "kvCacheFreeGpuMemFraction" in message and words in message and str(value) in message


def test_chunked_context_must_be_a_boolean() -> None:
    with pytest.raises(InvalidSpecError) as refused:
        plan_resource(_document(chunkedContext="maybe"))
    assert "chunkedContext" in str(refused.value) and "valid boolean" in str(refused.value)


def test_the_spec_at_its_bounds_renders_a_config_the_strict_double_takes(tmp_path: Path) -> None:
    _, plan = plan_resource(
        _document(kvCacheFreeGpuMemFraction=1, chunkedContext=True, maxTokensInPagedKvCache=1)
    )
    assert isinstance(plan, TrtllmServePlan)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(plan.config_yaml)
    applied = serve_config.load_config(str(config_file), serve_config.ArgsModels(load().llm_args))
    assert applied["kv_cache_config"]["free_gpu_memory_fraction"] == 1
