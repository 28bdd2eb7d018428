"""Does it fit: the checkpoint's context, the capability a precision needs, the memory estimate per GPU kind.

The estimate's figures are pinned against published ones where they exist (NVIDIA's KV-cache arithmetic
for a Llama-2-7B language model, the model cards' parameter counts); docs/resource.md has the table.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from mmd_operator.api.validation import InvalidSpecError
from mmd_operator.facts import GpuKind
from mmd_operator.plan.fit import GIB, Fit, KindOffer, fit
from mmd_operator.plan.resource_plan import AnyPlan, plan_resource
from mmd_operator.plan.triton import TritonPlan
from tests.support.bad_inputs import document, serve_document

L4 = KindOffer(GpuKind("NVIDIA-L4", "8.9"), 23034)
A100_40 = KindOffer(GpuKind("NVIDIA-A100-SXM4-40GB", "8.0"), 40960)
H100 = KindOffer(GpuKind("NVIDIA-H100-80GB-HBM3", "9.0"), 81559)
T4 = KindOffer(GpuKind("Tesla-T4", "7.5"), 15360)


def _plan(base: str, engine: dict[str, Any] | None = None, **spec: Any) -> AnyPlan:
    return plan_resource(document("fit", base, {"spec": {"engine": engine or {}, **spec}}))[1]


def _memory(plan: AnyPlan) -> Any:
    assert plan.gpu_needs.memory is not None
    return plan.gpu_needs.memory


def test_the_issue_s_oversize_llava_is_refused_for_its_context_with_both_numbers() -> None:
    with pytest.raises(InvalidSpecError) as refused:
        _plan("llava", {"maxBatchSize": 2048, "maxInputLen": 131072, "maxSeqLen": 262144})
    (problem,) = refused.value.problems
    assert problem.path == "spec.engine.maxSeqLen"
    assert "is 262144, beyond the 4096 positions of llava-hf/llava-1.5-7b-hf" in problem.message
    assert "set at most 4096" in problem.message


def test_a_checkpoint_the_knowledge_does_not_know_is_not_held_to_the_reference_s_context() -> None:
    source = {"source": {"huggingface": {"repo": "example/llava-long-context"}}}
    plan = _plan("llava", {"maxInputLen": 8192, "maxSeqLen": 16384}, model=source)
    memory = _memory(plan)
    assert (memory.known.checkpoint, memory.known.own) == ("llava-hf/llava-1.5-7b-hf", False)


def test_trtllm_serve_refuses_a_max_seq_len_beyond_the_checkpoint_s_context() -> None:
    body = serve_document(
        "fit", "llava_next", "llava-hf/llava-v1.6-vicuna-7b-hf", {"spec": {"engine": {"maxSeqLen": 8192}}}
    )
    with pytest.raises(
        InvalidSpecError,
        match=re.escape("is 8192, beyond the 4096 positions of llava-hf/llava-v1.6-vicuna-7b-hf"),
    ):
        plan_resource(body)


def test_llava_s_kv_cache_is_nvidia_s_published_half_a_mebibyte_per_token() -> None:
    # NVIDIA's "Mastering LLM Techniques: Inference Optimization": a Llama 2 7B sequence of 4096 tokens at
    # 16 bits holds 2 x 32 layers x 4096 x 2 bytes per token, about 2 GB of KV cache.
    memory = _memory(_plan("llava", {"maxInputLen": 2048, "maxSeqLen": 4096}))
    assert memory.kv_per_sequence == 4096 * 2 * 32 * 4096 * 2 == 2 * GIB
    assert memory.weights == 7.06e9 * 2  # the model card's 7.06 B parameters at float16


def test_tensor_parallel_ranks_share_the_weights_and_the_kv_heads() -> None:
    one, two = _memory(_plan("llava")), _memory(_plan("llava", {"tensorParallelSize": 2}))
    assert two.weights * 2 == one.weights
    assert two.kv_per_sequence * 2 == one.kv_per_sequence


def test_whisper_counts_its_decoder_and_the_encoder_positions_it_attends() -> None:
    memory = _memory(_plan("whisper"))
    per_token = 2 * 32 * 20 * 64 * 2  # large-v3's decoder: 32 layers, 20 heads of 64
    assert memory.kv_per_sequence == per_token * (114 + 1500)
    assert memory.weights == 1.55e9 * 2


def test_a_model_that_fits_no_kind_is_refused_with_every_figure() -> None:
    verdict = fit(_plan("qwen2_vl").gpu_needs, [T4])
    assert verdict.refusal is not None
    field, message = verdict.refusal
    assert field == "spec.engine"
    assert "Tesla-T4 (compute capability 7.5) has 15.0 GiB per GPU and the model needs 17.3 GiB" in message
    assert "weights 15.4 GiB (8.29 B parameters at float16 over 1 rank(s))" in message
    assert "raise spec.engine.tensorParallelSize" in message


def test_kinds_that_cannot_hold_it_are_named_beside_one_that_can() -> None:
    verdict = fit(_plan("qwen2_vl").gpu_needs, [T4, H100])
    assert verdict.refusal is None
    ((field, warning),) = verdict.warnings
    assert field == "spec.engine"
    assert warning.startswith("Tesla-T4 (compute capability 7.5) has 15.0 GiB")


def test_a_batch_the_kv_cache_cannot_hold_whole_is_a_warning_with_the_count() -> None:
    verdict = fit(_plan("llava").gpu_needs, [L4])
    ((field, warning),) = verdict.warnings
    assert field == "spec.engine.maxBatchSize"
    assert warning.startswith("on NVIDIA-L4 (compute capability 8.9) (22.5 GiB per GPU)")
    assert "the KV cache holds 5 of 8 sequences of 2560 tokens" in warning
    assert fit(_plan("llava").gpu_needs, [H100]) == Fit()


@pytest.mark.parametrize(
    ("engine", "offer", "field", "said"),
    [
        (
            {"kvCacheDtype": "fp8", "calibrationSize": 64},
            A100_40,
            "spec.engine.kvCacheDtype",
            "kvCacheDtype fp8 needs compute capability 8.9",
        ),
        ({"dtype": "bfloat16"}, T4, "spec.engine.dtype", "dtype bfloat16 needs compute capability 8.0"),
    ],
)
def test_a_precision_the_kind_cannot_run_is_refused_for_it(
    engine: dict[str, Any], offer: KindOffer, field: str, said: str
) -> None:
    plan = _plan("llava", engine)
    verdict = fit(plan.gpu_needs, [offer])
    assert verdict.refusal is not None
    assert verdict.refusal[0] == field
    assert said in verdict.refusal[1]
    assert "place the pods on a kind of GPU that has it" in verdict.refusal[1]
    assert fit(plan.gpu_needs, [H100]).refusal is None


def test_figures_of_the_reference_only_warn() -> None:
    source = {"source": {"huggingface": {"repo": "example/some-llava-finetune"}}}
    verdict = fit(_plan("llava", model=source).gpu_needs, [T4])
    assert verdict.refusal is None
    ((_, warning),) = verdict.warnings
    assert "(figures of the reference checkpoint llava-hf/llava-1.5-7b-hf)" in warning


def test_a_kind_without_a_memory_label_is_weighed_for_capability_only() -> None:
    plan = _plan("llava")
    assert isinstance(plan, TritonPlan)
    assert fit(plan.gpu_needs, [KindOffer(GpuKind("NVIDIA-L4", "8.9"), None)]) == Fit()
