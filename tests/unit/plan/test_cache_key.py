"""cacheKey properties: stable, and changed exactly by inputs that change the engine bytes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mmd_operator.api.validation import parse_spec
from mmd_operator.plan.build_plan import build_plan
from mmd_operator.plan.cache_key import CACHE_KEY_LENGTH, cache_key
from mmd_operator.plan.settings import resolve

Spec = dict[str, Any]


def key_of(spec: Spec) -> str:
    return cache_key(resolve(parse_spec(spec)))


@st.composite
def vision_specs(draw: st.DrawFn) -> Spec:
    model_type = draw(st.sampled_from(["llava", "vila", "qwen2_vl", "blip2"]))
    batch = draw(st.integers(1, 16))
    input_len = draw(st.integers(1500, 4000))
    return {
        "model": {
            "type": model_type,
            "source": {
                "huggingface": {
                    "repo": draw(st.sampled_from(["org/a", "org/b", "other/model-7b"])),
                    "revision": draw(st.text("0123456789abcdef", min_size=7, max_size=40)),
                }
            },
        },
        "engine": {
            "maxBatchSize": batch,
            "maxInputLen": input_len,
            "maxSeqLen": input_len + draw(st.integers(2, 2000)),
            "dtype": draw(st.sampled_from(["float16", "bfloat16"])),
            "tensorParallelSize": draw(st.sampled_from([1, 2, 4])),
        },
        "serving": {"replicas": draw(st.integers(0, 5))},
    }


def _set(path: str, value: Any) -> Callable[[Spec], None]:
    def mutate(spec: Spec) -> None:
        *parents, leaf = path.split(".")
        node = spec
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value

    return mutate


def _bump(path: str, delta: int = 1) -> Callable[[Spec], None]:
    def mutate(spec: Spec) -> None:
        *parents, leaf = path.split(".")
        node = spec
        for part in parents:
            node = node[part]
        node[leaf] += delta

    return mutate


ENGINE_CHANGES: dict[str, Callable[[Spec], None]] = {
    "repo": _set("model.source.huggingface.repo", "someone/else"),
    "revision": _set("model.source.huggingface.revision", "ffffffffffffffffffffffffffffffffffffffff0"),
    "source kind": lambda s: s["model"].__setitem__(
        "source", {"pvc": {"claimName": "models", "path": "llava"}}
    ),
    "batch": _bump("engine.maxBatchSize"),
    "input len": _bump("engine.maxInputLen"),
    "seq len": _bump("engine.maxSeqLen"),
    "beam": _set("engine.maxBeamWidth", 2),
    "num tokens": _set("engine.maxNumTokens", 12345),
    "tp": lambda s: s["engine"].__setitem__("tensorParallelSize", 8),
    "dtype": lambda s: s["engine"].__setitem__(
        "dtype", {"float16": "bfloat16", "bfloat16": "float16"}[s["engine"]["dtype"]]
    ),
    "builder image": _set("engine.builderImage", "registry.example/builder:other"),
    "weight only": _set("engine.weightOnlyPrecision", "int8"),
    "release": _set("engine.tensorrtLlmVersion", "1.2.1"),
}

SERVING_CHANGES: dict[str, Callable[[Spec], None]] = {
    "replicas": _bump("serving.replicas"),
    "streaming": _set("serving.streaming", True),
    "queue delay": _set("serving.queue.maxQueueDelayMicroseconds", 500),
    "instances": _set("serving.instances.preprocessing", 4),
    "kv fraction": _set("serving.kvCacheFreeGpuMemFraction", 0.5),
    "logits": _set("serving.logitsDatatype", "TYPE_FP16"),
    "serving image": _set("serving.image", "registry.example/triton:other"),
    "hidden size (pool only)": _set("model.hiddenSize", 1024),
    "token secret": _set("model.source.huggingface.tokenSecretRef", {"name": "hf", "key": "token"}),
    "calibration without fp8": _set("engine.calibrationSize", 64),
    "chunked context": _set("serving.chunkedContext", True),
}


@settings(max_examples=60, deadline=None)
@given(vision_specs())
def test_key_is_stable_and_a_valid_name(spec: Spec) -> None:
    key = key_of(spec)
    assert key == key_of(copy.deepcopy(spec))
    assert len(key) == CACHE_KEY_LENGTH
    assert all(c in "0123456789abcdef" for c in key)


@settings(max_examples=40, deadline=None)
@given(vision_specs(), st.sampled_from(sorted(ENGINE_CHANGES)))
def test_every_engine_input_changes_the_key(spec: Spec, change: str) -> None:
    changed = copy.deepcopy(spec)
    ENGINE_CHANGES[change](changed)
    assert key_of(changed) != key_of(spec), f"{change} did not change the key"


@settings(max_examples=40, deadline=None)
@given(vision_specs(), st.sampled_from(sorted(SERVING_CHANGES)))
def test_serving_only_changes_keep_the_key(spec: Spec, change: str) -> None:
    changed = copy.deepcopy(spec)
    SERVING_CHANGES[change](changed)
    assert key_of(changed) == key_of(spec), f"{change} changed the key"


def test_derived_limits_are_part_of_the_key() -> None:
    base: Spec = {"model": {"type": "vila", "source": {"huggingface": {"repo": "org/vila"}}}}
    more_images = copy.deepcopy(base)
    more_images["engine"] = {"maxImagesPerRequest": 4}
    # Only derived values (max_multimodal_len, vision batch) differ between these two.
    assert key_of(more_images) != key_of(base)


def test_spelling_out_a_default_keeps_the_key() -> None:
    implicit: Spec = {"model": {"type": "llava", "source": {"huggingface": {"repo": "org/llava"}}}}
    explicit = copy.deepcopy(implicit)
    explicit["engine"] = {"maxBatchSize": 8, "maxInputLen": 2048, "maxSeqLen": 2560, "maxMultimodalLen": 4608}
    explicit["model"]["source"]["huggingface"]["revision"] = "main"
    explicit["engine"]["tensorrtLlmVersion"] = "0.19.0"
    assert key_of(explicit) == key_of(implicit)


def test_fp8_and_its_calibration_change_the_key() -> None:
    base: Spec = {"model": {"type": "llava", "source": {"huggingface": {"repo": "org/llava"}}}}
    fp8 = copy.deepcopy(base)
    fp8["engine"] = {"kvCacheDtype": "fp8"}
    calibrated = copy.deepcopy(fp8)
    calibrated["engine"]["calibrationSize"] = 64
    assert len({key_of(base), key_of(fp8), key_of(calibrated)}) == 3


def test_lora_and_whisper_variant_change_the_key() -> None:
    lora: Spec = {
        "model": {
            "type": "internlm_xcomposer2",
            "source": {"huggingface": {"repo": "internlm/x"}},
            "lora": {"source": {"pvc": {"claimName": "a", "path": "one"}}},
        }
    }
    other_adapter = copy.deepcopy(lora)
    other_adapter["model"]["lora"]["source"]["pvc"]["path"] = "two"
    other_rank = copy.deepcopy(lora)
    other_rank["model"]["lora"]["maxRank"] = 64
    assert len({key_of(lora), key_of(other_adapter), key_of(other_rank)}) == 3
    whisper: Spec = {
        "model": {"type": "whisper", "variant": "large-v3", "source": {"huggingface": {"repo": "o/w"}}}
    }
    turbo = copy.deepcopy(whisper)
    turbo["model"]["variant"] = "large-v3-turbo"
    assert key_of(whisper) != key_of(turbo)


def test_keys_of_the_examples_are_pinned_by_the_golden_files() -> None:
    # The golden derived.json files hold every example's key; a format change shows up there as a diff.
    from pathlib import Path

    golden = Path(__file__).resolve().parents[2] / "golden"
    assert len(list(golden.glob("*/derived.json"))) >= 11


def test_kv_cache_reuse_pins_paged_context_fmha_in_the_build_and_the_key() -> None:
    reuse_off: Spec = {"model": {"type": "llava", "source": {"huggingface": {"repo": "org/llava"}}}}
    reuse_on = copy.deepcopy(reuse_off)
    reuse_on["serving"] = {"kvCacheReuse": True}
    assert key_of(reuse_on) != key_of(reuse_off)

    def build_llm(spec: Spec) -> tuple[tuple[str, ...], dict[str, bool | int | str]]:
        settings = resolve(parse_spec(spec))
        plan = build_plan(settings, cache_key=cache_key(settings))
        (step,) = [s for s in plan.steps if s.name == "build-llm"]
        (expected,) = [e.values for e in plan.expectations if e.config_path == "llm/config.json"]
        return tuple(step.argv), expected

    argv, expected = build_llm(reuse_on)
    assert argv[argv.index("--use_paged_context_fmha") + 1] == "enable"
    # trtllm-build may still turn it off by itself (an int8 KV cache, say): the built engine must show it.
    assert expected["build_config.plugin_config.use_paged_context_fmha"] is True
    argv, expected = build_llm(reuse_off)
    assert "--use_paged_context_fmha" not in argv
    assert "build_config.plugin_config.use_paged_context_fmha" not in expected
