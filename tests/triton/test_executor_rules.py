"""What the TensorRT-LLM backend and executor refuse, through the operator's rendered repositories.

Each test sends the requests that meet one rule of docs/development/request-validation.md (the rule ids
name them) through the ensemble, the BLS or straight to `tensorrt_llm`, and reads the refusal the client
gets, in the real stack's words, or the answer. The engines' limits come from the engines' own
`config.json`, written by the build-tool doubles from each plan's trtllm-build steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from mmctl.main import main
from mmctl.triton.requests import (
    Tensor,
    TextRequest,
    audio_request,
    image_extra_id,
    load_audio,
    text_request,
)
from mmd_testbed.triton import media
from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.localserver import ServerFailedError
from mmd_testbed.triton.serving import Served
from tests.triton.conftest import Start
from tests.triton.reference import grpc_results
from tests.triton.serving import load_example, replaced, scalar, with_parameter, without_parameter

ASSERTION = r"\[TensorRT-LLM\]\[ERROR\] Assertion failed: "
FAILED = r"Executor failed process requestId \d+ due to the following error: "
FETCHING = FAILED + "Encountered an error when fetching new request: "
EXTRA_IDS_REFUSED = (
    FETCHING
    + ASSERTION
    + "Input token extra ids must be provided when enabling kv cache reuse with prompt table"
)


@pytest.fixture(scope="module")
def llava(start: Start) -> Iterator[Served]:
    with start("llava", load_example("llava")) as served:
        yield served


@pytest.fixture(scope="module")
def llava_reuse(start: Start) -> Iterator[Served]:
    with start("llava-reuse", load_example("llava", {"kvCacheReuse": True})) as served:
        yield served


def _image_request(
    served: Served, tmp_path: Path, text: str = "what is this", max_tokens: int = 8
) -> list[Tensor]:
    """The type's own request with one image, without any extra id a client may add by itself."""
    picture = media.image(tmp_path / "picture.jpg")
    tensors = text_request(
        served.knowledge, TextRequest(text=text, images=[str(picture)], max_tokens=max_tokens)
    )
    return replaced(tensors, drop=["prompt_table_extra_id"])


def _direct(ids: list[int], max_tokens: int = 4, *extra: Tensor) -> list[Tensor]:
    """A request straight to tensorrt_llm: `ids` as the prompt."""
    return [
        Tensor("input_ids", np.array([ids], dtype=np.int32), "INT32"),
        scalar("input_lengths", len(ids), "INT32"),
        scalar("request_output_len", max_tokens, "INT32"),
        *extra,
    ]


def _text(served: Served, model: str, tensors: list[Tensor]) -> str:
    output = "TRANSCRIPTS" if model == "whisper_bls" else "text_output"
    results = grpc_results(served, model, tensors, [output if model != "tensorrt_llm" else "output_ids"])
    if model == "tensorrt_llm":
        return "".join(codec.decode_ids(r.as_numpy("output_ids").reshape(-1)) for r in results)
    return "".join(item.decode() for r in results for item in r.as_numpy(output))


def _refused(served: Served, model: str, tensors: list[Tensor], pattern: str) -> str:
    output = {"tensorrt_llm": "output_ids", "whisper_bls": "TRANSCRIPTS"}.get(model, "text_output")
    with pytest.raises(InferenceServerException, match=pattern) as refused:
        grpc_results(served, model, tensors, [output])
    return str(refused.value)


def test_t20_kv_cache_reuse_needs_extra_ids_with_a_prompt_table(llava_reuse: Served, tmp_path: Path) -> None:
    assert (
        'key: "enable_kv_cache_reuse"\n  value { string_value: "true" }'
        in llava_reuse.configs["tensorrt_llm"]
    )
    plain = _image_request(llava_reuse, tmp_path)
    with_id = [*plain, scalar("prompt_table_extra_id", 42, "UINT64")]
    for model in ("ensemble", "tensorrt_llm_bls"):
        message = _refused(llava_reuse, model, plain, EXTRA_IDS_REFUSED)
        if model == "tensorrt_llm_bls":  # the BLS answers with the traceback of what it raised (M17)
            assert "Traceback (most recent call last)" in message
            assert "TritonModelException: Executor failed process requestId" in message
        seen = codec.parse_digest(_text(llava_reuse, model, with_id))
        assert seen["llm"]["prompt_table_extra_ids"] == "42"
    # Straight to tensorrt_llm: extra ids of another length than the prompt are dropped by the backend,
    # so the executor sees none (its own length check never gets them); text without a table is served.
    table = Tensor("prompt_embedding_table", np.zeros((1, 1, 8), np.float16), "FP16")
    prompt = [codec.VOCAB_SIZE, 65, 66, 67]
    for length in (3, 5):
        extra = Tensor("prompt_table_extra_ids", np.full((1, length), 7, np.uint64), "UINT64")
        _refused(llava_reuse, "tensorrt_llm", _direct(prompt, 4, table, extra), EXTRA_IDS_REFUSED)
    extra = Tensor("prompt_table_extra_ids", np.array([[7, 0, 0, 0]], np.uint64), "UINT64")
    assert "prompt_table_extra_ids=7" in _text(llava_reuse, "tensorrt_llm", _direct(prompt, 4, table, extra))
    assert "llm:" in _text(llava_reuse, "tensorrt_llm", _direct([65, 66, 67]))


def test_mmctl_infer_names_each_image_so_a_reuse_deployment_answers_it(
    llava_reuse: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same request without the id is refused (above); mmctl sends a digest of the image's bytes.
    picture = media.image(tmp_path / "named.jpg")
    code = main(["infer", "--url", llava_reuse.url("grpc"), "--model-type", "llava", "--image", str(picture)])
    out, err = capsys.readouterr()
    assert code == 0, err
    seen = codec.parse_digest(out.strip())
    assert seen["llm"]["prompt_table_extra_ids"] == str(image_extra_id([str(picture)]))


def test_t20_reuse_concerns_prompt_tables_only(start: Start, tmp_path: Path) -> None:
    # The operator renders reuse off for mllama and Whisper (their requests carry no prompt table to tell
    # images apart); forced on, their requests are still served: the rule needs a prompt table.
    for name in ("mllama", "whisper"):
        plan = with_parameter(load_example(name), "tensorrt_llm", "enable_kv_cache_reuse", "true")
        with start(f"{name}-reuse", plan) as served:
            if served.whisper:
                wav = media.speech(tmp_path / "reuse.wav", "reuse")
                tensors = audio_request(served.knowledge, load_audio(str(wav)))
                assert _text(served, "whisper_bls", tensors) == "reuse"
                continue
            assert "llm:" in _text(served, "ensemble", _image_request(served, tmp_path))
            text_only = text_request(served.knowledge, TextRequest(text="just text", max_tokens=3))
            assert "llm:" in _text(served, "ensemble", text_only)


def test_b13_reuse_is_on_unless_the_config_says_otherwise(start: Start, tmp_path: Path) -> None:
    # The v0.19.0 backend turns KV-cache reuse on when the parameter is missing or unparsable (a template
    # left unfilled); the operator always renders it.
    plan = with_parameter(
        load_example("llava"), "tensorrt_llm", "enable_kv_cache_reuse", "${enable_kv_cache_reuse}"
    )
    with start("llava-reuse-default", plan) as served:
        _refused(served, "ensemble", _image_request(served, tmp_path), EXTRA_IDS_REFUSED)


BEAM_WIDTH_RANGE = (
    "beamWidth > 0 && beamWidth <= static_cast<SizeType32 const>(tensorrt_llm::kernels::kMaxBeamWidth)"
)
SAMPLING_REFUSALS = [
    # (input, value, datatype, the condition SamplingConfig's constructor prints)
    ("beam_width", 0, "INT32", BEAM_WIDTH_RANGE),
    ("beam_width", 300, "INT32", BEAM_WIDTH_RANGE),
    ("top_k", -1, "INT32", "topK.value() >= 0"),
    ("top_p", 1.5, "FP32", "topP.value() <= 1.f"),
    ("temperature", -0.5, "FP32", "temperature.value() >= 0.f"),
    ("min_length", -1, "INT32", "minTokens.value() >= 0"),
    ("repetition_penalty", 0.0, "FP32", "repetitionpenalty.value() > 0.f"),
    ("length_penalty", -1.0, "FP32", "lengthPenalty.value() >= 0.f"),
]  # fmt: skip
# Inputs only tensorrt_llm declares (the entry points do not pass them on).
DIRECT_SAMPLING_REFUSALS = [
    ("runtime_top_p_min", -0.1, "FP32", "topPMin.value() >= 0.f"),
    ("runtime_top_p_min", 1.1, "FP32", "topPMin.value() <= 1.f"),
    ("runtime_top_p_reset_ids", -1, "INT32", "topPResetIds.value() >= 0"),
    ("runtime_top_p_decay", 0.0, "FP32", "topPDecay.value() > 0.f"),
    ("runtime_top_p_decay", 1.5, "FP32", "topPDecay.value() <= 1.f"),
    ("beam_search_diversity_rate", -1.0, "FP32", "beamSearchDiversityRate.value() >= 0.f"),
    ("num_return_sequences", 0, "INT32", "numReturnSequences.value() > 0"),
]


def test_t1_t13_sampling_ranges(llava: Served, tmp_path: Path) -> None:
    tensors = _image_request(llava, tmp_path)
    for name, value, datatype, condition in SAMPLING_REFUSALS:  # converted by the backend: its text as is
        pattern = "in ensemble 'ensemble', " + ASSERTION + re.escape(condition)
        _refused(llava, "ensemble", replaced(tensors, scalar(name, value, datatype)), pattern)
    for name, value, datatype, condition in DIRECT_SAMPLING_REFUSALS:
        direct = _direct([65, 66], 4, scalar(name, value, datatype))
        _refused(
            llava,
            "tensorrt_llm",
            direct,
            "^" + re.escape("[StatusCode.INTERNAL] ") + ASSERTION + re.escape(condition),
        )
    wide = _direct([65], 4, scalar("beam_width", 2, "INT32"), scalar("num_return_sequences", 3, "INT32"))
    _refused(
        llava,
        "tensorrt_llm",
        wide,
        ASSERTION + re.escape("beamWidth == 1 || numReturnSequences.value() <= beamWidth"),
    )
    # no_repeat_ngram_size has a range check but no input: the v0.19.0 config declares none.
    ngram = _direct([65], 4, scalar("no_repeat_ngram_size", -1, "INT32"))
    _refused(llava, "tensorrt_llm", ngram, "unexpected inference input 'no_repeat_ngram_size'")
    # Served: top_p <= 0 (the backend unsets it), greedy temperature 0, top_k 0, any presence and
    # frequency penalty (no range check), repetition penalty just above 0.
    for name, value, datatype in [
        ("top_p", 0.0, "FP32"), ("top_p", -1.0, "FP32"), ("temperature", 0.0, "FP32"),
        ("top_k", 0, "INT32"), ("presence_penalty", -5.0, "FP32"), ("frequency_penalty", 9.0, "FP32"),
        ("repetition_penalty", 0.01, "FP32"),
    ]:  # fmt: skip
        assert "llm:" in _text(llava, "ensemble", replaced(tensors, scalar(name, value, datatype)))


def test_t14_t16_t17_lengths(llava: Served, tmp_path: Path) -> None:
    limits = llava.plan.limits
    # The executor's max input length with context FMHA and packed input (trtllm-build's defaults), no
    # chunked context: min(max_seq_len - 1, max_num_tokens), here 2559, not the build's max_input_len.
    max_input = limits.max_seq_len - 1
    engine = json.loads(
        (llava.repository.parent / "engines" / llava.plan.cache_key / "llm" / "config.json").read_text()
    )
    assert (
        engine["build_config"]["max_num_tokens"] > max_input
        and engine["build_config"]["max_input_len"] < max_input
    )
    _refused(
        llava,
        "ensemble",
        _image_request(llava, tmp_path, max_tokens=0),
        ASSERTION + re.escape("mMaxNewTokens > 0"),
    )
    _refused(llava, "tensorrt_llm", _direct([]), ASSERTION + re.escape("!mInputTokenIds.empty()"))
    long = _image_request(llava, tmp_path, text="x" * max_input)
    for model in ("ensemble", "tensorrt_llm_bls"):
        pattern = (
            FETCHING + rf"Prompt length \(\d+\) exceeds maximum input length \({max_input}\)\. Set log level"
        )
        _refused(llava, model, long, pattern)
    # Just fitting: answered, and max_tokens beyond max_seq_len is cut (a warning), not refused.
    answer = _text(llava, "ensemble", _image_request(llava, tmp_path, max_tokens=100_000))
    prompt = 1 + len(answer.split("|")[1].encode())  # one fake id, then preprocessing's trace
    assert codec.parse_digest(answer)["llm"]["max_new_tokens"] == str(limits.max_seq_len - prompt)
    assert (
        "max_new_tokens"
        not in codec.parse_digest(_text(llava, "ensemble", _image_request(llava, tmp_path)))["llm"]
    )


def test_t23_t24_logits_need_an_engine_that_gathers_them(llava: Served, tmp_path: Path) -> None:
    tensors = _image_request(llava, tmp_path)
    context = FETCHING + ASSERTION + "Return context logit need to build engine with gather_context_logits"
    generation = (
        FETCHING
        + ASSERTION
        + "To return generation logits, gather_generation_logits must be enabled in ExecutorConfig"
    )
    for name, pattern in (("return_context_logits", context), ("return_generation_logits", generation)):
        for model in ("ensemble", "tensorrt_llm_bls"):
            _refused(llava, model, replaced(tensors, scalar(name, True, "BOOL")), pattern)


def test_b1_b2_streaming_and_batches_need_decoupled_mode(llava: Served, tmp_path: Path) -> None:
    assert not llava.decoupled
    streamed = replaced(_image_request(llava, tmp_path), scalar("stream", True, "BOOL"))
    _refused(
        llava,
        "ensemble",
        streamed,
        re.escape(
            "in ensemble 'ensemble', Streaming is only supported if model is deployed using decoupled mode."
        ),
    )
    two = [
        Tensor("input_ids", np.array([[65, 66], [67, 68]], np.int32), "INT32"),
        Tensor("input_lengths", np.array([[2], [2]], np.int32), "INT32"),
        Tensor("request_output_len", np.array([[4], [4]], np.int32), "INT32"),
    ]
    _refused(
        llava,
        "tensorrt_llm",
        two,
        "^"
        + re.escape(
            "[StatusCode.INTERNAL] Batch size > 1 requires the tensorrt_llm backend to be using decoupled "
            "transaction policy"
        ),
    )


def test_backend_conversion_of_direct_requests(llava: Served) -> None:
    nothing = [scalar("request_output_len", 4, "INT32"), scalar("input_lengths", 1, "INT32")]
    _refused(llava, "tensorrt_llm", nothing, "inputTokens or encoderInputFeatures tensor not provided")
    # Word lists: token ids, then each word's end offset, padded with -1 (an odd length cannot pass
    # Triton's dims [2, -1]).
    words = Tensor("bad_words_list", np.array([[[65, 66, 67], [2, 3, -1]]], np.int32), "INT32")
    assert "llm:" in _text(llava, "tensorrt_llm", _direct([65], 4, words))
    backwards = Tensor("stop_words_list", np.array([[[65, 66], [2, 1]]], np.int32), "INT32")
    _refused(
        llava,
        "tensorrt_llm",
        _direct([65], 4, backwards),
        ASSERTION + re.escape("Sparse list must not have non-increasing offsets: 65 66 2 1 "),
    )
    beyond = Tensor("bad_words_list", np.array([[[65, 66], [3, -1]]], np.int32), "INT32")
    _refused(
        llava,
        "tensorrt_llm",
        _direct([65], 4, beyond),
        re.escape("Sparse list must not have out-of-bound offsets: 65 66 3 -1 "),
    )
    weights = Tensor("lora_weights", np.zeros((1, 2, 16), np.float16), "FP16")
    lora = [scalar("lora_task_id", 5, "UINT64"), weights]
    _refused(
        llava,
        "tensorrt_llm",
        _direct([65], 4, *lora),
        ASSERTION + "Request for LoRA inference with lora weights must also have lora config",
    )
    unknown = _direct([65], 4, scalar("lora_task_id", 77, "UINT64"))
    _refused(
        llava,
        "tensorrt_llm",
        unknown,
        FAILED + r"LoRA task 77 not found in cache\. Please send LoRA weights with request",
    )
    lookahead = _direct([65], 4, scalar("lookahead_window_size", 4, "INT32"))
    _refused(llava, "tensorrt_llm", lookahead, "Failed to extract lookahead_ngram_size")
    drafts = _direct([65], 4, Tensor("draft_input_ids", np.array([[1, 2]], np.int32), "INT32"))
    _refused(
        llava,
        "tensorrt_llm",
        drafts,
        FETCHING + re.escape("Draft tokens length (2) exceeds maximum draft tokens length (0)."),
    )
    guided = _direct([65], 4, scalar("guided_decoding_guide_type", "json", "BYTES"))
    _refused(
        llava,
        "tensorrt_llm",
        guided,
        FETCHING
        + ASSERTION
        + "Request is specified with GuidedDecodingParams, but GuidedDecoder is not setup",
    )
    other = _direct(
        [65], 4, scalar("guided_decoding_guide_type", "xml", "BYTES")
    )  # not a guide type: dropped
    assert "llm:" in _text(llava, "tensorrt_llm", other)


def test_b12_stop_needs_a_request_id(llava: Served) -> None:
    stop = _direct([65], 4, scalar("stop", True, "BOOL"))
    _refused(llava, "tensorrt_llm", stop, "Trying to stop a request but request ID is not provided")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{llava.ports.grpc}")
    inputs = []
    for tensor in stop:
        item = grpcclient.InferInput(tensor.name, list(tensor.array.shape), tensor.datatype)
        item.set_data_from_numpy(tensor.array)
        inputs.append(item)
    result = client.infer("tensorrt_llm", inputs, request_id="some-request")
    assert not result.get_response().outputs  # the backend answers a stop with an empty response


def test_t25_streaming_on_an_evicting_scheduler(start: Start, tmp_path: Path) -> None:
    # max_utilization may evict and restart a request; streamed tokens could then change, so the executor
    # refuses a streamed request that might not fit max input length again: reachable once max_num_tokens
    # (1024 here) is below max_seq_len - 1.
    plan = load_example("internlm-xcomposer2-lora", engine={"maxNumTokens": 1024})
    with start("xcomposer2-evicting", plan) as served:
        assert served.decoupled and 'string_value: "max_utilization"' in served.configs["tensorrt_llm"]
        picture = str(media.image(tmp_path / "x.jpg"))
        knowledge = served.knowledge
        long = text_request(knowledge, TextRequest(text="x", images=[picture], max_tokens=1000, stream=True))
        pattern = (
            FETCHING + ASSERTION + "Request sequence length is potentially greater than max input length"
        )
        _refused(served, "ensemble", long, pattern)
        short = text_request(knowledge, TextRequest(text="x", images=[picture], max_tokens=100, stream=True))
        assert "llm:" in _text(served, "ensemble", short)
        whole = text_request(knowledge, TextRequest(text="x", images=[picture], max_tokens=1000))
        assert "llm:" in _text(served, "ensemble", whole)


def test_t26_whisper_on_max_utilization(start: Start, tmp_path: Path) -> None:
    # The operator refuses this spec (a CEL rule on serving.batchSchedulerPolicy); rendered by hand, the
    # executor refuses every request of a model with an encoder engine under it.
    plan = with_parameter(
        load_example("whisper"), "tensorrt_llm", "batch_scheduler_policy", "max_utilization"
    )
    with start("whisper-max-utilization", plan) as served:
        wav = media.speech(tmp_path / "x.wav", "x")
        pattern = (
            FETCHING
            + ASSERTION
            + "Encoder or Encoder-Decoder model don't support max utilization scheduler yet"
        )
        _refused(served, "whisper_bls", audio_request(served.knowledge, load_audio(str(wav))), pattern)


def test_t31_runtime_beam_width_above_the_engines(start: Start) -> None:
    # The operator's own rules keep serving.maxBeamWidth within engine.maxBeamWidth; past them, the model
    # would not load.
    plan = with_parameter(load_example("llava"), "tensorrt_llm", "max_beam_width", "2")
    with pytest.raises(ServerFailedError) as failed, start("llava-beam-above-engine", plan):
        pass
    log = re.search(r"log (\S+server\.log):", str(failed.value))
    assert log, failed.value
    refusal = "Runtime configured max beam width (2) must not exceed engine max beam width (1)"
    assert refusal in Path(log.group(1)).read_text()


def test_a_config_without_the_guided_decoding_parameters_does_not_load(start: Start) -> None:
    # The operator renders all three, empty (guided decoding off); the backend reads them at load.
    key = "tokenizer_dir"
    plan = without_parameter(load_example("llava"), "tensorrt_llm", key)
    with pytest.raises(ServerFailedError) as failed, start("llava-without-tokenizer-dir", plan):
        pass
    log = re.search(r"log (\S+server\.log):", str(failed.value))
    assert log, failed.value
    assert f"Cannot find parameter with name: {key}" in Path(log.group(1)).read_text()
