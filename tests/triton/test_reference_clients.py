"""The serving release's own example clients, as a new user runs them, against our rendered repositories.

`tests.triton.reference` follows the request and response handling of tensorrtllm_backend v0.19.0's
`tools/multimodal/client.py` (LLaVA, an `image_input` tensor, ensemble or BLS, unary or streaming) and
`tools/whisper/client.py`. They read `text_output` as one string per beam and `TRANSCRIPTS[0]` as the
transcript, which is how the real models answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import Served, serve
from tests.triton.reference import multimodal_client, whisper_transcript
from tests.triton.serving import load_example

IMAGE = np.random.default_rng(7).random((1, 1, 3, 336, 336)).astype(np.float16)


def _serve(
    name: str,
    install: TritonInstall,
    factory: pytest.TempPathFactory,
    say: Callable[[str], None],
    streaming: bool = False,
) -> Iterator[Served]:
    plan = load_example(name, {"streaming": True} if streaming else None)
    label = f"{name}-streaming" if streaming else name
    with serve(label, plan, install, factory.mktemp("reference"), say) as server:
        assert server.decoupled is streaming
        yield server


@pytest.fixture(scope="module")
def llava(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve("llava", triton_install, tmp_path_factory, say)


@pytest.fixture(scope="module")
def llava_streaming(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve("llava", triton_install, tmp_path_factory, say, streaming=True)


@pytest.fixture(scope="module")
def whisper(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve("whisper", triton_install, tmp_path_factory, say)


def _assert_llava_answered(text: str, streaming: bool) -> None:
    seen = codec.parse_digest(text)
    assert seen["type"]["name"] == "llava"
    assert seen["pre"]["text"] == "Question: which city is this? Answer:"
    assert seen["enc"]["IMAGE"].startswith("FP16[1,1,3,336,336]#")
    assert seen["llm"]["beam_width"] == "1" and seen["llm"]["streaming"] == str(int(streaming))
    assert (seen["llm"]["end_id"], seen["llm"]["pad_id"], seen["llm"]["runtime_top_k"]) == ("-1", "1", "1")


@pytest.mark.parametrize("use_bls", [False, True], ids=["ensemble", "bls"])
def test_multimodal_client(llava: Served, use_bls: bool) -> None:
    (printed,) = multimodal_client(llava, IMAGE, use_bls=use_bls)  # beam 0, the only one
    _assert_llava_answered(printed, streaming=False)


@pytest.mark.parametrize("use_bls", [False, True], ids=["ensemble", "bls"])
def test_multimodal_client_streaming(llava_streaming: Served, use_bls: bool) -> None:
    printed = multimodal_client(llava_streaming, IMAGE, streaming=True, use_bls=use_bls)
    assert len(printed) >= 4  # one line per streamed piece: every response was readable
    _assert_llava_answered("".join(printed), streaming=True)


def test_whisper_client(whisper: Served) -> None:
    samples = codec.tone_audio("good evening")
    assert whisper_transcript(whisper, samples) == "good evening"
