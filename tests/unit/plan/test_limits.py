"""Derivation of build limits and serving sizes, per model type."""

from __future__ import annotations

from typing import Any

import pytest

from mmd_operator.api.validation import parse_spec
from mmd_operator.plan.limits import (
    BASE_POOL_BYTES,
    MIB,
    REFERENCE_POOL_BYTES,
    MemoryPool,
    cuda_memory_pool_bytes,
    derive_limits,
)
from mmd_operator.plan.settings import resolve

SOURCE = {"huggingface": {"repo": "org/model"}}


def limits_of(
    model: dict[str, Any], engine: dict[str, Any] | None = None, serving: dict[str, Any] | None = None
):  # type: ignore[no-untyped-def]
    spec = parse_spec(
        {"model": {"source": SOURCE, **model}, "engine": engine or {}, "serving": serving or {}}
    )
    return derive_limits(spec)


def round_up_mib(size: int) -> int:
    return -(-size // MIB) * MIB


# model, engine overrides ->
#   (batch, input, seq, max_multimodal_len, vision batch, images, triton batch, encoder len)
TABLE = [
    ({"type": "blip2"}, {}, (8, 924, 1024, 256, 8, 1, 8, None)),
    ({"type": "llava"}, {}, (8, 2048, 2560, 4608, 8, 1, 8, None)),
    ({"type": "vila"}, {"maxImagesPerRequest": 4}, (8, 2048, 2560, 6272, 32, 4, 8, None)),
    ({"type": "llava_onevision"}, {}, (1, 7500, 7600, 7300, 16, 1, 1, None)),
    ({"type": "llava_onevision"}, {"maxBatchSize": 2, "vision": {"maxPatchesPerRequest": 8}},
     (2, 7500, 7600, 14600, 16, 1, 2, None)),
    ({"type": "mllama"}, {}, (8, 1024, 2048, None, 8, 1, 8, 6404)),
    ({"type": "qwen2_vl"}, {}, (4, 2048, 3072, 1296, 4, 1, 4, None)),
    ({"type": "internlm_xcomposer2", "lora": {"source": SOURCE}}, {},
     (48, 1536, 2048, 58800, 48, 1, 32, None)),
    ({"type": "whisper", "variant": "large-v3"}, {}, (64, 14, 114, None, None, None, 8, 3000)),
    ({"type": "distil_whisper", "variant": "distil-large-v3"}, {"maxBatchSize": 4},
     (4, 14, 114, None, None, None, 4, 3000)),
    ({"type": "llava"}, {"maxBatchSize": 16}, (16, 2048, 2560, 9216, 16, 1, 16, None)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "engine", "expected"), TABLE, ids=[f"{m['type']}-{i}" for i, (m, _, _) in enumerate(TABLE)]
)
def test_derivation_table(model: dict[str, Any], engine: dict[str, Any], expected: tuple[Any, ...]) -> None:
    limits = limits_of(model, engine)
    assert (
        limits.max_batch_size,
        limits.max_input_len,
        limits.max_seq_len,
        limits.max_multimodal_len,
        limits.vision_max_batch_size,
        limits.max_num_images,
        limits.triton_max_batch_size,
        limits.max_encoder_input_len,
    ) == expected


def test_max_multimodal_len_given_equal_to_the_derived_value_is_accepted() -> None:
    assert limits_of({"type": "llava"}, {"maxMultimodalLen": 4608}).max_multimodal_len == 4608


def pool_of(
    model: dict[str, Any], engine: dict[str, Any] | None = None, serving: dict[str, Any] | None = None
) -> MemoryPool:
    spec = parse_spec(
        {"model": {"source": SOURCE, **model}, "engine": engine or {}, "serving": serving or {}}
    )
    return resolve(spec).memory_pool


def test_the_pool_estimate_for_llava_is_two_prompt_tables_plus_tritons_default_pool() -> None:
    # fp16 (2 bytes) x 4608 rows x 4096 hidden, twice, plus 64 MiB.
    assert pool_of({"type": "llava"}).estimate == 2 * (2 * 4608 * 4096) + 64 * MIB


def test_the_estimate_grows_with_hidden_size_and_rounds_up_to_a_mebibyte() -> None:
    pool = cuda_memory_pool_bytes(
        prompt_table_rows=3, hidden_size=5, prompt_table_dtype="TYPE_FP16", encoder_feature_bytes=0
    )
    assert pool == BASE_POOL_BYTES + MIB
    assert pool_of({"type": "llava", "hiddenSize": 2048}).estimate < pool_of({"type": "llava"}).estimate


def test_the_estimate_counts_encoder_features_for_encoder_decoder_types() -> None:
    # mllama: BF16 x 6404 encoder tokens x 4096 hidden x Triton batch 8, twice.
    assert pool_of({"type": "mllama"}).estimate == round_up_mib(2 * (2 * 6404 * 4096 * 8) + 64 * MIB)
    # Whisper large-v3: FP16 x 3000 frames x 128 mel bins x Triton batch 8, twice, rounded up.
    whisper = pool_of({"type": "whisper", "variant": "large-v3"}).estimate
    assert whisper == round_up_mib(2 * (2 * 3000 * 128 * 8) + 64 * MIB)
    assert pool_of({"type": "whisper", "variant": "small"}).estimate < whisper


@pytest.mark.parametrize(
    "model",
    [
        {"type": "blip2"},
        {"type": "llava"},
        {"type": "vila"},
        {"type": "llava_onevision"},
        {"type": "qwen2_vl"},
        {"type": "whisper", "variant": "large-v3"},
        {"type": "distil_whisper", "variant": "distil-large-v3"},
    ],
    ids=lambda model: str(model["type"]),
)
def test_the_reference_pool_is_a_floor_where_the_unchecked_estimate_is_smaller(model: dict[str, Any]) -> None:
    pool = pool_of(model)
    assert pool.estimate < REFERENCE_POOL_BYTES == 300_000_000
    assert pool.size == limits_of(model).cuda_memory_pool_bytes == REFERENCE_POOL_BYTES
    assert "floor" in pool.basis and str(pool.estimate) in pool.basis


def test_an_estimate_above_the_floor_is_used() -> None:
    pool = pool_of({"type": "mllama"})
    assert pool.size == pool.estimate > REFERENCE_POOL_BYTES
    assert pool.basis.startswith("estimate")


def test_a_pool_the_user_sets_is_used_even_below_the_reference_floor() -> None:
    for size in (1 << 30, 150 * MIB):
        serving = {"cudaMemoryPoolBytes": size}
        pool = pool_of({"type": "llava"}, serving=serving)
        assert pool.size == limits_of({"type": "llava"}, serving=serving).cuda_memory_pool_bytes == size
        assert pool.basis.startswith("serving.cudaMemoryPoolBytes")


def test_triton_batch_defaults_to_the_engine_batch_capped_by_the_type_default() -> None:
    assert (
        limits_of({"type": "whisper", "variant": "large-v3"}, {"maxBatchSize": 4}).triton_max_batch_size == 4
    )
    assert limits_of({"type": "llava"}, serving={"tritonMaxBatchSize": 2}).triton_max_batch_size == 2


def test_whisper_builds_with_beam_width_4_but_serves_with_1() -> None:
    limits = limits_of({"type": "whisper", "variant": "large-v3"}, {"maxBeamWidth": 4})
    assert (limits.max_beam_width, limits.triton_max_beam_width) == (4, 1)
    assert limits_of({"type": "distil_whisper", "variant": "distil-large-v3"}).triton_max_beam_width == 1


def test_other_types_serve_the_engine_beam_width_unless_told_otherwise() -> None:
    assert limits_of({"type": "llava"}, {"maxBeamWidth": 2}).triton_max_beam_width == 2
    assert limits_of({"type": "llava"}, {"maxBeamWidth": 4}, {"maxBeamWidth": 2}).triton_max_beam_width == 2


def test_xcomposer2_serves_the_reference_triton_batch_under_its_engine_batch() -> None:
    limits = limits_of({"type": "internlm_xcomposer2", "lora": {"source": SOURCE}})
    assert (limits.max_batch_size, limits.triton_max_batch_size) == (48, 32)
