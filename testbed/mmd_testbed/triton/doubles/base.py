"""What every double shares: the contract check at load time, the `Model` base, tensor and image helpers.

Runs inside tritonserver's Python backend stub, as part of the package `triton_doubles` (`runtime`).
Imports numpy, Pillow, the standard library, `triton_python_backend_utils` and the codec.
"""

from __future__ import annotations

import abc
import base64
import re
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from . import codec

_NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_STRING": np.object_,
}
SPECIAL_TOKENS = re.compile(r"<\|[^|>]*\|>")
IMAGE_SOURCES = ("image_input", "image_bytes_input", "image_url_input", "video_bytes_input")
# The literal the real preprocessing splits prompts on when max_num_images is above 1, whatever the type.
MULTI_IMAGE_MARKER = "<image>"
# Python's message (3.11 and later) for a local variable read before any assignment.
UNBOUND = "cannot access local variable '{}' where it is not associated with a value"
# The tiles mllama's processor pads every image to, and Qwen2-VL's flattened patch (3 x 2 x 14 x 14).
MLLAMA_TILES = 4
QWEN2_VL_GRID = (1, 2, 2)
QWEN2_VL_PATCH = 1176
# Width of the fake encoder features and prompt tables.
HIDDEN = 8


class DoubleError(Exception):
    """A request the double refuses for a reason of its own (it says so: its model's name comes first)."""


class RefusalError(Exception):
    """A refusal the real model answers as an error response: its text, as the client receives it.

    The Python models' own refusals are instead raised out of `execute` as the real ones are (the
    exception type and message the real code raises), so Triton's Python backend words them itself:
    `Failed to process the request(s) for model '<instance>', message: <Type>: <message>`.
    """


def _dims(tensor: dict[str, Any]) -> list[int]:
    return [int(d) for d in tensor.get("dims", [])]


def check_loaded_config(spec: dict[str, Any], model_config: dict[str, Any]) -> None:
    """Fail loading unless Triton loaded exactly the contract this double was generated from."""
    contract = spec["contract"]
    problems = []
    for kind in ("input", "output"):
        loaded = {t["name"]: t for t in model_config.get(kind, [])}
        declared = contract[kind]
        if set(loaded) != set(declared):
            problems.append(f"{kind}s differ: {sorted(set(loaded) ^ set(declared))}")
            continue
        for name, want in declared.items():
            got = loaded[name]
            if got["data_type"] != want["data_type"] or _dims(got) != want["dims"]:
                problems.append(f"{kind} {name}: loaded {got['data_type']}{_dims(got)}, contract {want}")
            if kind == "input" and bool(got.get("optional", False)) != want["optional"]:
                problems.append(f"input {name}: optional differs")
    decoupled = bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
    if decoupled != contract["decoupled"]:
        problems.append(f"decoupled is {decoupled}, contract {contract['decoupled']}")
    if int(model_config.get("max_batch_size", 0)) != contract["max_batch_size"]:
        problems.append("max_batch_size differs")
    if problems:
        raise DoubleError(
            f"{spec['model']}: loaded config is not the rendered contract: {'; '.join(problems)}"
        )


def is_true(value: str | None) -> bool:
    """A boolean model parameter as the real models read one (unset and `${...}` mean false)."""
    return (value or "").strip().lower() in ("true", "yes", "1", "t")


class Model(abc.ABC):
    """Common plumbing: contract-typed outputs, inputs by name, responses for either transaction policy."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.contract = spec["contract"]
        self.decoupled = bool(self.contract["decoupled"])
        self.params = spec.get("parameters", {})

    # --- tensors ---------------------------------------------------------------------------------

    def inputs(self, request: Any) -> dict[str, Any]:
        """The declared inputs that arrived with `request`, by name."""
        found = {}
        for name in self.contract["input"]:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                found[name] = tensor
        return found

    def dtype(self, name: str, kind: str = "input") -> str:
        """The declared data type (`TYPE_...`) of an input or output."""
        return str(self.contract[kind][name]["data_type"])

    def array(self, tensor: Any, name: str) -> np.ndarray:
        """The values of input `tensor` (BF16 read as float32)."""
        if self.dtype(name) == "TYPE_BF16":
            return codec.bf16_from_capsule(tensor.to_dlpack())
        return np.asarray(tensor.as_numpy())

    def scalar(self, inputs: dict[str, Any], name: str, row: int, default: float) -> float:
        """Batch item `row`'s value of a one-value-per-item input, or `default` when it is absent."""
        if name not in inputs:
            return default
        values = self.array(inputs[name], name).reshape(-1)
        return float(values[row] if values.size > row else values[0])

    def output(self, name: str, values: Any) -> Any:
        """Output `name` holding `values` in its declared data type."""
        dtype = self.dtype(name, "output")
        if dtype == "TYPE_BF16":
            return pb_utils.Tensor.from_dlpack(name, codec.bf16_capsule(np.asarray(values, np.float32)))
        return pb_utils.Tensor(name, np.asarray(values, dtype=_NUMPY[dtype]))

    def declares(self, name: str) -> bool:
        """Whether the contract declares output `name`."""
        return name in self.contract["output"]

    def describe(self, name: str, values: np.ndarray, with_hash: bool = False) -> str:
        """`TYPE[shape]` of an input (and a hash of its bytes), for traces."""
        kind = self.dtype(name).removeprefix("TYPE_")
        text = f"{kind}{list(values.shape)}".replace(" ", "")
        if with_hash:
            text += "#" + codec.short_hash(np.ascontiguousarray(values).tobytes())
        return text

    # --- responses -------------------------------------------------------------------------------

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Answer every request; a `RefusalError` or `DoubleError` becomes that request's error response.

        Any other exception leaves `execute`, as the real Python models' do, and fails every request
        of the batch.
        """
        responses = []
        for request in requests:
            try:
                if self.decoupled:
                    self.run_decoupled(request)
                    continue
                responses.append(self.run(request))
            except (RefusalError, DoubleError) as error:
                text = str(error) if isinstance(error, RefusalError) else f"{self.spec['model']}: {error}"
                self.fail(request, text, responses)
        return None if self.decoupled else responses

    def fail(self, request: Any, text: str, responses: list[Any]) -> None:
        """Answer `request` with an error response saying `text` (then final, when decoupled)."""
        failed = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(text))
        if self.decoupled:
            request.get_response_sender().send(failed, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            responses.append(failed)

    def run(self, request: Any) -> Any:
        """The one response of a request to a model without decoupled mode."""
        return pb_utils.InferenceResponse(output_tensors=self.compute(self.inputs(request)))

    def run_decoupled(self, request: Any) -> None:
        """Send the responses of a request to a decoupled model, the last one flagged final."""
        sender = request.get_response_sender()
        sender.send(
            pb_utils.InferenceResponse(output_tensors=self.compute(self.inputs(request))),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    @abc.abstractmethod
    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The output tensors of one request (models with exactly one response per request)."""


def strings(values: np.ndarray) -> list[str]:
    """A tensor of bytes or strings as a flat list of strings."""
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]


class MissingSchema(ValueError):  # noqa: N818 (requests' own name, which the client reads)
    """requests' error for a URL without a scheme (the real preprocessing fetches with requests.get)."""


class InvalidSchema(ValueError):  # noqa: N818 (requests' own name, which the client reads)
    """requests' error for a scheme it has no adapter for (data: URLs other than JPEG, file:, ...)."""


def fetch_image(url: str) -> tuple[str, bytes]:
    """What the real preprocessing does with a URL, as it does it.

    `data:image/jpeg;base64,` is decoded inline, anything else goes to requests.get, whose body (an error
    page too: the status is not checked) goes to Pillow.
    """
    prefix = "data:image/jpeg;base64,"
    if url.startswith(prefix):
        return "data", base64.b64decode(url.split(",")[1])
    if "://" not in url and not url.startswith("data:"):
        raise MissingSchema(f"Invalid URL '{url}': No scheme supplied. Perhaps you meant https://{url}?")
    if not url.lower().startswith(("http://", "https://")):
        raise InvalidSchema(f"No connection adapters were found for '{url}'")
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return "http", bytes(reply.read())
    except urllib.error.HTTPError as error:
        return "http", bytes(error.read())


def pad(rows: list[list[int]], fill: int = 0) -> np.ndarray:
    """Rows of ids as one INT64 matrix, the short ones padded with `fill`."""
    width = max((len(row) for row in rows), default=0)
    return np.array([row + [fill] * (width - len(row)) for row in rows], dtype=np.int64).reshape(
        len(rows), width
    )
