"""Talk to a serving tritonserver over HTTP or gRPC (tritonclient): readiness, configs, requests, streams.

`url` is `http://host:port` or `grpc://host:port` (no scheme: HTTP). A model whose responses are decoupled
(the operator renders `tensorrt_llm` decoupled when streaming is on, and an ensemble over it inherits that)
only answers streaming calls, so `responses()` picks the call the server can answer: a unary inference,
a gRPC stream, or Triton's HTTP generate extension (`/generate`, `/generate_stream`, which carry only
text and scalars). The model type is taken from the caller or read from the server's configs. Failures
raise `ServerError` with one line. Part of the triton adapter: imports tritonclient, numpy and our
knowledge table and request builder.
"""

from __future__ import annotations

import contextlib
import errno
import json
import queue
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from mmctl.triton.requests import IMAGE_SOURCE_INPUTS, Tensor
from mmd_operator.knowledge import KNOWLEDGE, ImageInput, ModelKnowledge, ModelType, RepositoryLayout

# Ensemble inputs that tell model types apart.
# `image_url_input` tells no type apart: it is declared only where the resource allows URL inputs.
_SIGNATURE_INPUTS = (
    *(name for name in IMAGE_SOURCE_INPUTS if name != ImageInput.URL),
    "prompt_table_extra_id",
    "lora_task_id",
)
_STREAM_TIMEOUT = 300.0
# tritonclient's own limit on a message's size (INT32_MAX), kept when the channel's options are given.
_MAX_GRPC_MESSAGE = 2**31 - 1


class ServerError(Exception):
    """The server cannot be reached, is not ready, or refused the request."""


class UnreachableError(ServerError):
    """No connection was made: refused, no route, or not made within the connect timeout.

    The request never reached a server, so sending it again is safe (`mmctl.reconnect`).
    """


@dataclass(frozen=True)
class Endpoint:
    """Protocol and `host:port` of a server."""

    protocol: str
    address: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """Parse `http://host:port`, `grpc://host:port` or `host:port`.

        Raises:
            ServerError: for another scheme or a missing port.
        """
        parsed = urlparse(url if "://" in url else f"http://{url}")
        if parsed.scheme not in ("http", "grpc"):
            raise ServerError(f"{url}: use http://host:port or grpc://host:port")
        if parsed.port is None or not parsed.hostname:
            raise ServerError(f"{url}: no host:port")
        return cls(parsed.scheme, f"{parsed.hostname}:{parsed.port}")


@dataclass(frozen=True)
class Response:
    """One response: output name to array.

    String outputs arrive flat, as the serving image's models send them: `text_output` holds one string
    per beam (batch items x beams), whisper_bls's `TRANSCRIPTS` one transcript.
    """

    outputs: dict[str, np.ndarray]

    def texts(self, name: str) -> list[str]:
        """Every string of output `name`, in order (one per beam for `text_output`; [] when absent)."""
        values = self.outputs.get(name)
        if values is None:
            return []
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]

    def text(self, name: str) -> str:
        """The first string of output `name` ('' when absent): the answer when there is one beam."""
        texts = self.texts(name)
        return texts[0] if texts else ""


def _message(error: Exception) -> str:
    text = error.message() if isinstance(error, InferenceServerException) else str(error)
    return " ".join(str(text).split())


def _never_connected(error: Exception) -> bool:
    """Whether `error` says no connection was made, so the server never saw the request."""
    if isinstance(error, InferenceServerException):
        # gRPC's words when the channel made no connection in its connect timeout, or was refused.
        return error.status() == "StatusCode.UNAVAILABLE" and "failed to connect" in str(error.message())
    # HTTP: refused or no route. A timeout is not taken: over HTTP the client cannot tell a connection
    # that was never made from an answer that is slow, and a slow request must not be sent twice.
    if isinstance(error, urllib.error.HTTPError):
        return False
    cause = error.reason if isinstance(error, urllib.error.URLError) else error
    return isinstance(cause, ConnectionRefusedError) or (
        isinstance(cause, OSError) and cause.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)
    )


def _failure(text: str, error: Exception) -> ServerError:
    """`text: <the error's words>` as the ServerError to raise: UnreachableError when nothing connected."""
    kind = UnreachableError if _never_connected(error) else ServerError
    return kind(f"{text}: {_message(error)}")


def _channel_args(connect_timeout: float) -> list[tuple[str, int]]:
    """The channel options tritonclient sets itself, and a connect timeout (gRPC's default is 20 s)."""
    keepalive = grpcclient.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", _MAX_GRPC_MESSAGE),
        ("grpc.max_receive_message_length", _MAX_GRPC_MESSAGE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(keepalive.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        # gRPC core takes its connect timeout from the least reconnect backoff.
        ("grpc.min_reconnect_backoff_ms", max(100, int(connect_timeout * 1000))),
    ]


class TritonClient:
    """A client for one server; not shared between threads."""

    def __init__(self, url: str, timeout: float = 60.0, connect_timeout: float | None = None) -> None:
        self.endpoint = Endpoint.parse(url)
        self.timeout = timeout
        self._configs: dict[str, dict[str, Any]] = {}
        connect = timeout if connect_timeout is None else min(timeout, connect_timeout)
        if self.endpoint.protocol == "grpc":
            options = None if connect_timeout is None else _channel_args(connect)
            self._grpc = grpcclient.InferenceServerClient(self.endpoint.address, channel_args=options)
        else:
            self._http = httpclient.InferenceServerClient(
                self.endpoint.address, connection_timeout=connect, network_timeout=timeout
            )

    def close(self) -> None:
        """Release the connection."""
        (self._grpc if self.endpoint.protocol == "grpc" else self._http).close()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def _client(self) -> Any:
        return self._grpc if self.endpoint.protocol == "grpc" else self._http

    # --- server state ------------------------------------------------------------------------------

    def check_live(self) -> None:
        """Raise unless the server answers.

        Raises:
            ServerError: naming the address.
        """
        where = f"{self.endpoint.protocol}://{self.endpoint.address}"
        try:
            live = self._client.is_server_live()
        except Exception as error:
            raise _failure(f"cannot reach tritonserver at {where}", error) from None
        if not live:
            raise ServerError(f"tritonserver at {where} is not live")

    def check_ready(self, model: str) -> None:
        """Raise unless the server answers and `model` is ready.

        Raises:
            ServerError: naming what is wrong.
        """
        self.check_live()
        where = f"{self.endpoint.protocol}://{self.endpoint.address}"
        try:
            ready = self._client.is_model_ready(model)
        except Exception as error:
            raise _failure(f"{where}: cannot ask whether {model} is ready", error) from None
        if not ready:
            raise ServerError(f"model {model!r} is not ready on {where} (see its /v2/models/{model}/ready)")

    def model_names(self) -> list[str]:
        """Names of the models in the server's repository."""
        try:
            index = self._client.get_model_repository_index(**self._json())
        except Exception as error:
            raise _failure("cannot list the server's models", error) from None
        entries = index.get("models", []) if isinstance(index, dict) else index
        return sorted({entry["name"] for entry in entries})

    def model_config(self, model: str) -> dict[str, Any]:
        """The configuration the server loaded for `model` (JSON form)."""
        if model not in self._configs:
            try:
                config = self._client.get_model_config(model, **self._json())
            except Exception as error:
                raise _failure(f"cannot read the config of {model}", error) from None
            self._configs[model] = config.get("config", config)
        return self._configs[model]

    def _json(self) -> dict[str, Any]:
        return {"as_json": True} if self.endpoint.protocol == "grpc" else {}

    def input_names(self, model: str) -> list[str]:
        """Input tensor names `model` declares."""
        return [tensor["name"] for tensor in self.model_config(model).get("input", [])]

    def is_decoupled(self, model: str) -> bool:
        """Whether `model` answers only streaming calls (itself, or as an ensemble over such a model)."""
        config = self.model_config(model)
        if config.get("model_transaction_policy", {}).get("decoupled"):
            return True
        steps = config.get("ensemble_scheduling", {}).get("step", [])
        return any(self.is_decoupled(step["model_name"]) for step in steps)

    def detect_model_type(self) -> ModelType:
        """The model type, read from which models and ensemble inputs the server has.

        Raises:
            ServerError: if the configs fit no type or several types that need different requests.
        """
        names = self.model_names()
        if "whisper_bls" in names:
            return ModelType.WHISPER  # distil_whisper takes exactly the same requests
        if "ensemble" not in names:
            raise ServerError(
                "the server has neither an ensemble nor whisper_bls: not an mmd-operator repository"
            )
        seen = set(self.input_names("ensemble")) & set(_SIGNATURE_INPUTS)
        candidates = [t for t, k in KNOWLEDGE.items() if _signature(k) == seen]
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise ServerError(f"no model type takes exactly these ensemble inputs: {sorted(seen)}")
        names_text = ", ".join(c.value for c in candidates)
        raise ServerError(f"the server's configs fit {names_text} alike; pass --model-type")

    # --- requests ----------------------------------------------------------------------------------

    def check_inputs(self, model: str, tensors: Sequence[Tensor], model_type: str) -> None:
        """Refuse tensors `model` does not declare, naming what it does take."""
        declared = set(self.input_names(model))
        unknown = [t.name for t in tensors if t.name not in declared]
        if unknown:
            takes = sorted(declared & {*_SIGNATURE_INPUTS, ImageInput.URL}) or ["text only"]
            raise ServerError(
                f"{model} on this server does not accept {', '.join(unknown)} "
                f"(its {model_type} inputs: {', '.join(takes)})"
            )

    def responses(self, model: str, tensors: Sequence[Tensor], outputs: Sequence[str]) -> Iterator[Response]:
        """Send one request and yield its responses as they arrive.

        Raises:
            ServerError: when the server refuses the request or the transport cannot carry it.
        """
        decoupled = self.is_decoupled(model)
        streaming = any(t.name == "stream" and bool(t.array.reshape(-1)[0]) for t in tensors)
        if streaming and not decoupled:
            raise ServerError(f"{model} on this server does not stream (deployed without serving.streaming)")
        if self.endpoint.protocol == "grpc":
            if decoupled:
                yield from self._grpc_stream(model, tensors, outputs)
            else:
                yield self._grpc_infer(model, tensors, outputs)
            return
        if not decoupled and not streaming:
            yield self._http_infer(model, tensors, outputs)
            return
        yield from self._http_generate(model, tensors, stream=streaming)

    def _grpc_infer(self, model: str, tensors: Sequence[Tensor], outputs: Sequence[str]) -> Response:
        inputs = _grpc_inputs(tensors)
        requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
        try:
            result = self._grpc.infer(model, inputs, outputs=requested, client_timeout=self.timeout)
        except InferenceServerException as error:
            raise _failure(model, error) from None
        return Response(
            {name: result.as_numpy(name) for name in outputs if result.as_numpy(name) is not None}
        )

    def _grpc_stream(
        self, model: str, tensors: Sequence[Tensor], outputs: Sequence[str]
    ) -> Iterator[Response]:
        results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        inputs = _grpc_inputs(tensors)
        requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
        self._grpc.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            self._grpc.async_stream_infer(model, inputs, outputs=requested, enable_empty_final_response=True)
            while True:
                try:
                    result, error = results.get(timeout=_STREAM_TIMEOUT)
                except queue.Empty:
                    raise ServerError(f"{model}: no response within {_STREAM_TIMEOUT:.0f} s") from None
                if error is not None:
                    raise _failure(model, error)
                response = result.get_response()
                arrays = {name: result.as_numpy(name) for name in outputs}
                arrays = {name: value for name, value in arrays.items() if value is not None}
                if arrays:
                    yield Response(arrays)
                if response.parameters["triton_final_response"].bool_param:
                    return
        finally:
            self._grpc.stop_stream(cancel_requests=True)

    def _http_infer(self, model: str, tensors: Sequence[Tensor], outputs: Sequence[str]) -> Response:
        inputs = []
        for tensor in tensors:
            item = httpclient.InferInput(tensor.name, list(tensor.array.shape), tensor.datatype)
            item.set_data_from_numpy(tensor.array, binary_data=True)
            inputs.append(item)
        requested = [httpclient.InferRequestedOutput(name, binary_data=True) for name in outputs]
        try:
            result = self._http.infer(model, inputs, outputs=requested)
        except InferenceServerException as error:
            raise _failure(model, error) from None
        return Response(
            {name: result.as_numpy(name) for name in outputs if result.as_numpy(name) is not None}
        )

    def _http_generate(self, model: str, tensors: Sequence[Tensor], *, stream: bool) -> Iterator[Response]:
        body: dict[str, Any] = {}
        for tensor in tensors:
            if tensor.array.size != 1:
                raise ServerError(
                    f"{model} answers only streaming calls here, and HTTP's generate endpoint carries no "
                    f"{tensor.name} tensor; use grpc://{self.endpoint.address.rsplit(':', 1)[0]}:<grpc port>"
                )
            value = tensor.array.reshape(-1)[0]
            body[tensor.name] = value.decode("utf-8") if isinstance(value, bytes) else value.item()
        url = f"http://{self.endpoint.address}/v2/models/{model}/generate{'_stream' if stream else ''}"
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            reply = urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")
            with contextlib.suppress(json.JSONDecodeError, AttributeError):
                detail = json.loads(detail).get("error", detail)
            raise ServerError(f"{model}: {' '.join(str(detail).split())}") from None
        except (urllib.error.URLError, OSError) as error:
            kind = UnreachableError if _never_connected(error) else ServerError
            raise kind(f"cannot reach {url}: {getattr(error, 'reason', error)}") from None
        with reply:
            if not stream:
                yield _generate_response(json.loads(reply.read()))
                return
            for raw in reply:
                line = raw.decode("utf-8").strip()
                if line.startswith("data:"):
                    yield _generate_response(json.loads(line[len("data:") :]))


def _generate_response(payload: dict[str, Any]) -> Response:
    if "error" in payload:
        raise ServerError(" ".join(str(payload["error"]).split()))
    outputs = {}
    for name, value in payload.items():
        if name in ("model_name", "model_version", "id"):
            continue
        if isinstance(value, str):
            outputs[name] = np.array([value.encode("utf-8")], dtype=np.object_)
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            # A string output with several elements (one per beam) arrives as a JSON list.
            outputs[name] = np.array([v.encode("utf-8") for v in value], dtype=np.object_)
        else:
            outputs[name] = np.asarray(value)
    return Response(outputs)


def _signature(knowledge: ModelKnowledge) -> set[str]:
    """The type-telling inputs the operator renders into a type's ensemble."""
    if knowledge.layout is RepositoryLayout.WHISPER:
        return set()
    names = {str(source) for source in knowledge.image_inputs if source is not ImageInput.URL}
    if knowledge.video:
        names.add("video_bytes_input")
    if knowledge.layout is RepositoryLayout.XCOMPOSER2:
        return {str(ImageInput.TENSOR), "lora_task_id"}
    if knowledge.prompt_table_extra_id:
        names.add("prompt_table_extra_id")
    return names


def _grpc_inputs(tensors: Sequence[Tensor]) -> list[grpcclient.InferInput]:
    inputs = []
    for tensor in tensors:
        item = grpcclient.InferInput(tensor.name, list(tensor.array.shape), tensor.datatype)
        item.set_data_from_numpy(tensor.array)
        inputs.append(item)
    return inputs
