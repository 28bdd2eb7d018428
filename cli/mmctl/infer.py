"""`mmctl infer`: send one request to a serving model and print the answer and the latency.

Thin: the request is built by `triton.requests` from the model type's knowledge and sent by
`triton.client`. The model type comes from `--model-type` or is read from the server's configs. An image
or video is named by a `prompt_table_extra_id`, a digest of its bytes, where the type takes one (a
deployment with KV-cache reuse refuses an image it cannot name). The text
goes to stdout (piece by piece when streaming one beam; one `[beam N] ...` line per beam when the server
answers several beams, once the answer is complete: streamed with beam search, every response carries
every beam's text so far), the latency to stderr. A connection that is never made is made again
(`mmctl.reconnect`). Bad input, an unreachable server, a model that is not ready or an input the type
does not take: one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from mmctl import reconnect
from mmctl.triton.client import ServerError, TritonClient, UnreachableError
from mmctl.triton.requests import (
    RequestError,
    Sampling,
    TextRequest,
    audio_request,
    image_extra_id,
    load_audio,
    text_request,
)
from mmd_operator.knowledge import KNOWLEDGE, ImageInput, ModelType, RepositoryLayout, knowledge_of

EXIT_FAILED = 1


def run_infer(args: argparse.Namespace) -> int:
    """Handle `mmctl infer`."""
    if args.model_type and ModelType(args.model_type) not in KNOWLEDGE:
        # A type only trtllm-serve serves: no Triton server serves it, so nothing is sent.
        print(
            f"mmctl infer: {args.model_type} is served by the trtllm-serve runtime, whose OpenAI API "
            f"`mmctl infer` does not speak: use mmctl chat --url http://<host>:8000 instead "
            "(docs/clients.md)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        return reconnect.with_reconnects(
            lambda: _infer(args),
            never_connected=lambda error: isinstance(error, UnreachableError),
            retries=args.connect_retries,
            command="infer",
        )
    except (RequestError, ServerError) as error:
        print(f"mmctl infer: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def _infer(args: argparse.Namespace) -> int:
    with TritonClient(args.url, timeout=args.timeout, connect_timeout=args.connect_timeout) as client:
        model_type = ModelType(args.model_type) if args.model_type else None
        if model_type is None:
            client.check_live()
            model_type = client.detect_model_type()
        knowledge = knowledge_of(model_type)
        if knowledge.layout is RepositoryLayout.WHISPER:
            if args.audio is None:
                raise RequestError(f"{model_type} transcribes audio: pass --audio WAV")
            model, output = "whisper_bls", "TRANSCRIPTS"
            tensors = audio_request(knowledge, load_audio(args.audio), args.prefix)
        else:
            if args.audio is not None:
                raise RequestError(f"{model_type} does not accept audio")
            model, output = ("tensorrt_llm_bls" if args.bls else "ensemble"), "text_output"
            media = [*(args.image or ()), *([args.video] if args.video else [])]
            extra_id = args.prompt_table_extra_id
            if extra_id is None and media and knowledge.prompt_table_extra_id:
                # With serving.kvCacheReuse the server refuses an image it cannot name; else it is ignored.
                extra_id = image_extra_id(media)
            request = TextRequest(
                text=args.text,
                images=args.image or (),
                video=args.video,
                frames=args.frames,
                max_tokens=args.max_tokens,
                sampling=Sampling(
                    temperature=args.temperature,
                    top_k=args.top_k,
                    top_p=args.top_p,
                    repetition_penalty=args.repetition_penalty,
                    presence_penalty=args.presence_penalty,
                    frequency_penalty=args.frequency_penalty,
                    length_penalty=args.length_penalty,
                    seed=args.seed,
                    beam_width=args.beam_width,
                ),
                end_id=args.end_id,
                pad_id=args.pad_id,
                stream=args.stream,
                prompt_table_extra_id=extra_id,
                lora_task_id=args.lora_task_id,
                lora_path=args.lora_path,
                inline_images_as_urls=client.endpoint.protocol == "http",
                # Asked only when it matters: a URL-capable type sent an image.
                server_fetches_urls=bool(args.image)
                and ImageInput.URL in knowledge.image_inputs
                and ImageInput.URL in client.input_names(model),
                seed_input="seed"
                if args.seed is not None and "seed" in client.input_names(model)
                else "random_seed",
            )
            tensors = text_request(knowledge, request)
        client.check_ready(model)
        client.check_inputs(model, tensors, model_type)
        started = time.perf_counter()
        first: float | None = None
        pieces = 0
        answers: list[str] = []  # one per beam
        streamed = False
        for response in client.responses(model, tensors, [output]):
            first = first if first is not None else time.perf_counter() - started
            texts = response.texts(output)
            pieces += 1
            if not texts:
                continue
            if model == "whisper_bls" or len(texts) > 1:
                # Whole answers so far: each streamed transcript is the transcript so far, and with beam
                # search each response carries every beam's text so far (beams can change earlier
                # tokens), so the last response holds the final beams.
                answers = texts
                continue
            answers = ["".join(answers) + "".join(texts)]
            if args.stream:
                sys.stdout.write("".join(texts))
                sys.stdout.flush()
                streamed = True
        _print_answers(answers, streamed)
        total = time.perf_counter() - started
        latency = f"latency {total * 1000:.1f} ms"
        if pieces > 1:
            latency += f" (first response {first * 1000 if first else 0:.1f} ms, {pieces} responses)"
        print(f"{latency}, {model_type} via {model} over {client.endpoint.protocol}", file=sys.stderr)
    return 0


def _print_answers(answers: list[str], streamed: bool) -> None:
    """The answer, or one `[beam N] ...` line per beam when the server answered several beams."""
    if len(answers) <= 1:
        print("" if streamed else "".join(answers))
        return
    if streamed:
        print()
    for beam, answer in enumerate(answers):
        print(f"[beam {beam}] {answer}")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `infer`'s arguments to its parser."""
    parser.description = (
        "Send one request to the ensemble (or tensorrt_llm_bls with --bls, whisper_bls for Whisper) "
        "and print the answer and the latency. The model type decides what is sent: preprocessed "
        "pixels, raw pixels, an image URL, video frames or 16 kHz audio."
    )
    parser.add_argument("--url", required=True, help="http://host:port or grpc://host:port (no scheme: HTTP)")
    parser.add_argument(
        "--model-type",
        choices=[t.value for t in ModelType],
        help="the served model type (default: read from the server's configs where they tell it); "
        "the types only trtllm-serve serves take mmctl chat",
    )
    parser.add_argument(
        "--text", default="Describe the image.", help="the prompt (the type's template is applied)"
    )
    parser.add_argument(
        "--image", action="append", metavar="PATH|URL", help="an image; repeat for several (VILA)"
    )
    parser.add_argument("--video", metavar="PATH", help="frame directory, GIF, or video file (needs PyAV)")
    parser.add_argument("--frames", type=int, help="how many frames to sample from --video")
    parser.add_argument("--audio", metavar="WAV", help="audio to transcribe (Whisper); resampled to 16 kHz")
    parser.add_argument("--prefix", help="Whisper decoder prompt (default: the type's transcribe prompt)")
    parser.add_argument("--stream", action="store_true", help="stream tokens (needs a streaming deployment)")
    parser.add_argument("--bls", action="store_true", help="send to tensorrt_llm_bls instead of the ensemble")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--top-k", type=int)
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--repetition-penalty", type=float)
    parser.add_argument("--presence-penalty", type=float)
    parser.add_argument("--frequency-penalty", type=float)
    parser.add_argument("--length-penalty", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument(
        "--beam-width",
        type=int,
        help="beams, from 1 up to the served width (status.derived.tritonMaxBeamWidth); one line per beam",
    )
    parser.add_argument("--end-id", type=int, help="default: the model type's end token")
    parser.add_argument("--pad-id", type=int, help="default: the model type's pad token")
    parser.add_argument(
        "--prompt-table-extra-id",
        type=int,
        metavar="N",
        help="an id >= 1 naming the image, which KV-cache reuse needs (default: a digest of its bytes)",
    )
    parser.add_argument("--lora-task-id", type=int, metavar="N", help="LoRA adapter id (InternLM-XComposer2)")
    parser.add_argument(
        "--lora-path", metavar="DIR", help="converted adapter (model.lora_weights.npy, model.lora_config.npy)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server")
    reconnect.add_arguments(parser)
    parser.set_defaults(handler=run_infer)
