"""`mmctl chat`: one OpenAI chat request with image, video and audio parts, through the official openai SDK.

For a `trtllm-serve` deployment (TensorRT-LLM's PyTorch backend, or its double) or any OpenAI-compatible
server. `--url` is the server's base URL (`/v1` is added when missing); the model defaults to the first one
`/v1/models` lists. Parts follow the text in the order given: `--image` (a file, an http(s) URL the server
fetches, or a `data:` URL), `--video` and `--audio` (trtllm-serve's `video_url` and `audio_url` parts; files
are sent inline as base64 data URLs). The answer goes to stdout (token by token with `--stream`), the token
usage and finish reason to stderr. A connection that is never made is made again (`mmctl.reconnect`). A
refusal prints the server's message and the HTTP status; a missing file or an unreachable server, one line;
all exit 1.
"""

from __future__ import annotations

import argparse
import base64
import mimetypes
import os
import sys
from pathlib import Path
from typing import Any

import openai

from mmctl import reconnect

EXIT_FAILED = 1
# The MIME type of an inline file whose suffix tells none.
_DEFAULT_TYPES = {"image_url": "image/png", "video_url": "video/mp4", "audio_url": "audio/wav"}


class ChatError(Exception):
    """Bad input to `mmctl chat` (a missing file, no model served)."""


def base_url(url: str) -> str:
    """The SDK's base URL: the server's URL ending in `/v1`."""
    stripped = url.rstrip("/")
    if "://" not in stripped:
        stripped = f"http://{stripped}"
    return stripped if stripped.endswith("/v1") else f"{stripped}/v1"


def media_url(value: str, part_type: str) -> str:
    """A URL for the part: http(s) and data URLs unchanged, a file inline as a base64 data URL."""
    if value.startswith(("http://", "https://", "data:")):
        return value
    path = Path(value)
    if not path.is_file():
        raise ChatError(f"{value}: no such file (give a file, an http(s) URL or a data: URL)")
    mime = mimetypes.guess_type(path.name)[0] or _DEFAULT_TYPES[part_type]
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def content_parts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The user message's parts: the text, then each image, video and audio."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": args.text}] if args.text else []
    for part_type, values in (
        ("image_url", args.image),
        ("video_url", args.video),
        ("audio_url", args.audio),
    ):
        for value in values or ():
            parts.append({"type": part_type, part_type: {"url": media_url(value, part_type)}})
    return parts


def run_chat(args: argparse.Namespace) -> int:
    """Handle `mmctl chat`."""
    try:
        return reconnect.with_reconnects(
            lambda: _chat(args),
            never_connected=_never_connected,
            retries=args.connect_retries,
            command="chat",
        )
    except ChatError as error:
        print(f"mmctl chat: {error}", file=sys.stderr)
    except openai.APIStatusError as error:
        print(
            f"mmctl chat: the server refused the request (HTTP {error.status_code}): {_message(error)}",
            file=sys.stderr,
        )
    except openai.APIConnectionError as error:
        print(f"mmctl chat: cannot reach {args.url}: {error}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return EXIT_FAILED


def _never_connected(error: Exception) -> bool:
    """Whether the SDK made no connection (refused, no route, or not within the connect timeout)."""
    # The SDK wraps its HTTP library's errors; their class names, not the library, are stable (httpx,
    # httpx2).
    cause = error.__cause__
    return isinstance(error, openai.APIConnectionError) and type(cause).__name__ in (
        "ConnectError",
        "ConnectTimeout",
    )


def _message(error: openai.APIStatusError) -> str:
    """The server's own words: the OpenAI error object's message, or trtllm-serve's `{"error": ...}`."""
    body = error.body
    if isinstance(body, dict):
        for key in ("message", "error", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return error.message


def _chat(args: argparse.Namespace) -> int:
    parts = content_parts(args)
    if not parts:
        raise ChatError("nothing to send: give --text or a media part")
    client = openai.OpenAI(
        base_url=base_url(args.url),
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "unused",
        timeout=openai.Timeout(args.timeout, connect=min(args.timeout, args.connect_timeout)),
        # mmctl's own tries (`reconnect`) send again only what never connected.
        max_retries=0,
    )
    model = args.model or _first_model(client)
    request: dict[str, Any] = {
        "model": model,
        # trtllm-serve's video_url and audio_url parts are not in the SDK's types, so the message is a dict.
        "messages": [{"role": "user", "content": parts}],
    }
    if args.max_tokens is not None:
        request["max_tokens"] = args.max_tokens
    if args.temperature is not None:
        request["temperature"] = args.temperature
    if args.stream:
        usage, finish = _print_stream(client, request)
    else:
        response = client.chat.completions.create(**request)
        choice = response.choices[0]
        print(choice.message.content or "")
        usage, finish = response.usage, choice.finish_reason
    if usage is not None:
        print(
            f"usage: {usage.prompt_tokens} prompt + {usage.completion_tokens} completion = "
            f"{usage.total_tokens} tokens; finish: {finish}; model: {model}",
            file=sys.stderr,
        )
    return 0


def _first_model(client: openai.OpenAI) -> str:
    served = client.models.list().data
    if not served:
        raise ChatError("the server lists no model under /v1/models: pass --model")
    return served[0].id


def _print_stream(client: openai.OpenAI, request: dict[str, Any]) -> tuple[Any, str | None]:
    """Write the streamed tokens as they come; the usage (last chunk) and the finish reason."""
    usage: Any = None
    finish: str | None = None
    stream = client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                sys.stdout.write(choice.delta.content)
                sys.stdout.flush()
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    print()
    return usage, finish


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `chat`'s arguments to its parser."""
    parser.description = (
        "Send one chat request through the official openai SDK to an OpenAI-compatible server "
        "(trtllm-serve) and print the answer and the token usage."
    )
    parser.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="the model name (default: the first one /v1/models lists)")
    parser.add_argument("--text", default="Describe the image.", help="the prompt ('' for none)")
    parser.add_argument("--image", action="append", metavar="FILE|URL", help="an image; repeat for several")
    parser.add_argument(
        "--video", action="append", metavar="FILE|URL", help="a video (trtllm-serve video_url)"
    )
    parser.add_argument("--audio", action="append", metavar="FILE|URL", help="audio (trtllm-serve audio_url)")
    parser.add_argument("--stream", action="store_true", help="print tokens as they are generated")
    parser.add_argument("--max-tokens", type=int, help="the most tokens to generate")
    parser.add_argument("--temperature", type=float)
    parser.add_argument(
        "--api-key", help="sent as the bearer token (default: $OPENAI_API_KEY, else 'unused')"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the answer")
    reconnect.add_arguments(parser)
    parser.set_defaults(handler=run_chat)
