"""`/v1/chat/completions` of the double: the request, its content parts, and a deterministic answer.

The real server (tensorrt_llm/serve/openai_protocol.py, chat_utils.py, openai_server.py) validates the body
with pydantic models that forbid unknown fields; a body that does not validate is answered 400 with
`{"error": "<validation errors>"}`. Content parts are then parsed: `text`, `image_url`, `video_url`,
`audio_url` and `image_embeds` are known (a known part without its content is skipped), any other type fails
with `Unknown part type: <type>`; a modality the model registers no placeholder for fails with `Unknown
modality: <modality>`; mixing images and image embeddings fails too. Every failure after validation is
answered 400 with the OpenAI error object `{"object": "error", "message", "type": "BadRequestError", "param":
null, "code": 400}`. The double answers with a description of what it received (each image's size and mean
colour, each video's frames, each audio's length, the prompt; the MPI world when it spans hosts), one token
per word. Imports pydantic and the double's own modules.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from mmd_testbed.trtllm_serve import media
from mmd_testbed.trtllm_serve.models import Modality, ServedModel

BAD_REQUEST = 400
# Part type -> (the key holding the content, the modality it carries; None for text)
PART_TYPES: dict[str, tuple[str, Modality | None]] = {
    "text": ("text", None),
    "image_url": ("image_url", Modality.IMAGE),
    "video_url": ("video_url", Modality.VIDEO),
    "audio_url": ("audio_url", Modality.AUDIO),
    "image_embeds": ("image_embeds", Modality.IMAGE),
}
MIXED_IMAGES_AND_EMBEDS = (
    "Passing 'multi_modal_data' and 'multi_modal_embeddings' at the same time is not supported."
)
MULTIPLE_RESPONSES = "Multiple response is not supported in PyTorch workflow"
_TOKEN = re.compile(r"\S+\s*")


class ApiError(Exception):
    """An error answer: HTTP status and JSON body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


def bad_request(message: str) -> ApiError:
    """The real server's answer to a request that fails after validation (`create_error_response`)."""
    body = {
        "object": "error",
        "message": message,
        "type": "BadRequestError",
        "param": None,
        "code": BAD_REQUEST,
    }
    return ApiError(BAD_REQUEST, body)


def invalid_body(error: Exception) -> ApiError:
    """The real server's answer to a body that does not validate (its RequestValidationError handler)."""
    return ApiError(BAD_REQUEST, {"error": str(error)})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Strict):
    """`stream_options` of the request."""

    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class ContentPart(_Open):
    """A content part: a `type` and whatever that type carries."""

    type: str


class Message(_Open):
    """A chat message (any role; the real server accepts custom roles)."""

    role: str
    content: str | list[str | ContentPart] | None = None


# The real ChatCompletionRequest's fields the double takes but does not use (those every version read has);
# a name outside these and the ones ChatCompletionRequest reads is refused.
ACCEPTED_UNUSED_FIELDS: dict[str, Any] = {
    "frequency_penalty": float | None,
    "logit_bias": dict[str, float] | None,
    "logprobs": bool | None,
    "top_logprobs": int | None,
    "presence_penalty": float | None,
    "response_format": dict[str, Any] | None,
    "seed": int | None,
    "stop": str | list[str] | None,
    "temperature": float | None,
    "top_p": float | None,
    "tools": list[dict[str, Any]] | None,
    "tool_choice": str | dict[str, Any] | None,
    "user": str | None,
    "best_of": int | None,
    "use_beam_search": bool | None,
    "top_k": int | None,
    "top_p_min": float | None,
    "min_p": float | None,
    "repetition_penalty": float | None,
    "length_penalty": float | None,
    "stop_token_ids": list[int] | None,
    "include_stop_str_in_output": bool | None,
    "ignore_eos": bool | None,
    "min_tokens": int | None,
    "skip_special_tokens": bool | None,
    "spaces_between_special_tokens": bool | None,
    "truncate_prompt_tokens": int | None,
    "lora_request": dict[str, Any] | None,
    "echo": bool | None,
    "add_generation_prompt": bool | None,
    "add_special_tokens": bool | None,
    "documents": list[dict[str, str]] | None,
    "chat_template": str | None,
    "chat_template_kwargs": dict[str, Any] | None,
    "disaggregated_params": dict[str, Any] | None,
    "cache_salt": str | None,
    "reasoning_effort": str | None,
    "prompt_token_ids": list[int] | None,
}


class ChatCompletionRequest(BaseModel):
    """The fields of the request the double reads."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    messages: list[Message]
    model: str
    max_completion_tokens: int | None = Field(default=None, validation_alias="max_tokens")
    n: int = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None


class _WholeRequest(ChatCompletionRequest):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# The whole request as the real server validates it: the fields above and the accepted ones, nothing else.
_ACCEPTED: dict[str, Any] = {name: (annotation, None) for name, annotation in ACCEPTED_UNUSED_FIELDS.items()}
_REQUEST_SCHEMA: type[BaseModel] = create_model("ChatCompletionRequest", __base__=_WholeRequest, **_ACCEPTED)


def parse_request(body: bytes) -> ChatCompletionRequest:
    """The validated request, or ApiError 400 `{"error": ...}`."""
    try:
        whole = _REQUEST_SCHEMA.model_validate_json(body)
        request = ChatCompletionRequest.model_validate(
            whole.model_dump(include=set(ChatCompletionRequest.model_fields))
        )
    except ValidationError as error:
        raise invalid_body(error) from error
    if request.stream_options is not None and not request.stream:
        raise invalid_body(ValueError("Stream options can only be defined when stream is true."))
    return request


@dataclass(frozen=True)
class MediaPart:
    """One media part of the request: its modality and its URL (or base64 embedding)."""

    modality: Modality
    source: str
    is_embedding: bool


@dataclass(frozen=True)
class Answer:
    """What the double answers: the tokens and the token counts."""

    tokens: tuple[str, ...]
    finish_reason: str
    prompt_tokens: int

    @property
    def text(self) -> str:
        """The answer's text."""
        return "".join(self.tokens)


def _part_content(part: ContentPart, key: str) -> Any:
    """What a known part carries: `text`, or the `url` / `data` inside its object (None: skipped)."""
    value = getattr(part, key, None)
    if key == "text" or value is None:
        return value
    if not isinstance(value, dict):
        raise bad_request(f"'{type(value).__name__}' object has no attribute 'get'")
    return value.get("data" if key == "image_embeds" else "url")


def collect_parts(request: ChatCompletionRequest, served: ServedModel) -> tuple[list[str], list[MediaPart]]:
    """The text parts and media parts, checked like chat_utils does, in message order."""
    texts: list[str] = []
    parts: list[MediaPart] = []
    for message in request.messages:
        content = message.content
        items: list[str | ContentPart] = [content] if isinstance(content, str) else list(content or [])
        for item in items:
            if isinstance(item, str):
                texts.append(item)
                continue
            if item.type not in PART_TYPES:
                raise bad_request(f"Unknown part type: {item.type}")
            key, modality = PART_TYPES[item.type]
            value = _part_content(item, key)
            if value is None:
                continue  # the real server logs a warning and skips the part
            if not isinstance(value, str):
                raise bad_request(f"{item.type} content must be a string")
            if modality is None:
                texts.append(value)
                continue
            if modality not in served.architecture.modalities:
                raise bad_request(f"Unknown modality: {modality}")
            parts.append(MediaPart(modality, value, is_embedding=item.type == "image_embeds"))
    if any(p.is_embedding for p in parts) and any(not p.is_embedding for p in parts):
        raise bad_request(MIXED_IMAGES_AND_EMBEDS)
    return texts, parts


def describe(parts: list[MediaPart], policy: media.MediaPolicy, video_frames: int) -> list[str]:
    """One description per media part, numbered per modality; ApiError 400 when one cannot be loaded."""
    counts: dict[str, int] = {}
    lines: list[str] = []
    try:
        for part in parts:
            label = "image embedding" if part.is_embedding else str(part.modality)
            counts[label] = counts.get(label, 0) + 1
            if part.is_embedding:
                found = media.describe_image_embeds(part.source)
            elif part.modality is Modality.IMAGE:
                found = media.describe_image(media.media_bytes(part.source, policy))
            elif part.modality is Modality.VIDEO:
                found = media.describe_video(media.media_bytes(part.source, policy), video_frames)
            else:
                found = media.describe_audio(media.media_bytes(part.source, policy))
            lines.append(f"{label} {counts[label]}: {found}.")
    except media.MediaError as error:
        raise bad_request(str(error)) from error
    return lines


def answer(
    request: ChatCompletionRequest,
    served: ServedModel,
    policy: media.MediaPolicy,
    video_frames: int,
    world: str | None = None,
) -> Answer:
    """The deterministic answer to a validated request, or ApiError 400.

    `world` (the MPI world, when it spans hosts) follows the header: `world: 2 ranks on 2 hosts: a b.`
    """
    if request.n != 1:
        raise bad_request(MULTIPLE_RESPONSES)
    texts, parts = collect_parts(request, served)
    prompt = " ".join(" ".join(texts).split())
    lines = [
        f"[trtllm-serve double, {served.architecture.model_type}]",
        *([f"world: {world}."] if world else []),
        *describe(parts, policy, video_frames),
    ]
    lines.append(f"prompt: {prompt}" if prompt else "no prompt.")
    tokens = tuple(_TOKEN.findall(" ".join(lines)))
    limit = request.max_completion_tokens
    finish_reason = "stop"
    if limit is not None and limit < len(tokens):
        tokens, finish_reason = tokens[: max(limit, 0)], "length"
    prompt_tokens = len(request.messages) + len(prompt.split()) + len(parts)
    return Answer(tokens=tokens, finish_reason=finish_reason, prompt_tokens=prompt_tokens)


def _usage(answer: Answer, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "total_tokens": answer.prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def completion(request: ChatCompletionRequest, answer: Answer) -> dict[str, Any]:
    """The non-streaming response body (ChatCompletionResponse)."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": answer.text,
                    "reasoning_content": None,
                    "tool_calls": [],
                },
                "logprobs": None,
                "finish_reason": answer.finish_reason,
                "stop_reason": None,
            }
        ],
        "usage": _usage(answer, len(answer.tokens)),
        "prompt_token_ids": None,
    }


def chunks(request: ChatCompletionRequest, answer: Answer) -> Iterator[dict[str, Any]]:
    """The streamed response bodies (ChatCompletionStreamResponse), before the closing `[DONE]`."""
    chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    options = request.stream_options
    include_usage = bool(options and options.include_usage)
    continuous = bool(include_usage and options and options.continuous_usage_stats)

    def chunk(delta: dict[str, Any], finish: str | None, sent: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if continuous:
            body["usage"] = _usage(answer, sent)
        return body

    yield chunk({"role": "assistant", "content": ""}, None, 0)
    last = len(answer.tokens) - 1
    for index, token in enumerate(answer.tokens):
        yield chunk({"content": token}, answer.finish_reason if index == last else None, index + 1)
    if not answer.tokens:
        yield chunk({}, answer.finish_reason, 0)
    if include_usage:
        yield {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "choices": [],
            "usage": _usage(answer, len(answer.tokens)),
        }
