"""Clients written the way users write them: tritonclient used directly, reading the raw arrays.

`grpc_results` returns every response of one request as tritonclient's `InferResult` (a stream when the
model is decoupled), so tests can check shapes exactly as a client sees them. `multimodal_client` and
`whisper_transcript` follow the request and response handling of the serving release's own example
clients (tensorrtllm_backend v0.19.0 `tools/multimodal/client.py` and `tools/whisper/client.py`): what a
new user copies first. Failures raise tritonclient's `InferenceServerException`.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from mmctl.triton.requests import Tensor
from mmd_testbed.triton.serving import Served

TIMEOUT = 60.0


def _client(served: Served) -> Any:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{served.ports.grpc}")


def _input(name: str, array: np.ndarray) -> Any:
    item = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    item.set_data_from_numpy(array)
    return item


def grpc_results(served: Served, model: str, tensors: Sequence[Tensor], outputs: Sequence[str]) -> list[Any]:
    """Every response (with outputs) of one gRPC request, as tritonclient's InferResult."""
    with served.client("grpc") as ours:
        decoupled = ours.is_decoupled(model)
    client = _client(served)
    inputs = [_input(t.name, t.array) for t in tensors]
    requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
    try:
        if not decoupled:
            return [client.infer(model, inputs, outputs=requested, client_timeout=TIMEOUT)]
        results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            client.async_stream_infer(model, inputs, outputs=requested, enable_empty_final_response=True)
            collected = []
            while True:
                result, error = results.get(timeout=TIMEOUT)
                if error is not None:
                    raise error
                response = result.get_response()
                if response.outputs:
                    collected.append(result)
                if response.parameters["triton_final_response"].bool_param:
                    return collected
        finally:
            client.stop_stream(cancel_requests=True)
    finally:
        client.close()


def multimodal_client(
    served: Served,
    image: np.ndarray,
    text: str = "Question: which city is this? Answer:",
    *,
    beam_width: int = 1,
    streaming: bool = False,
    use_bls: bool = False,
) -> list[str]:
    """What the release's multimodal example client prints for an `image_input` type, one string per line.

    Its inputs and defaults (end id -1, pad id 1, top k 1, top p 0, temperature 1, repetition penalty 1,
    16 tokens), only `text_output` requested, then `output[i].decode()` for every beam i of every result;
    when streaming, results are read until one cannot be, as the example does.
    """
    arrays = {
        "text_input": np.array([[text.encode("utf8")]], dtype=np.object_),
        "image_input": image.astype(np.float16),
        "max_tokens": np.array([[16]], dtype=np.int32),
        "beam_width": np.array([[beam_width]], dtype=np.int32),
        "temperature": np.array([[1.0]], dtype=np.float32),
        "end_id": np.array([[-1]], dtype=np.int32),
        "pad_id": np.array([[1]], dtype=np.int32),
        "top_k": np.array([[1]], dtype=np.int32),
        "top_p": np.array([[0.0]], dtype=np.float32),
        "stream": np.array([[streaming]], dtype=bool),
        "repetition_penalty": np.array([[1.0]], dtype=np.float32),
    }
    inputs = [_input(name, array) for name, array in arrays.items()]
    outputs = [grpcclient.InferRequestedOutput("text_output")]
    model = "tensorrt_llm_bls" if use_bls else "ensemble"
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    printed = []
    client = _client(served)
    try:
        if streaming:
            client.start_stream(callback=lambda result, error: done.put((result, error)))
            client.async_stream_infer(model, inputs, outputs=outputs)
            client.stop_stream(cancel_requests=False)  # returns once the server closed the stream
            while True:
                try:
                    result, error = done.get(block=False)
                    output = result.as_numpy("text_output")
                    printed += [output[beam].decode() for beam in range(beam_width)]
                except Exception:  # the example stops at the first result it cannot read
                    break
            return printed
        client.async_infer(model, inputs, lambda result, error: done.put((result, error)), outputs=outputs)
        result, error = done.get(timeout=TIMEOUT)
        if error is not None:
            raise error
        output = result.as_numpy("text_output")
        return [output[beam].decode() for beam in range(beam_width)]
    finally:
        client.close()


def whisper_transcript(served: Served, samples: np.ndarray, rate: int = 16000) -> str:
    """What the release's Whisper example client makes of whisper_bls's answer to one utterance.

    It pads the audio to a multiple of 10 s, sends WAV, WAV_LENS and TEXT_PREFIX, and reads
    `as_numpy("TRANSCRIPTS")[0]`, joining with spaces if that is itself an array.
    """
    padded = np.zeros((1, 10 * rate * (len(samples) // (10 * rate) + 1)), dtype=np.float32)
    padded[0, : len(samples)] = samples
    inputs = [
        _input("WAV", padded),
        _input("WAV_LENS", np.array([[len(samples)]], dtype=np.int32)),
        _input(
            "TEXT_PREFIX",
            np.array([["<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"]], dtype=object),
        ),
    ]
    client = _client(served)
    try:
        result = client.infer("whisper_bls", inputs, outputs=[grpcclient.InferRequestedOutput("TRANSCRIPTS")])
    finally:
        client.close()
    decoded = result.as_numpy("TRANSCRIPTS")[0]
    if isinstance(decoded, np.ndarray):
        return str(b" ".join(decoded).decode("utf-8"))
    return str(decoded.decode("utf-8"))
