"""The double's answers against the official openai SDK's own response models and exceptions."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.pagination import SyncPage
from openai.types import Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from testbed.tests.trtllm_serve.double import Double, call, chat_request, sse_events


def _client(double: Double) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{double.url}/v1", api_key="unused", max_retries=0, timeout=20)


def _image(media_dir: Path) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode((media_dir / "cat.png").read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def test_models_parse_as_the_sdk_page_of_models(qwen: Double) -> None:
    page = _client(qwen).models.list()
    assert isinstance(page, SyncPage)
    [model] = page.data
    assert isinstance(model, Model)
    assert (model.id, model.object, model.owned_by) == ("Qwen2.5-VL-3B-Instruct", "model", "tensorrt_llm")


def test_a_completion_parses_as_chat_completion(qwen: Double, media_dir: Path) -> None:
    messages: Any = [
        {"role": "user", "content": [{"type": "text", "text": "What is it?"}, _image(media_dir)]}
    ]
    completion = _client(qwen).chat.completions.create(model="Qwen2.5-VL-3B-Instruct", messages=messages)
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    # The raw body validates against the SDK model too (not only the SDK's lenient construction).
    raw = call(f"{qwen.url}/v1/chat/completions", chat_request([_image(media_dir)])).json()
    assert ChatCompletion.model_validate(raw).choices[0].message.role == "assistant"


def test_a_stream_parses_as_chat_completion_chunks(qwen: Double) -> None:
    stream = _client(qwen).chat.completions.create(
        model="served",
        messages=[{"role": "user", "content": "stream this"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.endswith("prompt: stream this")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(text.split())
    raw = call(f"{qwen.url}/v1/chat/completions", chat_request("raw", stream=True)).body
    for event in list(sse_events(raw))[:-1]:
        ChatCompletionChunk.model_validate(json.loads(event))


def test_refusals_raise_the_sdk_exceptions_with_the_status(gemma: Double, media_dir: Path) -> None:
    client = _client(gemma)
    video = {"type": "video_url", "video_url": {"url": "data:image/gif;base64,R0lGODlh"}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="served", messages=[{"role": "user", "content": [video]}])  # type: ignore[list-item]
    assert refused.value.status_code == 400
    assert isinstance(refused.value.body, dict) and refused.value.body["message"] == "Unknown modality: video"
    with pytest.raises(openai.BadRequestError) as invalid:
        client.chat.completions.create(
            model="served", messages=[{"role": "user", "content": "hi"}], extra_body={"bogus": 1}
        )
    assert invalid.value.status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.get("/nothing-here", cast_to=object)


def test_an_unreachable_server_raises_the_sdk_connection_error() -> None:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0, timeout=5)
    with pytest.raises(openai.APIConnectionError):
        client.models.list()
