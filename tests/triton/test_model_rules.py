"""What the Python models of the pinned release refuse, through the operator's rendered repositories.

The multimodal preprocessing (and the Hugging Face processor it calls), the BLS entry points and
whisper_bls (rules M and W of docs/development/request-validation.md): each test sends the requests that
meet one rule and reads what the client gets. A model that raises out of `execute` is worded by Triton's
Python backend (`Failed to process the request(s) for model '<instance>', message: <Type>: <text>`); the
BLS models answer with the traceback of what they raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from mmctl.triton.requests import Tensor, TextRequest, text_request
from mmd_testbed.triton import media
from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import Served, serve
from tests.triton.reference import grpc_results
from tests.triton.serving import load_example_with_urls, replaced, scalar

# How Triton's Python backend words an exception that left a model's execute.
RAISED = r"Failed to process the request\(s\) for model '{model}_\d+(_\d+)?', message: "
MLLAMA_COUNTS = (
    r"ValueError: The number of image tokens in each text \(\[2\]\) should be the same as the number of "
    r"provided images per batch \(\[1\]\)\. "
)


@pytest.fixture(scope="module")
def start_example(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Callable[[str], Iterator[Served]]:
    def serving(name: str) -> Iterator[Served]:
        plan = load_example_with_urls(name)
        with serve(name, plan, triton_install, tmp_path_factory.mktemp("models"), say) as server:
            yield server

    return serving


@pytest.fixture(scope="module")
def whisper(start_example: Callable[[str], Iterator[Served]]) -> Iterator[Served]:
    yield from start_example("whisper")


@pytest.fixture(scope="module")
def mllama(start_example: Callable[[str], Iterator[Served]]) -> Iterator[Served]:
    yield from start_example("mllama")


@pytest.fixture(scope="module")
def onevision(start_example: Callable[[str], Iterator[Served]]) -> Iterator[Served]:
    yield from start_example("llava_onevision")


@pytest.fixture(scope="module")
def llava(start_example: Callable[[str], Iterator[Served]]) -> Iterator[Served]:
    yield from start_example("llava")


def _answer(served: Served, model: str, tensors: list[Tensor]) -> str:
    output = "TRANSCRIPTS" if model == "whisper_bls" else "text_output"
    results = grpc_results(served, model, tensors, [output])
    return "".join(item.decode() for result in results for item in result.as_numpy(output))


def _refused(served: Served, model: str, tensors: list[Tensor], pattern: str) -> str:
    output = {"whisper_bls": "TRANSCRIPTS", "preprocessing": "INPUT_ID"}.get(model, "text_output")
    with pytest.raises(InferenceServerException, match=pattern) as refused:
        grpc_results(served, model, tensors, [output])
    return str(refused.value)


def _wav(samples: np.ndarray, length: int | None = None, prefix: str | None = None) -> list[Tensor]:
    """whisper_bls's three inputs, built here: WAV_LENS says `length` (default: every sample)."""
    return [
        Tensor("WAV", samples[None].astype(np.float32), "FP32"),
        scalar("WAV_LENS", len(samples) if length is None else length, "INT32"),
        scalar("TEXT_PREFIX", prefix or "", "BYTES"),
    ]


def _speech(words: str, samples: int) -> np.ndarray:
    """`words` as tones, then silence up to `samples` samples (16 kHz)."""
    tones = codec.tone_audio(words)
    return np.concatenate([tones, np.zeros(samples - len(tones), np.float32)])


def test_w3_t19_audio_beyond_the_encoders_input_is_refused(whisper: Served) -> None:
    # whisper_bls pads the features to 3000 frames (hop 160 at 16 kHz: 30 s) and to an even count, and cuts
    # nothing: the encoder engine's max input length (from its own config.json) refuses longer audio.
    entry = whisper.repository.parent / "engines" / whisper.plan.cache_key
    limit = json.loads((entry / "encoder" / "config.json").read_text())["build_config"]["max_input_len"]
    assert limit == codec.MAX_FRAMES
    for samples in (30 * codec.SAMPLE_RATE, 30 * codec.SAMPLE_RATE + codec.HOP - 1):  # 3000 frames
        assert _answer(whisper, "whisper_bls", _wav(_speech("long", samples))) == "long"
    refusal = (
        r"Traceback \(most recent call last\).*TritonModelException: Executor failed process requestId \d+ "
        r"due to the following error: Encountered an error when fetching new request: \[TensorRT-LLM\]"
        rf"\[ERROR\] Assertion failed: Encoder length \(3002\) exceeds maximum encoder input length "
        rf"\({limit}\)\."
    )
    longer = _speech("long", 30 * codec.SAMPLE_RATE + codec.HOP)  # 3001 frames, made even: 3002
    _refused(whisper, "whisper_bls", _wav(longer), f"(?s){refusal}")
    # WAV_LENS cuts the audio only with zero_pad (off here): the whole WAV counts.
    assert whisper.configs["whisper_bls"].count('string_value: "false"') == 1
    _refused(whisper, "whisper_bls", _wav(longer, length=codec.SAMPLE_RATE), f"(?s){refusal}")


def test_w4_t16_a_decoder_prompt_beyond_the_decoders_input_is_refused(whisper: Served) -> None:
    # The decoder's max input length is the executor's min(max_seq_len - 1, max_num_tokens) = 113 (not
    # the build's 14); Whisper's special tokens count one token each.
    assert whisper.plan.limits.max_seq_len - 1 == 113
    special = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    speech = _speech("hi", codec.SAMPLE_RATE)
    assert _answer(whisper, "whisper_bls", _wav(speech, prefix=special + "a" * 109)) == "hi"
    refusal = r"Prompt length \(114\) exceeds maximum input length \(113\)\. Set log level to info"
    _refused(whisper, "whisper_bls", _wav(speech, prefix=special + "a" * 110), refusal)


def test_w1_w2_one_utterance_with_its_length(whisper: Served) -> None:
    speech = _speech("hi", codec.SAMPLE_RATE)
    two = [Tensor("WAV", np.stack([speech, speech]), "FP32"), *_wav(speech)[1:]]
    two[1] = Tensor("WAV_LENS", np.array([[len(speech)], [len(speech)]], np.int32), "INT32")
    two[2] = Tensor("TEXT_PREFIX", np.array([[b""], [b""]], dtype=object), "BYTES")
    _refused(
        whisper,
        "whisper_bls",
        two,
        RAISED.format(model="whisper_bls") + "AssertionError: Only support batch size 1",
    )
    # Without WAV_LENS Triton refuses first: all three inputs are required.
    missing = [t for t in _wav(speech) if t.name != "WAV_LENS"]
    _refused(whisper, "whisper_bls", missing, "expected 3 inputs but got 2 inputs for model 'whisper_bls'")


def _mllama(served: Served, tmp_path: Path, text: str, images: list[str]) -> list[Tensor]:
    """mllama's request with `text` as the whole text_input (the client's template left out)."""
    tensors = text_request(served.knowledge, TextRequest(text="x", images=images, max_tokens=4))
    return replaced(tensors, scalar("text_input", text, "BYTES"), drop=["prompt_table_extra_id"])


def test_m11_mllama_image_tags_match_the_images(
    mllama: Served, tmp_path: Path, image_host: tuple[str, Path]
) -> None:
    picture = str(media.image(tmp_path / "m.jpg"))
    base, root = image_host
    media.image(root / "m11.jpg")
    url = f"{base}/m11.jpg"
    counts = RAISED.format(model="preprocessing") + MLLAMA_COUNTS
    for image in (picture, url):  # raw bytes, then a URL the server fetches
        two_tags = _mllama(mllama, tmp_path, "<|image|><|image|><|begin_of_text|>two", [image])
        _refused(mllama, "ensemble", two_tags, counts)
        one_tag = _mllama(mllama, tmp_path, "<|image|><|begin_of_text|>one", [image])
        assert "llm:" in _answer(mllama, "ensemble", one_tag)
        # No tag at all is not compared (the processor counts only when the text has tags).
        assert "llm:" in _answer(
            mllama, "ensemble", _mllama(mllama, tmp_path, "<|begin_of_text|>none", [image])
        )
    # Two URLs in a row would meet two tags, but the ensemble takes one (image_url_input dims [1]).
    two_urls = Tensor("image_url_input", np.array([[url.encode()] * 2], dtype=object), "BYTES")
    both = replaced(_mllama(mllama, tmp_path, "<|image|><|image|><|begin_of_text|>two", [url]), two_urls)
    _refused(mllama, "ensemble", both, "unexpected shape for input 'image_url_input' for model 'ensemble'")
    # Two images as bytes in one row: the real code lists every image and pairs the i-th with the i-th
    # query, so the second image has no query.
    one_tag = _mllama(mllama, tmp_path, "<|image|><|begin_of_text|>one", [picture])
    pixels = next(t for t in one_tag if t.name == "image_bytes_input")
    doubled = replaced(one_tag, Tensor(pixels.name, np.concatenate([pixels.array] * 2, axis=1), "UINT8"))
    _refused(
        mllama,
        "ensemble",
        doubled,
        RAISED.format(model="preprocessing") + "IndexError: list index out of range",
    )


def test_m8_m10_llava_onevision_images(
    onevision: Served, tmp_path: Path, image_host: tuple[str, Path]
) -> None:
    picture = str(media.image(tmp_path / "o.jpg"))
    one = replaced(
        text_request(onevision.knowledge, TextRequest(text="x", images=[picture], max_tokens=4)),
        drop=["prompt_table_extra_id"],
    )
    pixels = next(t for t in one if t.name == "image_bytes_input")
    two = replaced(one, Tensor(pixels.name, np.concatenate([pixels.array] * 2, axis=1), "UINT8"))
    preprocessing = RAISED.format(model="preprocessing")
    _refused(
        onevision,
        "ensemble",
        two,
        preprocessing + re.escape("AssertionError: Image must have the same batch size as Query."),
    )
    base, _ = image_host
    urls = {
        "ftp://127.0.0.1/o.jpg": "InvalidSchema: No connection adapters were found for 'ftp://127.0.0.1/o.jpg'",
        "o.jpg": "MissingSchema: Invalid URL 'o.jpg': No scheme supplied. Perhaps you meant https://o.jpg?",
        f"{base}/missing.jpg": "UnidentifiedImageError: cannot identify image file",
    }
    for url, refusal in urls.items():
        request = replaced(one, scalar("image_url_input", url, "BYTES"), drop=["image_bytes_input"])
        _refused(onevision, "ensemble", request, preprocessing + re.escape(refusal))


def test_m2_m4_preprocessing_without_a_vision_preprocessor(llava: Served) -> None:
    query = scalar("QUERY", "what", "BYTES")
    output_len = scalar("REQUEST_OUTPUT_LEN", 4, "INT32")
    pixels = Tensor("IMAGE_BYTES", np.zeros((1, 1, 8, 8, 3), np.uint8), "UINT8")
    refusal = "AssertionError: Vision preprocessor for preparing images before encoding is None"
    _refused(
        llava, "preprocessing", [query, output_len, pixels], RAISED.format(model="preprocessing") + refusal
    )
    # The extra id's own shape checks never fire: Triton already holds every input to one batch size and
    # the declared dims [1].
    extra = Tensor("PROMPT_TABLE_EXTRA_ID", np.array([[1], [2]], np.uint64), "UINT64")
    _refused(llava, "preprocessing", [query, output_len, extra], "batch size")


def test_embedding_bias_words_and_weights_pair_up(llava: Served, tmp_path: Path) -> None:
    picture = str(media.image(tmp_path / "b.jpg"))
    tensors = text_request(llava.knowledge, TextRequest(text="x", images=[picture], max_tokens=4))
    words = Tensor("embedding_bias_words", np.array([[b"a", b"b"]], dtype=object), "BYTES")
    weights = Tensor("embedding_bias_weights", np.array([[1.0]], np.float32), "FP32")
    refusal = "AssertionError: Embedding bias words must have same dimension as embedding bias weights"
    _refused(llava, "ensemble", [*tensors, words, weights], RAISED.format(model="preprocessing") + refusal)
    paired = Tensor("embedding_bias_weights", np.array([[1.0, 2.0]], np.float32), "FP32")
    assert "llm:" in _answer(llava, "ensemble", [*tensors, words, paired])


def test_m15_bls_text_input_is_one_string(llava: Served, tmp_path: Path) -> None:
    # The BLS's "text_input is required" needs an empty text_input, which Triton's dims [1] never let in.
    picture = str(media.image(tmp_path / "t.jpg"))
    tensors = text_request(llava.knowledge, TextRequest(text="x", images=[picture], max_tokens=4))
    empty = replaced(tensors, Tensor("text_input", np.empty((1, 0), dtype=object), "BYTES"))
    _refused(llava, "tensorrt_llm_bls", empty, "unexpected shape for input 'text_input'")
