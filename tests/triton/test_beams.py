"""Beam search on deployments serving beam width 2: every beam arrives, flat, in every response.

LLaVA (image tensors) without streaming, LLaVA-OneVision (raw bytes, URLs) with streaming on, and once
more with `accumulateTokens`.

The executor serves any beam width up to its runtime `max_beam_width` (TensorRT-LLM 0.19 changes its
operating width per request): a request without a beam width (which means 1) is answered with one beam,
a wider one is refused when the model steps (`changeBeamWidth`). Streaming with beam search works: every
response carries every beam's text so far (not new tokens), so the last one holds the final beams; the
BLS cannot accumulate tokens of several beams. `mmctl infer` prints one `[beam N] ...` line per beam,
streamed or not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from mmctl.main import main
from mmctl.triton.requests import Sampling, Tensor, TextRequest, text_request
from mmd_testbed.triton import media
from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import Served, serve
from tests.triton.reference import grpc_results, multimodal_client
from tests.triton.serving import load_example

NAME, STREAMING_NAME = "llava", "llava_onevision"
MODELS = ("ensemble", "tensorrt_llm_bls")
# The executor's refusal as the backend words it: changeBeamWidth's check, wrapped by forwardAsync.
TOO_WIDE_REFUSED = (
    r"Executor failed process requestId \d+ due to the following error: Encountered an error in "
    r"forwardAsync function: \[TensorRT-LLM\]\[ERROR\] Assertion failed: Requested beam width 3 is "
    r"larger than configured max beam width 2"
)
ACCUMULATION_REFUSED = "Accumulation of tokens is only implemented for beam width = 1"


def _serve_beams(
    install: TritonInstall,
    factory: pytest.TempPathFactory,
    say: Callable[[str], None],
    *,
    streaming: bool,
    accumulate: bool = False,
) -> Iterator[Served]:
    example = STREAMING_NAME if streaming else NAME
    serving = {"maxBeamWidth": 2, "streaming": streaming} | ({"accumulateTokens": True} if accumulate else {})
    if streaming:
        # HTTP reaches a decoupled deployment only through the generate endpoint, whose JSON carries an
        # image only as a URL (mmctl sends a local one as a data URL).
        serving["imageUrlInput"] = True
    plan = load_example(example, serving, engine={"maxBeamWidth": 2})
    name = f"{example}-beams{'-streaming' if streaming else ''}{'-accumulating' if accumulate else ''}"
    with serve(name, plan, install, factory.mktemp("beams"), say) as server:
        assert 'key: "max_beam_width"\n  value { string_value: "2" }' in server.configs["tensorrt_llm"]
        assert server.decoupled is streaming
        accumulating = 'key: "accumulate_tokens"\n  value { string_value: "true" }'
        assert (accumulating in server.configs["tensorrt_llm_bls"]) is accumulate
        yield server


@pytest.fixture(scope="module")
def beams(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve_beams(triton_install, tmp_path_factory, say, streaming=False)


@pytest.fixture(scope="module")
def streaming_beams(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve_beams(triton_install, tmp_path_factory, say, streaming=True)


@pytest.fixture(scope="module")
def accumulating_beams(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve_beams(triton_install, tmp_path_factory, say, streaming=True, accumulate=True)


def _request(served: Served, tmp_path: Path, width: int | None, stream: bool = False) -> list[Tensor]:
    picture = media.image(tmp_path / "beams.jpg")
    request = TextRequest(
        text="what is this",
        images=[str(picture)],
        max_tokens=8,
        sampling=Sampling(beam_width=width),
        stream=stream,
    )
    return text_request(served.knowledge, request)


def _assert_two_beams(output: np.ndarray) -> None:
    """text_output of one response: [2] strings, beam k's digest naming beam k, otherwise alike."""
    assert output.shape == (2,), output.shape
    digests = [codec.parse_digest(item.decode()) for item in output]
    assert [d["llm"]["beam"] for d in digests] == ["0", "1"]
    assert all(d["llm"]["beam_width"] == "2" for d in digests)
    assert digests[0]["pre"] == digests[1]["pre"] and digests[0]["enc"] == digests[1]["enc"]


def test_every_beam_arrives_flat_in_one_response(beams: Served, tmp_path: Path) -> None:
    tensors = _request(beams, tmp_path, 2)
    for model in MODELS:
        (result,) = grpc_results(beams, model, tensors, ["text_output"])
        _assert_two_beams(result.as_numpy("text_output"))
    for protocol in ("grpc", "http"):  # our own client: one string per beam
        with beams.client(protocol) as client:
            (response,) = client.responses("ensemble", tensors, ["text_output"])
        assert [codec.parse_digest(t)["llm"]["beam"] for t in response.texts("text_output")] == ["0", "1"]


def test_a_narrower_beam_is_served_and_a_wider_one_refused(beams: Served, tmp_path: Path) -> None:
    for width in (None, 1):  # none means 1: below the served maximum of 2, so answered with one beam
        tensors = _request(beams, tmp_path, width)
        for model in MODELS:
            (result,) = grpc_results(beams, model, tensors, ["text_output"])
            output = result.as_numpy("text_output")
            assert output.shape == (1,), (model, output.shape)
            seen = codec.parse_digest(output[0].decode())
            assert "beam" not in seen["llm"] and seen["llm"].get("beam_width", "1") == "1"
    too_wide = _request(beams, tmp_path, 3)
    for model in MODELS:
        with pytest.raises(InferenceServerException, match=TOO_WIDE_REFUSED):
            grpc_results(beams, model, too_wide, ["text_output"])


def test_the_backends_multimodal_client_reads_every_beam(beams: Served) -> None:
    image = np.random.default_rng(3).random((1, 1, 3, 336, 336)).astype(np.float16)
    for use_bls in (False, True):
        printed = multimodal_client(beams, image, beam_width=2, use_bls=use_bls)
        assert [codec.parse_digest(line)["llm"]["beam"] for line in printed] == ["0", "1"]


def test_infer_prints_one_line_per_beam(
    beams: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    picture = str(media.image(tmp_path / "cli.jpg"))
    for protocol in ("grpc", "http"):
        for extra in ([], ["--bls"]):
            argv = ["infer", "--url", beams.url(protocol), "--model-type", NAME, "--image", picture]
            code = main([*argv, *extra, "--beam-width", "2"])
            out, err = capsys.readouterr()
            assert code == 0, err
            lines = out.splitlines()
            assert [line[: len("[beam 0] ")] for line in lines] == ["[beam 0] ", "[beam 1] "]
            assert [codec.parse_digest(line[len("[beam 0] ") :])["llm"]["beam"] for line in lines] == [
                "0",
                "1",
            ]
            code = main([*argv, *extra])  # no beam width: one beam, printed as a plain line
            out, err = capsys.readouterr()
            assert code == 0, err
            assert len(out.splitlines()) == 1 and not out.startswith("[beam"), out
            code = main([*argv, *extra, "--beam-width", "3"])
            out, err = capsys.readouterr()
            assert code == 1 and out == ""
            assert err.count("\n") == 1 and re.search(TOO_WIDE_REFUSED, err), err


def _assert_streamed_beams(results: list[Any]) -> None:
    """A streamed answer with two beams: every response carries both beams' text so far, not new tokens.

    So the last response alone holds the whole answer: both beams complete, differing by `beam=k` only.
    """
    outputs = [result.as_numpy("text_output") for result in results]
    assert len(outputs) > 1, "streaming sent one response"
    assert all(output.shape == (2,) for output in outputs), [output.shape for output in outputs]
    last = [item.decode() for item in outputs[-1]]
    _assert_two_beams(outputs[-1])
    assert last[0].replace("beam=0", "beam=1") == last[1]
    seen = codec.parse_digest(last[0])
    assert "what is this" in seen["pre"]["text"] and seen["llm"]["streaming"] == "1"


def test_streaming_with_beam_search(streaming_beams: Served, tmp_path: Path) -> None:
    streamed = _request(streaming_beams, tmp_path, 2, stream=True)
    whole = _request(streaming_beams, tmp_path, 2)
    for model in MODELS:
        _assert_streamed_beams(grpc_results(streaming_beams, model, streamed, ["text_output"]))
        # Not streaming, a decoupled deployment answers every beam in one response.
        (result,) = grpc_results(streaming_beams, model, whole, ["text_output"])
        _assert_two_beams(result.as_numpy("text_output"))


def test_the_bls_cannot_accumulate_several_beams(accumulating_beams: Served, tmp_path: Path) -> None:
    streamed = _request(accumulating_beams, tmp_path, 2, stream=True)
    # The ensemble does not accumulate: every response already holds the beams so far.
    _assert_streamed_beams(grpc_results(accumulating_beams, "ensemble", streamed, ["text_output"]))
    # The BLS of a decoupled deployment accumulates every answer, streamed or not.
    for tensors in (streamed, _request(accumulating_beams, tmp_path, 2)):
        with pytest.raises(InferenceServerException, match=ACCUMULATION_REFUSED):
            grpc_results(accumulating_beams, "tensorrt_llm_bls", tensors, ["text_output"])


def test_infer_on_a_streaming_deployment_with_beams(
    streaming_beams: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    picture = str(media.image(tmp_path / "cli.jpg"))
    # Over HTTP a decoupled deployment answers through the generate endpoints: beams as a JSON list.
    for protocol in ("grpc", "http"):
        argv = ["infer", "--url", streaming_beams.url(protocol), "--image", picture, "--beam-width", "2"]
        for stream in (False, True):  # streamed: the final beams, once the stream ends
            code = main([*argv, *(["--stream"] if stream else [])])
            out, err = capsys.readouterr()
            assert code == 0, err
            lines = out.splitlines()
            assert [line[: len("[beam 0] ")] for line in lines] == ["[beam 0] ", "[beam 1] "], out
            beams = [codec.parse_digest(line[len("[beam 0] ") :]) for line in lines]
            assert [seen["llm"]["beam"] for seen in beams] == ["0", "1"]
            assert [seen["llm"]["streaming"] for seen in beams] == [str(int(stream))] * 2
            assert all("Describe the image." in seen["pre"]["text"] for seen in beams)
            assert ("responses)" in err) is stream, err
