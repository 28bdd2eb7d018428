"""What the TensorRT-LLM backend (tensorrtllm_backend v0.19.0, C++) and executor (0.19.0) refuse, and how.

The `tensorrt_llm` double (`engine`) runs these checks in the real order, and a refusal reaches the client
as the real one does (docs/development/request-validation.md has the rule table and the sources):

- while the backend converts a Triton request (`utils.cc` createRequestsFromInputTensors, the executor's
  `SamplingConfig` and `Request` constructors) the exception text itself (`conversion_refusal`);
- once the executor fetches the request (`LlmRequest::validate` and `fetchNewRequests`) or runs a step
  (`forwardAsync`): `Executor failed process requestId <id> due to the following error: ...`
  (`fetch_refusal`, `forward_refusal`).

`TLLM_CHECK` texts carry `[TensorRT-LLM][ERROR] Assertion failed: `; the real ones end with
` (<file>:<line>)` and a stack, which are build-specific and left out. `Limits` is what the executor reads
from the engines' own `config.json` (written by the build doubles) and the model's parameters.
Imports only the standard library: it runs inside the Python backend stub.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ASSERTION = "[TensorRT-LLM][ERROR] Assertion failed: "
FETCHING = "Encountered an error when fetching new request: "
FORWARD = "Encountered an error in forwardAsync function: "
K_MAX_BEAM_WIDTH = 256  # tensorrt_llm::kernels::kMaxBeamWidth
# The guide types the backend maps (utils.cc getGuidedDecodingParamsFromTensors); others are dropped.
GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")
# Parameters the backend reads at load outside any fallback (model_instance_state.cc, the guided decoding
# config): a config without one of them does not load.
LOAD_PARAMETERS = ("tokenizer_dir", "xgrammar_tokenizer_info_path", "guided_decoding_backend")
# SamplingConfig's constructor checks, in its order (samplingConfig.cpp): the input, the condition, and
# the text TLLM_CHECK prints. top_p <= 0 never gets there: the backend unsets it (utils.cc:560-563).
_SAMPLING: tuple[tuple[str, Callable[[float], bool], str], ...] = (
    ("runtime_top_k", lambda v: v >= 0, "topK.value() >= 0"),
    ("runtime_top_p", lambda v: v <= 1, "topP.value() <= 1.f"),
    ("runtime_top_p_min", lambda v: v >= 0, "topPMin.value() >= 0.f"),
    ("runtime_top_p_min", lambda v: v <= 1, "topPMin.value() <= 1.f"),
    ("runtime_top_p_reset_ids", lambda v: v >= 0, "topPResetIds.value() >= 0"),
    ("runtime_top_p_decay", lambda v: v > 0, "topPDecay.value() > 0.f"),
    ("runtime_top_p_decay", lambda v: v <= 1, "topPDecay.value() <= 1.f"),
    ("temperature", lambda v: v >= 0, "temperature.value() >= 0.f"),
    ("min_length", lambda v: v >= 0, "minTokens.value() >= 0"),
    ("beam_search_diversity_rate", lambda v: v >= 0, "beamSearchDiversityRate.value() >= 0.f"),
    ("repetition_penalty", lambda v: v > 0, "repetitionpenalty.value() > 0.f"),
    ("len_penalty", lambda v: v >= 0, "lengthPenalty.value() >= 0.f"),
    ("early_stopping", lambda v: v >= 0, "earlyStopping.value() >= 0"),
    ("num_return_sequences", lambda v: v > 0, "numReturnSequences.value() > 0"),
)
SAMPLING_INPUTS = tuple(dict.fromkeys(name for name, _, _ in _SAMPLING))


def engine_release_refusal(built: str, release: Mapping[str, Any]) -> str:
    """TensorRT's words when the engine of another release is loaded: its TensorRT checks the plan first.

    `release` is the served release's facts (`repository.release_facts`); `built` the engine's
    TensorRT-LLM version, from its config.json.
    """
    theirs = release["tensorrt_of"].get(built, f"that of TensorRT-LLM {built}")
    return (
        "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file is not "
        f"compatible with this version of TensorRT, expecting library version {release['tensorrt']} got "
        f"{theirs}, please rebuild.)"
    )


def parameter_bool(params: Mapping[str, str], name: str, default: bool) -> bool:
    """A boolean parameter as the backend reads it (model_state.cc GetParameter<bool>).

    Anything it cannot parse, `${...}` included, leaves the default.
    """
    value = params.get(name)
    if value in ("True", "true", "TRUE", "1"):
        return True
    if value in ("False", "false", "FALSE", "0"):
        return False
    return default


def parameter_int(params: Mapping[str, str], name: str, default: int) -> int:
    """An integer parameter as the backend reads it (std::stoi; unparsable leaves the default)."""
    value = (params.get(name) or "").strip()
    digits = len(value) - len(value.lstrip("+-0123456789")) if value else 0
    try:
        return int(value[:digits]) if digits else default
    except ValueError:
        return default


def engine_config(spec: Mapping[str, Any], parameter: str) -> dict[str, Any] | None:
    """The `config.json` of the engine directory parameter `parameter` names, or None.

    `spec["engine_dirs"]` maps the engine cache entry the configs name onto a local copy (the triton tier);
    without one the path is read as it is (a real pod, where the cache volume is mounted).
    """
    path = str(spec.get("parameters", {}).get(parameter) or "")
    if not path.startswith("/"):
        return None
    for mounted, local in spec.get("engine_dirs", {}).items():
        if path == mounted or path.startswith(mounted + "/"):
            path = local + path[len(mounted) :]
    try:
        config: dict[str, Any] = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config


@dataclass(frozen=True)
class Limits:
    """What the executor takes from the engines and the parameters (trtGptModel.h, trtEncoderModel.cpp)."""

    max_input_len: int
    max_seq_len: int
    engine_max_beam_width: int
    max_encoder_input_len: int | None
    gather_context_logits: bool
    gather_generation_logits: bool

    @classmethod
    def read(cls, llm: Mapping[str, Any], encoder: Mapping[str, Any] | None, chunked: bool) -> Limits:
        """The limits of a decoder engine's config (and the encoder engine's, for Whisper).

        The effective max input length is TRTGptModel's: max_seq_len - 1 with chunked context; else, with
        context FMHA and packed input (the builder's defaults), min(max_seq_len - 1, max_num_tokens); else
        the build's max_input_len. The encoder's is its build's max_input_len.
        """
        build = llm["build_config"]
        plugins = build.get("plugin_config", {})
        max_seq_len = int(build["max_seq_len"])
        if chunked:
            max_input_len = max_seq_len - 1
        elif plugins.get("context_fmha", True) and plugins.get("remove_input_padding", True):
            max_input_len = min(max_seq_len - 1, int(build["max_num_tokens"]))
        else:
            max_input_len = int(build["max_input_len"])
        return cls(
            max_input_len=max_input_len,
            max_seq_len=max_seq_len,
            engine_max_beam_width=int(build.get("max_beam_width", 1)),
            max_encoder_input_len=int(encoder["build_config"]["max_input_len"]) if encoder else None,
            gather_context_logits=bool(build.get("gather_context_logits", False)),
            gather_generation_logits=bool(build.get("gather_generation_logits", False)),
        )


@dataclass
class Item:
    """One batch item as the backend made an executor request of it."""

    prompt_len: int
    max_new_tokens: int
    beam_width: int
    sampling: dict[str, float]  # the sampling inputs that arrived, by tensor name
    words: list[list[int]]  # the bad and stop words lists that arrived, each flattened
    streaming: bool = False
    prompt_table: bool = False
    extra_ids: bool = False  # whether extra ids arrived with the prompt's length (others are dropped)
    encoder_len: int | None = None
    context_logits: bool = False
    generation_logits: bool = False
    guided: bool = False
    draft_tokens: int = 0
    lora_weights: bool = False
    lora_config: bool = False


def word_list_refusal(flat: Sequence[int]) -> str | None:
    """utils.cc convertWordList's refusal of a flattened [2, n] stop or bad words list, if any."""
    shown = "".join(f"{v} " for v in flat)
    if len(flat) % 2:
        return f"{ASSERTION}Sparse list must not have odd length: {shown}"
    half = len(flat) // 2
    for i in range(half, len(flat)):
        if flat[i] == -1:
            if any(v != -1 for v in flat[i + 1 :]):
                return f"{ASSERTION}Sparse list must not have additional -1s: {shown}"
            break
        if flat[i] > half:
            return f"{ASSERTION}Sparse list must not have out-of-bound offsets: {shown}"
        if i != half and flat[i] <= flat[i - 1]:
            return f"{ASSERTION}Sparse list must not have non-increasing offsets: {shown}"
    return None


def conversion_refusal(item: Item, present: Sequence[str]) -> str | None:
    """What the backend's conversion refuses in one item (utils.cc createRequestsFromInputTensors).

    `present` names the inputs that arrived. In order: the SamplingConfig constructor, the bad and stop
    words lists, the LoRA config, the lookahead config, then executor::Request's own validate().
    """
    width = item.beam_width
    if not 0 < width <= K_MAX_BEAM_WIDTH:
        return (
            f"{ASSERTION}beamWidth > 0 && beamWidth <= "
            "static_cast<SizeType32 const>(tensorrt_llm::kernels::kMaxBeamWidth)"
        )
    for name, holds, condition in _SAMPLING:
        if name in item.sampling and not holds(item.sampling[name]):
            return ASSERTION + condition
    sequences = item.sampling.get("num_return_sequences")
    if sequences is not None and width != 1 and sequences > width:
        return f"{ASSERTION}beamWidth == 1 || numReturnSequences.value() <= beamWidth"
    for words in item.words:
        refusal = word_list_refusal(words)
        if refusal:
            return refusal
    if item.lora_weights and not item.lora_config:
        return f"{ASSERTION}Request for LoRA inference with lora weights must also have lora config"
    if "lookahead_window_size" in present:
        for name in ("lookahead_ngram_size", "lookahead_verification_set_size"):
            if name not in present:
                return f"Failed to extract {name}"
        # No rendered config sets decoding_mode to lookahead, so the model has no lookahead parameters.
        return (
            f"{ASSERTION}Cannot set the request lookahead decoding configuration when model instance "
            "lookahead parameters are not set."
        )
    if item.prompt_len == 0:
        return f"{ASSERTION}!mInputTokenIds.empty()"
    if item.max_new_tokens <= 0:
        return f"{ASSERTION}mMaxNewTokens > 0"
    return None


@dataclass(frozen=True)
class Serving:
    """The model's parameters the executor's fetch-time checks read."""

    kv_cache_reuse: bool
    max_utilization: bool
    chunked_context: bool
    guided_decoder: bool

    @classmethod
    def read(cls, params: Mapping[str, str]) -> Serving:
        """From the tensorrt_llm parameters, with the backend's defaults (reuse on when unset in v0.19.0)."""
        backend = (params.get("guided_decoding_backend") or "").strip()
        info = (params.get("xgrammar_tokenizer_info_path") or "").strip()
        return cls(
            kv_cache_reuse=parameter_bool(params, "enable_kv_cache_reuse", True),
            max_utilization=params.get("batch_scheduler_policy") == "max_utilization",
            chunked_context=parameter_bool(params, "enable_chunked_context", False),
            guided_decoder=bool(backend and info and "${" not in backend + info),
        )


def fetch_refusal(item: Item, limits: Limits | None, serving: Serving) -> str | None:
    """What fetchNewRequests refuses, LlmRequest::validate first; clamps `item.max_new_tokens` (T17).

    Without the engine's config (`limits` None) only the checks that need no engine are made.
    """
    if limits is not None:
        encoder_max = limits.max_encoder_input_len
        if encoder_max is not None and item.encoder_len is not None and item.encoder_len > encoder_max:
            return (
                f"{ASSERTION}Encoder length ({item.encoder_len}) exceeds maximum encoder input length "
                f"({encoder_max})."
            )
        if item.prompt_len > limits.max_input_len:
            return (
                f"Prompt length ({item.prompt_len}) exceeds maximum input length ({limits.max_input_len}). "
                "Set log level to info and check TRTGptModel logs for how maximum input length is set"
            )
        if item.draft_tokens > 0:  # no rendered engine is built for speculative decoding: max draft len 0
            return f"Draft tokens length ({item.draft_tokens}) exceeds maximum draft tokens length (0)."
        if item.prompt_len + item.max_new_tokens > limits.max_seq_len:
            item.max_new_tokens = limits.max_seq_len - item.prompt_len  # a warning, not a refusal
    # validate() then checks the extra ids' length too, but the backend has already dropped any whose
    # length differs from the prompt's (utils.cc:669-680), so only their absence is ever refused.
    if serving.kv_cache_reuse and item.prompt_table and not item.extra_ids:
        return (
            f"{ASSERTION}Input token extra ids must be provided when enabling kv cache reuse with "
            "prompt table"
        )
    if limits is not None and limits.max_encoder_input_len is not None and serving.max_utilization:
        return (
            f"{ASSERTION}Encoder or Encoder-Decoder model don't support max utilization scheduler yet. "
            "Only max requests or guaranteed no evict."
        )
    evicts = serving.max_utilization and not serving.chunked_context
    if (
        limits
        and item.streaming
        and evicts
        and item.prompt_len + item.max_new_tokens - 1 > limits.max_input_len
    ):
        return (
            f"{ASSERTION}Request sequence length is potentially greater than max input length. This "
            "cannot be run unless streaming is disabled, context chunking is enabled or the "
            "GUARANTEED_NO_EVICT scheduling policy is used"
        )
    if item.context_logits and not (limits and limits.gather_context_logits):
        return f"{ASSERTION}Return context logit need to build engine with gather_context_logits"
    if item.generation_logits and not (limits and limits.gather_generation_logits):
        return (
            f"{ASSERTION}To return generation logits, gather_generation_logits must be enabled in "
            "ExecutorConfig"
        )
    if item.guided and not serving.guided_decoder:
        return (
            f"{ASSERTION}Request is specified with GuidedDecodingParams, but GuidedDecoder is not setup. "
            "Please provide a valid GuidedDecodingConfig to setup GuidedDecoder."
        )
    return None


def forward_refusal(item: Item, max_beam_width: int) -> str | None:
    """What a model step refuses (trtGptModelInflightBatching.cpp changeBeamWidth).

    That is a beam width above the runtime max_beam_width; a narrower one is served (the operating width
    changes, and requests of another width wait).
    """
    if item.beam_width > max_beam_width:
        return (
            f"{ASSERTION}Requested beam width {item.beam_width} is larger than configured max beam width "
            f"{max_beam_width}"
        )
    return None


def executor_failed(request_id: int, what: str) -> str:
    """The backend's words for an executor response that carries an error (model_instance_state.cc)."""
    return f"Executor failed process requestId {request_id} due to the following error: {what}"
