"""Beam search on deployments serving beam width 2: every beam arrives, flat, in one response.

LLaVA (image tensors) without streaming, LLaVA-OneVision (raw bytes, URLs) with streaming on.

The executor serves exactly its `max_beam_width`: a request without a beam width (which means 1) is
refused, and so is streaming with beam search. `mmctl infer` prints one `[beam N] ...` line per beam.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from mmd_operator.cli.main import main
from mmd_operator.cli.triton import media
from mmd_operator.cli.triton.doubles import codec
from mmd_operator.cli.triton.localserver import TritonInstall
from mmd_operator.cli.triton.requests import Sampling, Tensor, TextRequest, text_request
from mmd_operator.cli.triton.serving import Served, serve
from tests.triton.reference import grpc_results, multimodal_client
from tests.triton.serving import load_example

NAME, STREAMING_NAME = "llava", "llava_onevision"
MODELS = ("ensemble", "tensorrt_llm_bls")
WIDTH_ONE_REFUSED = "Request with beam width 1 differs from the max beam width 2"
STREAMING_REFUSED = "Streaming mode is only supported with beam width of 1"


def _serve_beams(
    install: TritonInstall, factory: pytest.TempPathFactory, say: Callable[[str], None], *, streaming: bool
) -> Iterator[Served]:
    example = STREAMING_NAME if streaming else NAME
    plan = load_example(example, {"maxBeamWidth": 2, "streaming": streaming}, engine={"maxBeamWidth": 2})
    name = f"{example}-beams{'-streaming' if streaming else ''}"
    with serve(name, plan, install, factory.mktemp("beams"), say) as server:
        assert 'key: "max_beam_width"\n  value { string_value: "2" }' in server.configs["tensorrt_llm"]
        assert server.decoupled is streaming
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


def test_a_request_without_the_served_beam_width_is_refused(beams: Served, tmp_path: Path) -> None:
    for width in (None, 1):
        tensors = _request(beams, tmp_path, width)
        for model in MODELS:
            with pytest.raises(InferenceServerException, match=WIDTH_ONE_REFUSED):
                grpc_results(beams, model, tensors, ["text_output"])


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
            code = main([*argv, *extra])
            out, err = capsys.readouterr()
            assert code == 1 and out == ""
            assert err.count("\n") == 1 and WIDTH_ONE_REFUSED in err, err


def test_streaming_refuses_beam_search(streaming_beams: Served, tmp_path: Path) -> None:
    streamed = _request(streaming_beams, tmp_path, 2, stream=True)
    whole = _request(streaming_beams, tmp_path, 2)
    for model in MODELS:
        with pytest.raises(InferenceServerException, match=STREAMING_REFUSED):
            grpc_results(streaming_beams, model, streamed, ["text_output"])
        # Not streaming, a decoupled deployment answers every beam in one response too.
        (result,) = grpc_results(streaming_beams, model, whole, ["text_output"])
        _assert_two_beams(result.as_numpy("text_output"))


def test_infer_on_a_streaming_deployment_with_beams(
    streaming_beams: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    picture = str(media.image(tmp_path / "cli.jpg"))
    # Over HTTP a decoupled deployment answers through the generate endpoint: beams as a JSON list.
    for protocol in ("grpc", "http"):
        argv = ["infer", "--url", streaming_beams.url(protocol), "--image", picture]
        code = main([*argv, "--beam-width", "2"])
        out, err = capsys.readouterr()
        assert code == 0, err
        lines = out.splitlines()
        assert [line[: len("[beam 0] ")] for line in lines] == ["[beam 0] ", "[beam 1] "]
        assert [codec.parse_digest(line[len("[beam 0] ") :])["llm"]["beam"] for line in lines] == ["0", "1"]
        code = main([*argv, "--beam-width", "2", "--stream"])
        out, err = capsys.readouterr()
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and STREAMING_REFUSED in err, err
