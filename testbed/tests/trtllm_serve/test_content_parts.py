"""Content parts checked like the real server: unknown types, missing modalities, bad media, URL policy."""

from __future__ import annotations

import base64
import io
import zipfile
from pathlib import Path
from typing import Any

from testbed.tests.trtllm_serve.double import Double, call, chat_request


def _inline(path: Path, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _part(kind: str, url: str) -> dict[str, Any]:
    return {"type": kind, kind: {"url": url}}


def _refused(double: Double, parts: list[dict[str, Any]] | str, **fields: Any) -> str:
    """POST the request, assert the real error object with status 400, return its message."""
    reply = call(f"{double.url}/v1/chat/completions", chat_request(parts, **fields))
    body = reply.json()
    assert reply.status == 400, body
    assert body.keys() == {"object", "message", "type", "param", "code"}, body
    assert (body["object"], body["type"], body["param"], body["code"]) == (
        "error",
        "BadRequestError",
        None,
        400,
    )
    message: str = body["message"]
    return message


def _answer(double: Double, parts: list[dict[str, Any]]) -> str:
    reply = call(f"{double.url}/v1/chat/completions", chat_request(parts))
    assert reply.status == 200, reply.body
    content: str = reply.json()["choices"][0]["message"]["content"]
    return content


def test_an_unknown_part_type_is_refused(qwen: Double) -> None:
    assert _refused(qwen, [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]) == (
        "Unknown part type: input_audio"
    )


def test_a_part_without_type_fails_request_validation(qwen: Double) -> None:
    reply = call(f"{qwen.url}/v1/chat/completions", chat_request([{"text": "no type"}]))
    assert reply.status == 400
    assert reply.json().keys() == {"error"}
    assert "type" in reply.json()["error"]


def test_an_unknown_request_field_fails_request_validation(qwen: Double) -> None:
    reply = call(f"{qwen.url}/v1/chat/completions", chat_request("hi", bogus_field=1))
    assert reply.status == 400
    assert (
        "bogus_field" in reply.json()["error"] and "Extra inputs are not permitted" in reply.json()["error"]
    )


def test_a_body_that_is_no_json_fails_request_validation(qwen: Double) -> None:
    reply = call(f"{qwen.url}/v1/chat/completions", "not an object")
    assert (reply.status, list(reply.json())) == (400, ["error"])


def test_a_known_part_without_content_is_skipped(qwen: Double) -> None:
    assert _answer(qwen, [{"type": "text", "text": "only text"}, {"type": "image_url"}]).endswith(
        "] prompt: only text"
    )


def test_video_to_gemma3_is_refused(gemma: Double, media_dir: Path) -> None:
    video = _part("video_url", _inline(media_dir / "clip.gif", "image/gif"))
    assert _refused(gemma, [video]) == "Unknown modality: video"


def test_audio_is_refused_by_every_model_but_phi4mm(qwen: Double, gemma: Double, media_dir: Path) -> None:
    audio = _part("audio_url", _inline(media_dir / "hello.wav", "audio/wav"))
    for double in (qwen, gemma):
        assert _refused(double, [audio]) == "Unknown modality: audio"


def test_phi4mm_takes_audio_and_images(phi4mm: Double, media_dir: Path) -> None:
    content = _answer(
        phi4mm,
        [
            {"type": "text", "text": "Transcribe."},
            _part("audio_url", _inline(media_dir / "hello.wav", "audio/wav")),
            _part("image_url", _inline(media_dir / "cat.png", "image/png")),
        ],
    )
    assert "[trtllm-serve double, phi4mm]" in content
    assert "audio 1:" in content and "at 16000 Hz, 1 channel(s)." in content
    assert "image 1: 64x48," in content


def test_garbage_media_is_refused(qwen: Double, phi4mm: Double, media_dir: Path) -> None:
    garbage = _inline(media_dir / "garbage.png", "image/png")
    assert _refused(qwen, [_part("image_url", garbage)]).startswith("Failed to load image:")
    assert _refused(qwen, [_part("video_url", garbage)]).startswith("Failed to load video:")
    assert _refused(phi4mm, [_part("audio_url", garbage)]).startswith("Failed to load audio:")
    assert _refused(qwen, [_part("image_url", "data:image/png;base64,@@@")]).startswith("Invalid base64")


def test_only_base64_data_urls_are_read(qwen: Double) -> None:
    assert _refused(qwen, [_part("image_url", "data:image/png,raw-bytes")]) == (
        "Only base64 data URLs are supported for now."
    )


def test_local_paths_are_never_read(qwen: Double, media_dir: Path) -> None:
    for url in (str(media_dir / "cat.png"), f"file://{media_dir / 'cat.png'}"):
        assert "reads no local file" in _refused(qwen, [_part("image_url", url)])


def test_urls_are_fetched_only_from_allowed_hosts(qwen: Double, gemma: Double, file_host: str) -> None:
    url = f"{file_host}/cat.png"
    assert "image 1: 64x48," in _answer(qwen, [_part("image_url", url)])
    refusal = _refused(gemma, [_part("image_url", url)])
    assert "fetches no URL from '127.0.0.1'" in refusal and "MMD_DOUBLE_URL_ALLOW_HOSTS" in refusal
    assert _refused(qwen, [_part("image_url", f"{file_host}/missing.png")]).startswith("Failed to fetch")


def test_image_embeds_are_checked_and_not_mixed_with_images(qwen: Double, media_dir: Path) -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as saved:  # the container torch.save writes
        saved.writestr("tensor/data.pkl", b"\x80\x02}q\x00.")
    embeds = {"type": "image_embeds", "image_embeds": {"data": base64.b64encode(archive.getvalue()).decode()}}
    assert "image embedding 1: embedding of" in _answer(qwen, [embeds])
    not_torch = {"type": "image_embeds", "image_embeds": {"data": base64.b64encode(b"plain").decode()}}
    assert "torch.save" in _refused(qwen, [not_torch])
    image = _part("image_url", _inline(media_dir / "cat.png", "image/png"))
    assert _refused(qwen, [image, embeds]) == (
        "Passing 'multi_modal_data' and 'multi_modal_embeddings' at the same time is not supported."
    )


def test_several_responses_are_refused(qwen: Double) -> None:
    assert _refused(qwen, "hi", n=2) == "Multiple response is not supported in PyTorch workflow"
