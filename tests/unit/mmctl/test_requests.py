"""mmctl's request building offline: where the real serving stack refuses a request, mmctl refuses it
first with the stack's words and the fix (Whisper past 30 s, mllama markers that do not number the
images), and the image digest it sends as prompt_table_extra_id."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mmctl.triton.requests import (
    WHISPER_MAX_FRAMES,
    WHISPER_MAX_SECONDS,
    RequestError,
    TextRequest,
    image_extra_id,
    load_audio,
    text_request,
)
from mmd_operator.knowledge import ModelType, knowledge_of


def _image(path: Path, shade: int) -> str:
    Image.new("RGB", (32, 32), (shade, shade, shade)).save(path)
    return str(path)


def _wav(path: Path, seconds: float) -> str:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(np.zeros(int(seconds * 16000), dtype=np.int16).tobytes())
    return str(path)


def test_the_extra_id_is_a_digest_of_the_image_bytes_in_the_uint64_range(tmp_path: Path) -> None:
    dark, light = _image(tmp_path / "dark.png", 10), _image(tmp_path / "light.png", 240)
    copy = tmp_path / "copy.png"
    copy.write_bytes(Path(dark).read_bytes())
    assert image_extra_id([dark]) == image_extra_id([str(copy)]) != image_extra_id([light])
    assert image_extra_id([dark, light]) != image_extra_id([light, dark])
    url = "https://images.example/cat.jpg"
    assert image_extra_id([url]) == image_extra_id([url]) != image_extra_id([url + "?v=2"])
    frames = tmp_path / "frames"
    frames.mkdir()
    _image(frames / "0.png", 10)
    _image(frames / "1.png", 240)
    assert image_extra_id([str(frames)]) == image_extra_id([dark, light])
    for sources in ([dark], [light], [url], [str(frames)]):
        assert 1 <= image_extra_id(sources) < 1 << 63


def test_mllama_markers_must_number_the_images_as_the_processor_demands(tmp_path: Path) -> None:
    mllama = knowledge_of(ModelType.MLLAMA)
    image = _image(tmp_path / "cat.png", 120)
    with pytest.raises(RequestError) as refused:
        text_request(mllama, TextRequest(text="<|image|><|image|>What is this?", images=[image]))
    assert str(refused.value).startswith(
        "The number of image tokens in each text ([2]) should be the same as the number of provided "
        "images per batch ([1])"
    )
    placed = text_request(mllama, TextRequest(text="<|image|>What is this?", images=[image]))
    assert placed[0].name == "text_input" and placed[0].array.ravel()[0] == b"<|image|>What is this?"
    # mllama answers text without an image; then the text carries no marker either.
    text_request(mllama, TextRequest(text="Hello"))


def test_whisper_audio_past_the_encoders_frames_is_refused_with_the_limit_and_the_fix(
    tmp_path: Path,
) -> None:
    assert (WHISPER_MAX_FRAMES, WHISPER_MAX_SECONDS) == (3000, 30.0)
    assert load_audio(_wav(tmp_path / "short.wav", 30.0)).seconds == pytest.approx(30.0)
    long = _wav(tmp_path / "long.wav", 31.0)
    with pytest.raises(RequestError) as refused:
        load_audio(long)
    assert str(refused.value) == (
        f"{long}: 31.0 s of audio is 3100 mel frames; Whisper's encoder takes at most 3000 (30 s) and "
        "TensorRT-LLM refuses more (Encoder length exceeds maximum encoder input length): split it into "
        "pieces of 30 s or less"
    )
