#!/usr/bin/env python3
"""Test doubles for the GPU build image's tools, chosen by the name they are run under.

The fixture links this file as `trtllm-build` and `huggingface-cli` on PATH, and as every
TensorRT-LLM example script the plans name (`<examples>/llama/convert_checkpoint.py`, ...). Each double
parses its command line the way the real tool does (same flags, required ones, choices; unknown flags are
an error), checks its inputs exist, and writes the outputs the real tool writes, with the fields the
builder checks (engine `config.json`, `rank<N>.engine`, `model.engine`, ...), but a few bytes each.

Faults on demand, each naming a substring of the command line it applies to:
  DOUBLE_FAIL=<s>        print a traceback and exit 1
  DOUBLE_KILL=<s>        die by SIGKILL (as the OOM killer does)
  DOUBLE_NO_OUTPUT=<s>   exit 0 without writing anything
  DOUBLE_IGNORE_FLAG     trtllm-build ignores this flag (the engine then disagrees with the plan)
  DOUBLE_TRTLLM_VERSION  the version trtllm-build records (default: the builder's assumed one, else 0.19.0)
  DOUBLE_LEAK_TOKEN      huggingface-cli prints the token it was given (=1), or fails naming it (=fail);
                         the builder must redact it
  DOUBLE_SLEEP=<sec>     every tool sleeps first (widens the windows a kill can land in)
Every call is appended as one JSON line to $DOUBLE_CALL_LOG when set.

Knobs that travel with the (fake) weights, for the real-pod tier, where no environment reaches the build
pod: a model's `config.json` may hold `mmd_double` {"seconds_per_tool": s, "load_seconds": s,
"seconds_per_request": s}. The converters copy it into the checkpoint's config (and `trtllm-build` keeps
the checkpoint config in the engine's, as the real one does), each tool that reads such a config first
sleeps `seconds_per_tool`, and the serving double of the engine takes `load_seconds` to load it and
`seconds_per_request` on each request.

Standard library only: it runs under whatever `python3` is first on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MULTIMODAL_MODEL_TYPES = (
    "blip2", "llava", "llava_next", "llava_onevision", "llava_onevision_lmms", "vila", "nougat", "cogvlm",
    "fuyu", "pix2struct", "neva", "kosmos-2", "video-neva", "phi-3-vision", "phi-4-multimodal", "mllama",
    "internvl", "qwen2_vl", "internlm-xcomposer2", "qwen2_audio", "pixtral",
)  # fmt: skip
WHISPER_MODEL_NAMES = (
    "large-v3-turbo", "large-v3", "large-v2", "medium", "small", "base", "tiny", "medium.en", "small.en",
    "base.en", "tiny.en", "distil-large-v3", "distil-large-v2", "distil-medium.en", "distil-small.en",
)  # fmt: skip
ARCHITECTURES = {
    "opt": "OPTForCausalLM",
    "llama": "LlamaForCausalLM",
    "qwen": "QWenForCausalLM",
    "mllama": "MLLaMAForCausalLM",
    "internlm2": "InternLM2ForCausalLM",
}
DTYPES = ("float32", "bfloat16", "float16", "auto")
PLUGIN = ("auto", "float16", "float32", "bfloat16", "int32", "disable")
GATED_OWNERS = ("meta-llama",)


def die(message: str, code: int = 1) -> None:
    """Exit with `message` on stderr, as the real tool fails."""
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


def faults(tool: str, argv: list[str]) -> bool:
    """Apply the faults asked for; True when the tool must write nothing."""
    command = " ".join([tool, *argv])
    time.sleep(float(os.environ.get("DOUBLE_SLEEP", "0")))

    def hit(name: str) -> bool:
        return bool(os.environ.get(name)) and os.environ[name] in command

    if hit("DOUBLE_KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    if hit("DOUBLE_FAIL"):
        print(f"[TensorRT-LLM] running {tool}", flush=True)
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f'  File "{tool}", line 1, in <module>', file=sys.stderr)
        die(f"RuntimeError: [TensorRT-LLM][ERROR] {tool} failed on demand (test double)")
    return hit("DOUBLE_NO_OUTPUT")


KNOBS = "mmd_double"


def knobs_of(config: dict[str, object]) -> dict[str, object]:
    """The `mmd_double` knobs of a model or checkpoint config (empty when it has none)."""
    knobs = config.get(KNOBS)
    return dict(knobs) if isinstance(knobs, dict) else {}


def slow_down(knobs: dict[str, object]) -> None:
    """Sleep the `seconds_per_tool` a model's knobs ask for (a slower tool on bigger weights)."""
    seconds = knobs.get("seconds_per_tool", 0)
    time.sleep(float(seconds) if isinstance(seconds, (int, float)) else 0.0)


def write_json(path: Path, document: object) -> None:
    """Write `document` to `path` as indented JSON, making its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def read_json(path: Path, what: str) -> dict[str, object]:
    """The JSON object at `path`, or the real tool's error when it is missing."""
    if not path.is_file():
        die(f"OSError: {path} does not exist: {what}")
    document: dict[str, object] = json.loads(path.read_text())
    return document


def write_model_repo(local_dir: Path, repo: str) -> None:
    """What a Hugging Face model repository looks like after `huggingface-cli download`."""
    whisper = "whisper" in repo.lower()
    config: dict[str, object] = {"model_type": "whisper" if whisper else "llama", "_name_or_path": repo}
    if whisper:
        config["num_mel_bins"] = 128
    write_json(local_dir / "config.json", config)
    write_json(local_dir / "tokenizer_config.json", {"model_max_length": 4096})
    write_json(local_dir / "tokenizer.json", {"version": "1.0", "model": {"type": "BPE"}})
    write_json(local_dir / "special_tokens_map.json", {"eos_token": "</s>"})
    write_json(local_dir / "preprocessor_config.json", {"image_size": 336})
    write_json(
        local_dir / "model.safetensors.index.json", {"weight_map": {"lm_head.weight": "model-1.safetensors"}}
    )
    (local_dir / "tokenizer.model").write_bytes(b"sentencepiece model (double)")
    (local_dir / "merges.txt").write_text("#version: 0.2\nh e\n")
    (local_dir / "model-1.safetensors").write_bytes(b"\0" * 4096)
    (local_dir / "pytorch_model.bin").write_bytes(b"\0" * 1024)
    if "vila" in repo.lower():
        # VILA keeps its language model, tokenizer included, in a subdirectory.
        write_json(local_dir / "llm" / "config.json", {"model_type": "llama"})
        (local_dir / "llm" / "tokenizer.model").write_bytes(b"sentencepiece model (double)")
        (local_dir / "llm" / "model-1.safetensors").write_bytes(b"\0" * 2048)
    metadata = local_dir / ".cache" / "huggingface" / "download"
    metadata.mkdir(parents=True, exist_ok=True)
    (metadata / "config.json.metadata").write_text("0123abcd\n")


def write_lora_adapter(directory: Path) -> None:
    """A PEFT adapter directory as `hf_lora_convert.py` reads it."""
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj", "up_proj"]
    write_json(directory / "adapter_config.json", {"r": 256, "lora_alpha": 256, "target_modules": targets})
    (directory / "adapter_model.safetensors").write_bytes(b"\0" * 2048)


def huggingface_cli(argv: list[str]) -> None:
    """`huggingface-cli download`: a small checkpoint of the real layout."""
    parser = argparse.ArgumentParser(prog="huggingface-cli")
    commands = parser.add_subparsers(dest="command", required=True)
    download = commands.add_parser("download")
    download.add_argument("repo_id")
    download.add_argument("filenames", nargs="*")
    download.add_argument("--repo-type", choices=("model", "dataset", "space"), default="model")
    download.add_argument("--revision")
    download.add_argument("--include", nargs="*")
    download.add_argument("--exclude", nargs="*")
    download.add_argument("--cache-dir")
    download.add_argument("--local-dir")
    download.add_argument("--force-download", action="store_true")
    download.add_argument("--token")
    download.add_argument("--quiet", action="store_true")
    download.add_argument("--max-workers", type=int, default=8)
    args = parser.parse_args(argv)
    if args.repo_id.count("/") != 1:
        die(f"huggingface_hub.errors.HFValidationError: Repo id must be 'namespace/name': '{args.repo_id}'")
    token = args.token or os.environ.get("HF_TOKEN")
    if os.environ.get("DOUBLE_LEAK_TOKEN") == "fail":
        die(f"huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized: invalid token {token}")
    if os.environ.get("DOUBLE_LEAK_TOKEN"):
        print(f"using token {token}", flush=True)
    if args.repo_id.split("/")[0] in GATED_OWNERS and not token:
        die(
            f"huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url "
            f"https://huggingface.co/{args.repo_id}/resolve/{args.revision}/config.json."
        )
    if faults("huggingface-cli", argv):
        return
    local_dir = Path(args.local_dir or args.repo_id.split("/")[1])
    print(f"Fetching 11 files from {args.repo_id}@{args.revision or 'main'}", flush=True)
    write_model_repo(local_dir, args.repo_id)
    print(local_dir.resolve())


def convert_checkpoint(family: str, argv: list[str]) -> None:
    """`<family>/convert_checkpoint.py`: a TensorRT-LLM checkpoint of the real layout."""
    parser = argparse.ArgumentParser(prog=f"{family}/convert_checkpoint.py")
    parser.add_argument("--model_dir", default="assets" if family == "whisper" else None)
    parser.add_argument("--output_dir", default="tllm_checkpoint")
    parser.add_argument("--dtype", choices=DTYPES, default="float16")
    parser.add_argument("--tp_size", type=int, default=1)
    parser.add_argument("--pp_size", type=int, default=1)
    parser.add_argument("--use_weight_only", action="store_true")
    parser.add_argument("--weight_only_precision", choices=("int8", "int4", "int4_gptq"), default="int8")
    if family == "opt":
        parser.add_argument("--model_type", choices=("opt", "blip2"), default="opt")
    if family == "whisper":
        parser.add_argument("--model_name", choices=WHISPER_MODEL_NAMES, default="large-v3")
    args = parser.parse_args(argv)
    if args.model_dir is None:
        die("AssertionError: --model_dir is required")
    model_dir = Path(args.model_dir)
    if family == "whisper":
        if not (model_dir / f"{args.model_name}.pt").is_file():
            die(f"FileNotFoundError: [Errno 2] No such file or directory: '{model_dir / args.model_name}.pt'")
        knobs: dict[str, object] = {}
    else:
        knobs = knobs_of(read_json(model_dir / "config.json", "not a Hugging Face model directory"))
    slow_down(knobs)
    if faults(f"{family}/convert_checkpoint.py", argv):
        return
    world = args.tp_size * args.pp_size
    mapping = {"world_size": world, "tp_size": args.tp_size, "pp_size": args.pp_size}
    quant = {"quant_algo": "W8A16" if args.use_weight_only else None, "kv_cache_quant_algo": None}
    output = Path(args.output_dir)
    parts = (
        {"encoder": "WhisperEncoder", "decoder": "DecoderModel"}
        if family == "whisper"
        else {"": ARCHITECTURES[family]}
    )
    for part, architecture in parts.items():
        config = {
            "architecture": architecture,
            "dtype": args.dtype,
            "mapping": mapping,
            "quantization": quant,
            **({KNOBS: knobs} if knobs else {}),
        }
        write_json(output / part / "config.json", config)
        for rank in range(world):
            (output / part / f"rank{rank}.safetensors").write_bytes(b"\0" * 512)
    print(f"Total time of converting checkpoints: 00:00:01 ({family}, {world} rank(s))")


def quantize(argv: list[str]) -> None:
    """`quantization/quantize.py`: a quantized checkpoint of the real layout."""
    parser = argparse.ArgumentParser(prog="quantization/quantize.py")
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument(
        "--qformat",
        choices=("fp8", "int8_sq", "int4_awq", "w4a8_awq", "int8_wo", "int4_wo", "full_prec"),
        default="full_prec",
    )
    parser.add_argument("--kv_cache_dtype", choices=("int8", "fp8"))
    parser.add_argument("--output_dir", default="exported_model")
    parser.add_argument("--calib_size", type=int, default=512)
    parser.add_argument("--calib_dataset", default="cnn_dailymail")
    parser.add_argument("--tp_size", type=int, default=1)
    parser.add_argument("--pp_size", type=int, default=1)
    args = parser.parse_args(argv)
    knobs = knobs_of(read_json(Path(args.model_dir) / "config.json", "not a Hugging Face model directory"))
    slow_down(knobs)
    if args.calib_size <= 0:
        die(f"ValueError: calib_size must be positive, got {args.calib_size}")
    if faults("quantization/quantize.py", argv):
        return
    print(f"Calibrating with {args.calib_size} samples of {args.calib_dataset}", flush=True)
    world = args.tp_size * args.pp_size
    config = {
        "architecture": "LlamaForCausalLM",
        "dtype": "float16" if args.dtype == "auto" else args.dtype,
        "mapping": {"world_size": world, "tp_size": args.tp_size, "pp_size": args.pp_size},
        "quantization": {
            "quant_algo": args.qformat.upper(),
            "kv_cache_quant_algo": (args.kv_cache_dtype or "").upper() or None,
        },
        **({KNOBS: knobs} if knobs else {}),
    }
    output = Path(args.output_dir)
    write_json(output / "config.json", config)
    for rank in range(world):
        (output / f"rank{rank}.safetensors").write_bytes(b"\0" * 512)


def trtllm_build(argv: list[str], version: str | None = None) -> None:
    """`trtllm-build`: an engine directory whose config.json records the build's limits and `version`.

    Without `version`, the environment's (see the top of this module).
    """
    parser = argparse.ArgumentParser(prog="trtllm-build")
    parser.add_argument("--checkpoint_dir")
    parser.add_argument("--output_dir", default="engine_outputs")
    parser.add_argument("--workers", type=int, default=1)
    for plugin in (
        "gemm_plugin",
        "gpt_attention_plugin",
        "bert_attention_plugin",
        "moe_plugin",
        "lora_plugin",
    ):
        parser.add_argument(f"--{plugin}", choices=PLUGIN)
    # A PluginConfig switch of 0.19 (enabled by default): KV-cache reuse and chunked context need it.
    parser.add_argument("--use_paged_context_fmha", choices=("enable", "disable"), default="enable")
    parser.add_argument("--max_batch_size", type=int, default=2048)
    parser.add_argument("--max_input_len", type=int, default=1024)
    parser.add_argument("--max_seq_len", type=int)
    parser.add_argument("--max_beam_width", type=int, default=1)
    parser.add_argument("--max_num_tokens", type=int, default=8192)
    parser.add_argument("--max_prompt_embedding_table_size", "--max_multimodal_len", type=int, default=0)
    parser.add_argument("--max_encoder_input_len", type=int, default=1024)
    parser.add_argument("--lora_dir", nargs="+")
    parser.add_argument("--max_lora_rank", type=int, default=64)
    # What the executor reads back from the engine: its effective max input length depends on these.
    for feature in ("context_fmha", "remove_input_padding"):
        parser.add_argument(f"--{feature}", choices=("enable", "disable"), default="enable")
    for logits in ("gather_context_logits", "gather_generation_logits", "gather_all_token_logits"):
        parser.add_argument(f"--{logits}", action="store_true")
    args = parser.parse_args(_drop_flag(argv, os.environ.get("DOUBLE_IGNORE_FLAG", "")))
    if args.checkpoint_dir is None:
        die("ValueError: --checkpoint_dir is required")
    checkpoint = read_json(Path(args.checkpoint_dir) / "config.json", "not a TensorRT-LLM checkpoint")
    slow_down(knobs_of(checkpoint))
    max_seq_len = args.max_seq_len or args.max_input_len + 1024
    if args.max_input_len > max_seq_len:
        die(f"ValueError: max_input_len ({args.max_input_len}) must not exceed max_seq_len ({max_seq_len})")
    for number in ("max_batch_size", "max_input_len", "max_beam_width", "max_num_tokens"):
        if getattr(args, number) <= 0:
            die(f"ValueError: --{number} must be positive")
    if args.lora_plugin not in (None, "disable") and not args.lora_dir:
        die("ValueError: lora_plugin needs --lora_dir")
    for directory in args.lora_dir or ():
        read_json(Path(directory) / "adapter_config.json", "not a LoRA adapter directory")
    if faults("trtllm-build", argv):
        return
    mapping = checkpoint["mapping"]
    assert isinstance(mapping, dict)
    paged_context_fmha = args.use_paged_context_fmha == "enable" and _paged_context_fmha_kept(checkpoint)
    plugins = ("gemm_plugin", "gpt_attention_plugin", "bert_attention_plugin", "moe_plugin", "lora_plugin")
    config = {
        # The builder image's release: the real trtllm-build records its own version.
        "version": version
        or os.environ.get("DOUBLE_TRTLLM_VERSION")
        or os.environ.get("ENGINE_BUILDER_ASSUME_TRTLLM_VERSION", "0.19.0"),
        "pretrained_config": checkpoint,
        "build_config": {
            "max_input_len": args.max_input_len,
            "max_seq_len": max_seq_len,
            "opt_batch_size": None,
            "max_batch_size": args.max_batch_size,
            "max_beam_width": args.max_beam_width,
            "max_num_tokens": args.max_num_tokens,
            "opt_num_tokens": None,
            "max_prompt_embedding_table_size": args.max_prompt_embedding_table_size,
            "max_encoder_input_len": args.max_encoder_input_len,
            "gather_context_logits": args.gather_context_logits or args.gather_all_token_logits,
            "gather_generation_logits": args.gather_generation_logits or args.gather_all_token_logits,
            "lora_config": {"lora_dir": args.lora_dir or [], "max_lora_rank": args.max_lora_rank},
            "plugin_config": {
                **{name: getattr(args, name) or "auto" for name in plugins},
                "context_fmha": args.context_fmha == "enable",
                "remove_input_padding": args.remove_input_padding == "enable",
                "use_paged_context_fmha": paged_context_fmha,
            },
        },
    }
    output = Path(args.output_dir)
    write_json(output / "config.json", config)
    for rank in range(int(mapping["world_size"])):
        print(f"[TensorRT-LLM] [I] Engine generation completed for rank {rank}", flush=True)
        (output / f"rank{rank}.engine").write_bytes(b"TRT engine (double) rank %d\n" % rank)


def _paged_context_fmha_kept(checkpoint: Mapping[str, Any]) -> bool:
    """Whether trtllm-build keeps paged context FMHA for this checkpoint's KV cache, as its build() does.

    Its other cases (context FMHA off; FP8 KV before compute capability 8.9) need what no plan asks for.
    """
    quantization = checkpoint.get("quantization") or {}
    kv_cache = quantization.get("kv_cache_quant_algo")
    if kv_cache == "INT8":
        print(
            "[TensorRT-LLM] [W] Paged Context FMHA is disabled because it doesn't work with int8 kv cache "
            "currently."
        )
        return False
    if kv_cache == "FP8" and quantization.get("quant_algo") not in ("FP8", "W4A8_AWQ", "NVFP4"):
        # (Its own words for this case were not read; these are the double's.)
        print(
            "[TensorRT-LLM] [W] Paged Context FMHA is disabled: an FP8 KV cache without FP8 weights (double)."
        )
        return False
    return True


def _drop_flag(argv: list[str], flag: str) -> list[str]:
    if flag not in argv:
        return argv
    index = argv.index(flag)
    return argv[:index] + argv[index + 2 :]


def build_multimodal_engine(argv: list[str]) -> None:
    """`multimodal/build_multimodal_engine.py`: the vision or audio encoder's engine files."""
    parser = argparse.ArgumentParser(prog="multimodal/build_multimodal_engine.py")
    parser.add_argument("--model_type", choices=MULTIMODAL_MODEL_TYPES, default=None)
    parser.add_argument("--model_path", default=None)
    parser.add_argument("--vila_path", default=None)
    parser.add_argument("--output_dir", default=None)
    parser.add_argument("--max_batch_size", type=int, default=4)
    parser.add_argument("--max_hw_dims", type=int, default=5184)
    parser.add_argument("--min_hw_dims", type=int, default=128)
    parser.add_argument("--num_mul_bins", type=int, default=128)
    parser.add_argument("--max_mel_seq_len", type=int, default=3000)
    args = parser.parse_args(argv)
    if args.model_type is None or args.model_path is None:
        die("AssertionError: --model_type and --model_path are required")
    read_json(Path(args.model_path) / "config.json", "not a Hugging Face model directory")
    if args.model_type == "vila" and not args.vila_path:
        die("ModuleNotFoundError: No module named 'llava' (VILA needs --vila_path)")
    if faults("multimodal/build_multimodal_engine.py", argv):
        return
    output = Path(args.output_dir or f"tmp/trt_engines/{Path(args.model_path).name}/multimodal_encoder")
    recorded = "blip2-opt" if args.model_type == "blip2" else args.model_type
    config = {
        "builder_config": {
            "precision": "bfloat16" if args.model_type == "mllama" else "float16",
            "model_type": recorded,
            "max_batch_size": args.max_batch_size,
            "model_name": "multiModal",
            "output_shape": [args.max_batch_size, 576, 4096],
            "strongly_typed": False,
        }
    }
    write_json(output / "config.json", config)
    (output / "model.engine").write_bytes(b"TRT vision engine (double)\n")
    if args.model_type in ("llava_next", "llava_onevision"):
        (output / "image_newlines.safetensors").write_bytes(b"\0" * 64)
    print(f"Succesfully built {args.model_type} engine in {output}")


def hf_lora_convert(argv: list[str]) -> None:
    """`hf_lora_convert.py`: a LoRA adapter in TensorRT-LLM's numpy layout."""
    parser = argparse.ArgumentParser(prog="hf_lora_convert.py")
    parser.add_argument("-i", "--in-file", required=True)
    parser.add_argument("-o", "--out-dir", required=True)
    parser.add_argument("-t", "--storage-type", choices=("float32", "float16", "bfloat16"), default="float16")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    adapter = Path(args.in_file)
    read_json(adapter / "adapter_config.json", "not a PEFT adapter directory")
    if not any((adapter / name).is_file() for name in ("adapter_model.bin", "adapter_model.safetensors")):
        die(f"FileNotFoundError: {adapter} has no adapter_model.bin or adapter_model.safetensors")
    if faults("hf_lora_convert.py", argv):
        return
    output = Path(args.out_dir)
    output.mkdir(parents=True, exist_ok=True)
    (output / "model.lora_weights.npy").write_bytes(b"\x93NUMPY (double) weights")
    (output / "model.lora_config.npy").write_bytes(b"\x93NUMPY (double) config")


def convert_from_distil_whisper(argv: list[str]) -> None:
    """`whisper/distil_whisper/convert_from_distil_whisper.py`: a Whisper checkpoint of the real layout."""
    parser = argparse.ArgumentParser(prog="whisper/distil_whisper/convert_from_distil_whisper.py")
    parser.add_argument("--model_name", default="distil-whisper/distil-large-v2")
    parser.add_argument("--output_dir", default="assets")
    parser.add_argument("--output_name", default="distil-large-v2")
    args = parser.parse_args(argv)
    config = read_json(Path(args.model_name) / "config.json", "not a Hugging Face Whisper directory")
    if config.get("model_type") != "whisper":
        die(f"ValueError: {args.model_name} is a {config.get('model_type')} model, not whisper")
    if faults("whisper/distil_whisper/convert_from_distil_whisper.py", argv):
        return
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    (output / f"{args.output_name}.pt").write_bytes(b"openai whisper checkpoint (double)")


def main() -> None:
    """Run the tool this file was invoked as (its link's name)."""
    invoked = Path(sys.argv[0])
    argv = sys.argv[1:]
    if os.environ.get("DOUBLE_CALL_LOG"):
        with open(os.environ["DOUBLE_CALL_LOG"], "a") as log:
            tool = "/".join(invoked.parts[-2:]) if invoked.suffix == ".py" else invoked.name
            record = {"tool": tool, "argv": argv, "hf_token_seen": "HF_TOKEN" in os.environ}
            log.write(json.dumps(record) + "\n")
    if invoked.name == "trtllm-build":
        trtllm_build(argv)
    elif invoked.name == "huggingface-cli":
        huggingface_cli(argv)
    elif invoked.name == "hf_lora_convert.py":
        hf_lora_convert(argv)
    elif invoked.parts[-2:] == ("quantization", "quantize.py"):
        quantize(argv)
    elif invoked.parts[-2:] == ("multimodal", "build_multimodal_engine.py"):
        build_multimodal_engine(argv)
    elif invoked.parts[-2:] == ("distil_whisper", "convert_from_distil_whisper.py"):
        convert_from_distil_whisper(argv)
    elif invoked.name == "convert_checkpoint.py" and invoked.parent.name in (*ARCHITECTURES, "whisper"):
        convert_checkpoint(invoked.parent.name, argv)
    else:
        die(f"no test double for {invoked}")


if __name__ == "__main__":
    main()
