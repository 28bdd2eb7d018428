"""The command lines the reference workflow (tensorrtllm_backend docs, TensorRT-LLM READMEs) documents.

For each example: the script of each step and the flags the documentation passes. Our build plan must
pass every one of them with the same value (it may add flags, e.g. limits the docs leave to defaults).
"""

from __future__ import annotations

from collections.abc import Sequence

# example -> step name -> (program or script suffix, documented flags)
REFERENCE_ARGV: dict[str, dict[str, tuple[str, str]]] = {
    "blip2": {
        "convert-checkpoint": ("opt/convert_checkpoint.py", "--model_type blip2 --dtype float16"),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin float16 --max_beam_width 1 --max_batch_size 8 --max_seq_len 1024 "
            "--max_input_len 924 --max_multimodal_len 256",
        ),
        "build-vision-engine": (
            "multimodal/build_multimodal_engine.py",
            "--model_type blip2 --max_batch_size 8",
        ),
    },
    "llava": {
        "convert-checkpoint": ("llama/convert_checkpoint.py", "--dtype float16"),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin float16 --max_batch_size 8 --max_input_len 2048 --max_seq_len 2560 "
            "--max_multimodal_len 4608",
        ),
        "build-vision-engine": (
            "multimodal/build_multimodal_engine.py",
            "--model_type llava --max_batch_size 8",
        ),
    },
    "vila": {
        "convert-checkpoint": ("llama/convert_checkpoint.py", "--dtype float16"),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin float16 --max_batch_size 8 --max_input_len 2048 --max_seq_len 2560 "
            "--max_multimodal_len 6272",
        ),
        "build-vision-engine": (
            "multimodal/build_multimodal_engine.py",
            "--model_type vila --max_batch_size 32",
        ),
    },
    "llava_onevision": {
        "convert-checkpoint": ("qwen/convert_checkpoint.py", "--dtype float16"),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin float16 --max_batch_size 1 --max_input_len 7500 --max_seq_len 7600 "
            "--max_multimodal_len 7300",
        ),
        "build-vision-engine": (
            "multimodal/build_multimodal_engine.py",
            "--model_type llava_onevision --max_batch_size 16",
        ),
    },
    "mllama": {
        "convert-checkpoint": ("mllama/convert_checkpoint.py", "--dtype bfloat16"),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin auto --max_batch_size 8 --max_seq_len 2048 --max_num_tokens 4096 "
            "--max_encoder_input_len 6404",
        ),
        "build-vision-engine": (
            "multimodal/build_multimodal_engine.py",
            "--model_type mllama --max_batch_size 8",
        ),
    },
    "qwen2_vl": {
        "convert-checkpoint": ("qwen/convert_checkpoint.py", "--dtype float16"),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin float16 --gpt_attention_plugin float16 --max_batch_size 4 --max_input_len 2048 "
            "--max_seq_len 3072 --max_multimodal_len 1296",
        ),
        "build-vision-engine": ("multimodal/build_multimodal_engine.py", "--model_type qwen2_vl"),
    },
    "internlm_xcomposer2": {
        "convert-checkpoint": ("internlm2/convert_checkpoint.py", "--dtype float16"),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin float16 --lora_plugin float16 --max_lora_rank 256 --max_input_len 1536 "
            "--max_batch_size 48 --max_multimodal_len 58800",
        ),
        # The ViT plan comes from the fork's recipe, run by our step (tests/unit/plan/test_build_plan.py).
        "convert-lora": ("hf_lora_convert.py", "--storage-type float16"),
    },
    "whisper": {
        "convert-checkpoint": ("whisper/convert_checkpoint.py", "--model_name large-v3"),
        "build-encoder": (
            "trtllm-build",
            "--moe_plugin disable --max_batch_size 64 --gemm_plugin disable --bert_attention_plugin float16 "
            "--max_input_len 3000 --max_seq_len 3000",
        ),
        "build-decoder": (
            "trtllm-build",
            "--moe_plugin disable --max_beam_width 4 --max_batch_size 64 --max_seq_len 114 "
            "--max_input_len 14 --max_encoder_input_len 3000 --gemm_plugin float16 "
            "--bert_attention_plugin float16 --gpt_attention_plugin float16",
        ),
    },
    "distil_whisper": {
        "convert-to-openai-format": (
            "whisper/distil_whisper/convert_from_distil_whisper.py",
            "--output_name distil-large-v3",
        ),
        "convert-checkpoint": ("whisper/convert_checkpoint.py", "--model_name distil-large-v3"),
    },
    "llava-tp2-fp8": {
        "quantize-checkpoint": (
            "quantization/quantize.py",
            "--qformat fp8 --kv_cache_dtype fp8 --calib_size 512 --tp_size 2",
        ),
        "build-llm": (
            "trtllm-build",
            "--gemm_plugin auto --max_batch_size 8 --max_input_len 2048 --max_seq_len 2560 "
            "--max_multimodal_len 4608",
        ),
    },
}


def flag_values(argv: Sequence[str]) -> dict[str, str | None]:
    """`--flag value` pairs of an argv (a flag followed by another flag has the value None)."""
    values: dict[str, str | None] = {}
    for index, token in enumerate(argv):
        if token.startswith("-") and not token.lstrip("-").isdigit():
            following = argv[index + 1] if index + 1 < len(argv) else None
            is_value = following is not None and not (
                following.startswith("-") and not following.lstrip("-").isdigit()
            )
            values[token] = following if is_value else None
    return values
