"""Behaviour of the Python-backend doubles; runs inside tritonserver's Python backend stub.

A double, not the real model: `repository.py` writes, into every model directory it replaces, a
`model.py` holding that model's contract (parsed from the operator's rendered `config.pbtxt`) and copies
this file and `codec.py` beside it as the package `triton_doubles`. Imports numpy, Pillow, the standard
library, `triton_python_backend_utils` and the codec.

Each double checks at load time that the config Triton loaded is exactly the contract it was generated
from, and answers with the tensors the real model of the pinned release (tensorrtllm_backend v0.19.0)
sends: the same names, dtypes, ranks and layouts (flat or nested), present in the same cases, which is
not always what the config declares. Small sizes stand in for the real ones (a 4x4 "image", a 256-id
vocabulary). What reached each model is reported in the generated text:

- `preprocessing` encodes a trace of its inputs (text, images fetched from URLs, raw bytes, video, ids) as
  the prompt's token ids, inserting one fake prompt-table id per block of them the real one inserts, and
  refuses what the real one refuses: more `<image>` markers than `max_num_images`, LLaVA-OneVision or
  Qwen2-VL without a server-side image, Qwen2-VL with PROMPT_TABLE_EXTRA_ID;
- `multimodal_encoders` encodes a trace of the tensors it got as the prompt table (FP16) or, for mllama,
  as encoder features (BF16); it refuses a request without an image except for mllama, like the real one;
- `tensorrt_llm` (run as `backend: "python"`) generates `type|pre:...|enc:...|llm:...`, naming every
  optional input that arrived, once per beam; it answers one response per batch item (per segment when
  streaming: the new segment with one beam, every beam's text so far with beam search), refuses the beam
  widths the executor refuses, keeps a LoRA cache, reads Whisper's tones from encoder features, and, in
  leader mode, never finishes loading on ranks other than 0;
- `postprocessing` detokenizes into one flat string per (batch item x beam); `tensorrt_llm_bls` and
  `whisper_bls` drive the other models through real BLS calls (`pb_utils.InferenceRequest`), the first
  following the ensemble's own wiring and passing postprocessing's strings on unchanged, after the real
  one's own refusals (`max_tokens` below 1, speculative decoding without a draft model; Whisper: a
  batch of several utterances).
"""

from __future__ import annotations

import abc
import base64
import io
import json
import os
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

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
_SPECIAL = re.compile(r"<\|[^|>]*\|>")
IMAGE_SOURCES = ("image_input", "image_bytes_input", "image_url_input", "video_bytes_input")
# The literal the real preprocessing splits prompts on when max_num_images is above 1, whatever the type.
MULTI_IMAGE_MARKER = "<image>"
# Python's message (3.11 and later) for a local variable read before any assignment.
_UNBOUND = "cannot access local variable '{}' where it is not associated with a value"
# The tiles mllama's processor pads every image to, and Qwen2-VL's flattened patch (3 x 2 x 14 x 14).
MLLAMA_TILES = 4
QWEN2_VL_GRID = (1, 2, 2)
QWEN2_VL_PATCH = 1176
# Width of the fake encoder features and prompt tables.
HIDDEN = 8


class DoubleError(Exception):
    """A request the real model would refuse too."""


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


def _is_true(value: str | None) -> bool:
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
        """Answer every request; a failure becomes that request's error response."""
        responses = []
        for request in requests:
            try:
                if self.decoupled:
                    self.run_decoupled(request)
                    continue
                responses.append(self.run(request))
            except Exception as error:  # every failure goes back to the client, as the real models do
                failed = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"{self.spec['model']}: {error}")
                )
                if self.decoupled:
                    request.get_response_sender().send(
                        failed, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                    )
                else:
                    responses.append(failed)
        return None if self.decoupled else responses

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


def _strings(values: np.ndarray) -> list[str]:
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]


def _fetch_image(url: str) -> tuple[str, bytes]:
    """What the real preprocessing accepts: http(s) URLs and `data:image/jpeg;base64,` strings only."""
    prefix = "data:image/jpeg;base64,"
    if url.startswith(prefix):
        return "data", base64.b64decode(url[len(prefix) :])
    if url.startswith(("http://", "https://")):
        with urllib.request.urlopen(url, timeout=10) as reply:
            return "http", bytes(reply.read())
    raise DoubleError(
        f"cannot load image from {url[:40]!r}: only http(s) URLs and {prefix} data are accepted"
    )


def _pad(rows: list[list[int]], fill: int = 0) -> np.ndarray:
    width = max((len(row) for row in rows), default=0)
    return np.array([row + [fill] * (width - len(row)) for row in rows], dtype=np.int64).reshape(
        len(rows), width
    )


class Preprocessing(Model):
    """Tokenizes (byte tokenizer) and, for server-side image types, loads images like the real one.

    Like the real one it always answers the decoder ids, both word lists and the embedding bias (empty
    when the request has none), and the vision tensors only for a request that carries an image or video;
    and it refuses what the real one refuses (see `check`).
    """

    @property
    def max_num_images(self) -> int | None:
        """The `max_num_images` parameter as the real one reads it (None when unset or not a number)."""
        value = str(self.params.get("max_num_images") or "").strip()
        return int(value) if value.isdigit() else None

    def check(self, inputs: dict[str, Any], texts: list[str]) -> None:
        """Refuse what the v0.19.0 preprocessing refuses for this model type, with its message."""
        model_type = self.spec["model_type"]
        server_side = [name for name in ("IMAGE_BYTES", "IMAGE_URL", "VIDEO_BYTES") if name in inputs]
        if model_type == "llava_onevision" and not server_side:
            # It computes the number of visual tokens from the processed image, so it cannot go without.
            raise DoubleError("Image processing requires IMAGE_BYTES or IMAGE_URL to be provided")
        # The two qwen2_vl failures are Python's own (UnboundLocalError) of a variable its path never sets.
        if model_type == "qwen2_vl" and not server_side:
            raise DoubleError(
                f"{_UNBOUND.format('qwen2vl_input_id_tensor')} (qwen2_vl input ids come from the processor, "
                "which runs only with an image)"
            )
        if model_type == "qwen2_vl" and "PROMPT_TABLE_EXTRA_ID" in inputs:
            raise DoubleError(
                f"{_UNBOUND.format('prompt_table_extra_ids')} (the qwen2_vl path never builds the extra ids "
                "PROMPT_TABLE_EXTRA_ID asks for)"
            )
        limit = self.max_num_images
        if limit is not None and limit > 1:
            # Only then does the real one split the prompt on the marker, and count the pieces.
            for text in texts:
                found = text.count(MULTI_IMAGE_MARKER)
                if found > limit:
                    raise DoubleError(
                        f"The number of images in the request ({found}) exceeds the maximum allowed "
                        f"({limit})."
                    )

    def image_slots(self, text: str) -> int:
        """How many blocks of fake prompt-table ids the real one inserts into `text`'s ids.

        With `max_num_images` above 1, one per `<image>` run: it splits the ids on the marker and drops
        empty pieces, so adjacent markers make one block and a prompt without one gets none. Otherwise
        one block, wherever the markers are, for every type whose LLM takes a prompt table.
        """
        if not self.spec["knowledge"]["uses_prompt_table"]:
            return 0
        limit = self.max_num_images
        if limit is not None and limit > 1:
            return len(re.findall(f"(?:{re.escape(MULTI_IMAGE_MARKER)})+", text))
        return 1

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """Token ids with a trace of the request, and the vision tensors of its images."""
        knowledge = self.spec["knowledge"]
        query = self.array(inputs["QUERY"], "QUERY")
        batch = query.shape[0]
        if knowledge["multimodal_preprocessing"]:
            self.check(inputs, [" ".join(_strings(query[row])) for row in range(batch)])
        outputs: dict[str, Any] = {}
        all_ids, extra_rows = [], []
        for row in range(batch):
            text = " ".join(_strings(query[row]))
            # The digest separates segments with "|" and items with ","; keep both out of echoed text.
            items = [f"text={text.replace('|', '¦').replace(',', ';')}"]
            images = 0
            if "DECODER_QUERY" in inputs:
                items.append(
                    f"decoder_text={_strings(self.array(inputs['DECODER_QUERY'], 'DECODER_QUERY')[row])[0]}"
                )
            if "IMAGE_BYTES" in inputs:
                pixels = self.array(inputs["IMAGE_BYTES"], "IMAGE_BYTES")[row]
                images = pixels.shape[0]
                items.append(
                    f"image_bytes={'x'.join(map(str, pixels.shape))}#{codec.short_hash(pixels.tobytes())}"
                )
            if "IMAGE_URL" in inputs:
                for url in _strings(self.array(inputs["IMAGE_URL"], "IMAGE_URL")[row]):
                    scheme, data = _fetch_image(url)
                    width, height = Image.open(io.BytesIO(data)).size
                    items.append(f"image_url={scheme}#{codec.short_hash(data)}:{width}x{height}")
                    images += 1
            video = "VIDEO_BYTES" in inputs
            frames = 0
            if video:
                clip = self.array(inputs["VIDEO_BYTES"], "VIDEO_BYTES")[row]
                frames = clip.shape[0]
                items.append(f"video={'x'.join(map(str, clip.shape))}#{codec.short_hash(clip.tobytes())}")
                images = 1
            if "IMAGE" in inputs:  # InternLM-XComposer2: this model runs the ViT itself
                images = 1
                if text.count(knowledge["image_marker"]) != 1:
                    raise DoubleError(f"the prompt must contain exactly one {knowledge['image_marker']}")
            output_len = int(
                self.array(inputs["REQUEST_OUTPUT_LEN"], "REQUEST_OUTPUT_LEN")[row].reshape(-1)[0]
            )
            items.append(f"max_tokens={output_len}")
            for name in ("END_ID", "PAD_ID", "PROMPT_TABLE_EXTRA_ID"):
                if name in inputs:
                    items.append(f"{name.lower()}={int(self.array(inputs[name], name)[row].reshape(-1)[0])}")
            for name in ("BAD_WORDS_DICT", "STOP_WORDS_DICT", "EMBEDDING_BIAS_WORDS"):
                if name in inputs:
                    items.append(f"{name.lower()}={';'.join(_strings(self.array(inputs[name], name)[row]))}")
            # One fake prompt-table id per block of them the real one inserts.
            slots = self.image_slots(text)
            ids = [codec.VOCAB_SIZE + i for i in range(slots)] + codec.encode_text("pre:" + ",".join(items))
            all_ids.append(ids)
            if "PROMPT_TABLE_EXTRA_ID" in inputs:
                extra = int(
                    self.array(inputs["PROMPT_TABLE_EXTRA_ID"], "PROMPT_TABLE_EXTRA_ID")[row].reshape(-1)[0]
                )
                extra_rows.append([extra if i >= codec.VOCAB_SIZE else 0 for i in ids])
            if images and "PIXEL_VALUES" in self.contract["output"] and "IMAGE" not in inputs:
                outputs.setdefault("PIXEL_VALUES", []).append(self.pixel_values(images, frames, row + 1))
            if video and self.declares("IS_VIDEO_INPUT"):
                outputs.setdefault("IS_VIDEO_INPUT", []).append([True])
            if images:
                for name in knowledge["preprocessing_extra_outputs"]:
                    outputs.setdefault(name, []).append(_extra_output(name, images, len(ids)))
            if "IMAGE" in inputs:
                image = self.array(inputs["IMAGE"], "IMAGE")[row]
                trace = codec.encode_text(f"enc:IMAGE={self.describe('IMAGE', image[None], with_hash=True)}")
                outputs.setdefault("prompt_embedding_table", []).append(_table(trace))
                outputs.setdefault("prompt_vocab_size", []).append([codec.VOCAB_SIZE])
        end_ids = (
            self.array(inputs["END_ID"], "END_ID")
            if "END_ID" in inputs
            else np.full((batch, 1), knowledge["end_id"])
        )
        pad_ids = (
            self.array(inputs["PAD_ID"], "PAD_ID")
            if "PAD_ID" in inputs
            else np.full((batch, 1), knowledge["pad_id"])
        )
        # The real one pads a batch with the tokenizer's pad token.
        result = [
            self.output("INPUT_ID", _pad(all_ids, fill=int(knowledge["pad_id"]))),
            self.output("REQUEST_INPUT_LEN", [[len(ids)] for ids in all_ids]),
            self.output("REQUEST_OUTPUT_LEN", self.array(inputs["REQUEST_OUTPUT_LEN"], "REQUEST_OUTPUT_LEN")),
            self.output("OUT_END_ID", np.asarray(end_ids).reshape(batch, 1)),
            self.output("OUT_PAD_ID", np.asarray(pad_ids).reshape(batch, 1)),
        ]
        if self.declares("DECODER_INPUT_ID"):
            # Without DECODER_QUERY the real one sends one pad id per batch item as the decoder prompt.
            if "DECODER_QUERY" in inputs:
                decoder = self.array(inputs["DECODER_QUERY"], "DECODER_QUERY")
                decoder_ids = [codec.encode_text(" ".join(_strings(decoder[row]))) for row in range(batch)]
            else:
                decoder_ids = [[int(pad)] for pad in np.asarray(pad_ids).reshape(-1)]
            result.append(self.output("DECODER_INPUT_ID", _pad(decoder_ids, fill=int(knowledge["pad_id"]))))
            if self.declares("REQUEST_DECODER_INPUT_LEN"):
                result.append(self.output("REQUEST_DECODER_INPUT_LEN", [[len(ids)] for ids in decoder_ids]))
        for name, given in (("BAD_WORDS_IDS", "BAD_WORDS_DICT"), ("STOP_WORDS_IDS", "STOP_WORDS_DICT")):
            if self.declares(name):
                words = None
                if given in inputs:
                    words = [_strings(self.array(inputs[given], given)[r]) for r in range(batch)]
                result.append(self.output(name, _words_ids(words, batch)))
        if self.declares("EMBEDDING_BIAS"):
            result.append(self.output("EMBEDDING_BIAS", self.embedding_bias(inputs, batch)))
        if extra_rows and self.declares("OUT_PROMPT_TABLE_EXTRA_IDS"):
            result.append(self.output("OUT_PROMPT_TABLE_EXTRA_IDS", _pad(extra_rows)))
        if "prompt_embedding_table" in outputs:
            result.append(
                self.output("prompt_embedding_table", _stack_tables(outputs.pop("prompt_embedding_table")))
            )
        for name, rows in outputs.items():
            if len(rows) == batch:  # every row had an image: the tensor is complete
                result.append(self.output(name, np.stack([np.asarray(r) for r in rows])))
        return result

    def pixel_values(self, images: int, frames: int, fill: int) -> np.ndarray:
        """One batch item's PIXEL_VALUES (all `fill`), laid out as the model type's real processor does.

        mllama: [images x tiles, 3, H, W] (every image padded to 4 tiles); Qwen2-VL: [1, 1, patches,
        1176] (flattened patches); LLaVA-OneVision: [patches, 3, H, W], or [frames, 3, H, W] for video.
        """
        model_type = self.spec["model_type"]
        if model_type == "mllama":
            shape: tuple[int, ...] = (images * MLLAMA_TILES, 3, 4, 4)
        elif model_type == "qwen2_vl":
            shape = (1, 1, int(np.prod(QWEN2_VL_GRID)), QWEN2_VL_PATCH)
        else:
            shape = (frames or images, 3, 4, 4)
        return np.full(shape, fill, np.float16)

    def embedding_bias(self, inputs: dict[str, Any], batch: int) -> np.ndarray:
        """[batch, vocab]: each word's weight on its token ids; [batch, 0] without words and weights."""
        if "EMBEDDING_BIAS_WORDS" not in inputs or "EMBEDDING_BIAS_WEIGHTS" not in inputs:
            return np.empty((batch, 0), np.float32)
        words = self.array(inputs["EMBEDDING_BIAS_WORDS"], "EMBEDDING_BIAS_WORDS")
        weights = self.array(inputs["EMBEDDING_BIAS_WEIGHTS"], "EMBEDDING_BIAS_WEIGHTS")
        bias = np.zeros((batch, codec.VOCAB_SIZE), np.float32)
        for row in range(batch):
            row_words, row_weights = _strings(words[row]), weights[row].reshape(-1)
            if len(row_words) != len(row_weights):
                raise DoubleError("Embedding bias words must have same dimension as embedding bias weights")
            for word, weight in zip(row_words, row_weights, strict=True):
                for token in codec.encode_text(word):
                    bias[row, token] += float(weight)
        return bias


def _words_ids(word_lists: list[list[str]] | None, batch: int) -> np.ndarray:
    """Word lists as TensorRT-LLM's [batch, 2, n] layout: token ids, then end offsets padded with -1.

    Empty when the request has no words ([batch, 2, 0]); words without tokens are skipped.
    """
    if word_lists is None:
        return np.empty((batch, 2, 0), np.int32)
    flat, offsets = [], []
    for words in word_lists:
        ids: list[int] = []
        ends: list[int] = []
        for word in words:
            tokens = codec.encode_text(word)
            if tokens:
                ids += tokens
                ends.append(len(ids))
        flat.append(ids)
        offsets.append(ends)
    width = max([1, *(len(ids) for ids in flat)])
    rows = [
        [ids + [0] * (width - len(ids)), ends + [-1] * (width - len(ends))]
        for ids, ends in zip(flat, offsets, strict=True)
    ]
    return np.array(rows, np.int32)


def _extra_output(name: str, images: int, length: int) -> np.ndarray:
    """Model-type specific vision tensors of the real preprocessing (one batch item), plausible shapes."""
    if name == "IMAGE_GRID_THW":
        return np.array(QWEN2_VL_GRID, np.int64)
    shapes = {
        "ASPECT_RATIO_IDS": (images,),
        "ASPECT_RATIO_MASK": (images, MLLAMA_TILES),
        "CROSS_ATTENTION_MASK": (length, images, MLLAMA_TILES),
        "ATTENTION_MASK": (length,),
        "IMAGE_SIZES": (2,),
        "VISION_INPUT_ID": (length,),
    }
    return np.ones(shapes[name], dtype=np.int64)


def _table(trace: list[int], hidden: int = HIDDEN) -> np.ndarray:
    """A prompt table [rows, hidden] whose first column spells `trace` (exact in FP16 and BF16)."""
    table = np.zeros((len(trace), hidden), dtype=np.float32)
    table[:, 0] = trace
    return table


def _stack_tables(tables: list[np.ndarray]) -> np.ndarray:
    rows = max(t.shape[0] for t in tables)
    return np.stack([np.pad(t, ((0, rows - t.shape[0]), (0, 0))) for t in tables])


def _read_table(table: np.ndarray) -> str:
    return codec.decode_ids(int(v) for v in table[:, 0] if v > 0)


class MultimodalEncoders(Model):
    """The vision engine's stand-in: traces its inputs into the prompt table or encoder features.

    Answers what the real one answers per model type: mllama the encoder features, their length, the
    cross-attention mask and the skip flag (also without an image); LLaVA-OneVision the prompt table only;
    Qwen2-VL the prompt table and the M-RoPE tensors; the other types the prompt table and its size.
    """

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The encoder's outputs for one request."""
        knowledge = self.spec["knowledge"]
        source = next((name for name in ("IMAGE", "pixel_values") if name in inputs), None)
        if source is None:
            if not knowledge["text_only_requests"]:
                raise DoubleError("There is no preprocessed image tensor to encode")
            return self.without_image(inputs)
        images = self.array(inputs[source], source)
        batch = images.shape[0]
        traces = []
        for row in range(batch):
            items = [f"{source}={self.describe(source, images[row][None], with_hash=source == 'IMAGE')}"]
            for name, tensor in inputs.items():
                if name != source:
                    values = self.array(tensor, name)[row]
                    items.append(
                        f"{name}={int(values.reshape(-1)[0])}"
                        if values.size == 1
                        else f"{name}={self.describe(name, values[None])}"
                    )
            traces.append(_table(codec.encode_text("enc:" + ",".join(items))))
        table = _stack_tables(traces)
        rows = table.shape[1]
        if knowledge["encoder_decoder"]:
            text = 0
            if "cross_attention_mask" in inputs:
                text = self.array(inputs["cross_attention_mask"], "cross_attention_mask").shape[1]
            return [
                self.output("ENCODER_INPUT_FEATURES", table),
                self.output("ENCODER_OUTPUT_LENGTHS", np.full((batch, 1), rows)),
                # The prompt's rows, then one per token to generate, against every feature row.
                self.output(
                    "CROSS_ATTENTION_MASK", np.ones((batch, text + self.max_tokens(inputs), rows), bool)
                ),
                self.output("SKIP_CROSS_ATTN_BLOCKS", np.zeros((batch, 1), bool)),
            ]
        result = [self.output("OUT_PROMPT_EMBEDDING_TABLE", table)]
        if knowledge["mrope"]:
            result += [
                self.output("MROPE_ROTARY_COS_SIN", np.zeros((batch, 4))),
                self.output("MROPE_POSITION_DELTAS", np.zeros((batch, 1))),
            ]
        if knowledge["encoder_answers_vocab_size"]:
            # The number of prompt-table rows one image fills (not a vocabulary size).
            result.append(self.output("OUT_PROMPT_VOCAB_SIZE", np.full((batch, 1), rows)))
        return result

    def max_tokens(self, inputs: dict[str, Any]) -> int:
        """The request's max_tokens (0 when absent), which sizes mllama's cross-attention mask."""
        return int(self.scalar(inputs, "max_tokens", 0, 0))

    def without_image(self, inputs: dict[str, Any]) -> list[Any]:
        """Text-only mllama: zero features for one batch item, and the flag to skip cross attention."""
        max_tokens = self.max_tokens(inputs)
        # The real one answers batch 1 here: a zero [1, 1, 4, 1, hidden] embedding, flattened to 4 rows,
        # and a [1, max_tokens, 1, 4] mask flattened to one column plus one row per token to generate.
        return [
            self.output("ENCODER_INPUT_FEATURES", np.zeros((1, MLLAMA_TILES, HIDDEN))),
            self.output("ENCODER_OUTPUT_LENGTHS", np.full((1, 1), MLLAMA_TILES)),
            self.output("CROSS_ATTENTION_MASK", np.zeros((1, max_tokens * (MLLAMA_TILES + 1), 1), bool)),
            self.output("SKIP_CROSS_ATTN_BLOCKS", np.ones((1, 1), bool)),
        ]


def _mpi_rank() -> int:
    """This process's tensor-parallel rank: Open MPI's variable, else the shm prefix `prefix<rank>_`."""
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        return int(os.environ["OMPI_COMM_WORLD_RANK"])
    match = next((re.match(r"prefix(\d+)_", arg) for arg in sys.argv if re.match(r"prefix\d+_", arg)), None)
    return int(match.group(1)) if match else 0


_SUMMARISED = {"input_ids", "input_lengths", "prompt_embedding_table", "encoder_input_features"}
# Outputs the TensorRT-LLM backend answers only when the request sets return_perf_metrics, each [1, 1].
PERF_OUTPUTS = (
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
)


def _tagged(chunks: list[str], item: str, whisper: bool) -> list[str]:
    """`chunks` of a digest with `item` added to the llm segment.

    Whisper's llm segment rides in the first chunk's special token; everyone else's is the last chunk.
    """
    at = 0 if whisper else len(chunks) - 1
    text = chunks[at]
    end = text.find("|>") if whisper else -1
    text = text[:end] + "," + item + text[end:] if end >= 0 else text + "," + item
    return [*chunks[:at], text, *chunks[at + 1 :]]


class TensorrtLlm(Model):
    """The TensorRT-LLM backend's stand-in: generates a digest of what arrived, in leader mode.

    Answers like the C++ backend: one response per batch item (and per sequence), `output_ids`
    [1, beams, length] padded with -1 and `sequence_length` [1, beams] (streaming with beam search: every
    beam's tokens so far in each response); log probs, logits, perf metrics, `batch_index` and
    `sequence_index` only when the request asks for them or they tell items apart.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.rank = _mpi_rank()
        self.lora_cache: dict[int, str] = {}
        self.lock = threading.Lock()

    def block_unless_leader(self) -> None:
        """In leader mode, never return from loading on ranks other than 0."""
        if self.rank != 0:
            # Leader mode: ranks other than 0 join the leader's MPI world and never return from loading,
            # so they never open their ports. They end when mpirun ends them.
            print(f"tensorrt_llm double: rank {self.rank} waits for the leader", flush=True)
            threading.Event().wait()

    @property
    def max_beam_width(self) -> int:
        """The served beam width: the `max_beam_width` parameter (the backend's default is 1)."""
        value = str(self.params.get("max_beam_width") or "").strip()
        return int(value) if value.isdigit() else 1

    def digest(self, inputs: dict[str, Any], row: int) -> list[str]:
        """The pieces of batch item `row`'s generated text (one response each when streaming)."""
        knowledge = self.spec["knowledge"]
        segments = [self.spec["model_type"]]
        if "input_ids" in inputs:
            ids = self.array(inputs["input_ids"], "input_ids")[row].reshape(-1)
            length = int(self.array(inputs["input_lengths"], "input_lengths").reshape(-1)[row])
            ids = ids[:length]
            segments.append(codec.decode_ids(ids))
            fake = int(np.sum(ids >= codec.VOCAB_SIZE))
        else:
            fake = 0
        for name in ("prompt_embedding_table", "encoder_input_features"):
            if name in inputs and not knowledge["whisper"]:
                segments.append(_read_table(self.array(inputs[name], name)[row]))
        items = []
        if fake:
            items.append(f"fake_ids={fake}")
        for name in self.contract["input"]:
            if name not in inputs or name in _SUMMARISED:
                continue
            values = self.array(inputs[name], name)
            values = values[row] if values.ndim else values
            if name == "prompt_table_extra_ids":
                if "prompt_embedding_table" not in inputs:
                    continue  # the backend reads the extra ids only with a prompt table, and drops them here
                items.append(
                    f"{name}={';'.join(str(v) for v in sorted(set(values.reshape(-1).tolist()) - {0}))}"
                )
            elif name == "decoder_input_ids" and knowledge["encoder_decoder"]:
                # Special tokens spelled without their brackets: the whole digest may sit inside one.
                prompt = codec.decode_ids(values.reshape(-1))
                items.append(
                    f"decoder_input_ids={'+'.join(re.findall(r'<[|]([^|]+)[|]>', prompt)) or prompt}"
                )
            elif values.size == 1:
                value = values.reshape(-1)[0]
                items.append(
                    f"{name}={int(value) if self.dtype(name) != 'TYPE_FP32' else round(float(value), 4)}"
                )
            else:
                items.append(f"{name}={self.describe(name, values[None])}")
        for name in ("prompt_embedding_table", "encoder_input_features"):
            if name in inputs:
                items.append(f"{name}={self.describe(name, self.array(inputs[name], name)[row][None])}")
        items += self.lora(inputs, row)
        if knowledge["whisper"]:
            features = self.array(inputs["encoder_input_features"], "encoder_input_features")[row]
            prompt = codec.decode_ids(
                self.array(inputs["decoder_input_ids"], "decoder_input_ids")[row].reshape(-1)
            )
            if not prompt.startswith("<|startoftranscript|>"):
                raise DoubleError("the decoder prompt must start with <|startoftranscript|>")
            words = codec.read_tones(features.astype(np.float32), features.shape[-1])
            # Whisper's own trace rides in a special token: whisper_bls strips those, like the real one.
            return [f"<|llm:{','.join(items)}|>", *[w + " " for w in words.split(" ")]]
        segments.append("llm:" + ",".join(items))
        return [segment + "|" for segment in segments[:-1]] + segments[-1:]

    def lora(self, inputs: dict[str, Any], row: int) -> list[str]:
        """The LoRA trace items of batch item `row`, loading or looking up its adapter like the backend."""
        if "lora_task_id" not in inputs:
            return []
        task = int(self.array(inputs["lora_task_id"], "lora_task_id").reshape(-1)[row])
        with self.lock:
            if "lora_weights" in inputs and "lora_config" in inputs:
                weights = self.array(inputs["lora_weights"], "lora_weights")[row]
                self.lora_cache[task] = codec.short_hash(weights.tobytes())
                return [f"lora=loaded#{self.lora_cache[task]}"]
            if task not in self.lora_cache:
                raise DoubleError(
                    f"LoRA task {task} not found in cache. Please send LoRA weights with request"
                )
            return [f"lora=cached#{self.lora_cache[task]}"]

    def check(self, inputs: dict[str, Any], batch: int) -> None:
        """Refuse what the backend and the executor refuse.

        That is streaming without decoupled mode and a beam width (none sent: 1) other than the served
        `max_beam_width`. Streaming with beam search is accepted, as in the pinned release.
        """
        for row in range(batch):
            streaming = bool(self.scalar(inputs, "streaming", row, 0))
            if streaming and not self.decoupled:
                raise DoubleError("Streaming is only supported if model is deployed using decoupled mode.")
            width = int(self.scalar(inputs, "beam_width", row, 1))
            if width != self.max_beam_width:
                raise DoubleError(
                    f"Request with beam width {width} differs from the max beam width {self.max_beam_width}"
                )

    def responses(self, inputs: dict[str, Any]) -> list[list[Any]]:
        """The output tensors of every response, in order: per batch item, per sequence, per segment.

        With `seconds_per_request` in the spec (the engine's knob), each request first takes that long:
        the model instance works on one at a time, so requests beyond its pace wait in Triton's queue.
        """
        batch = self.array(inputs["request_output_len"], "request_output_len").shape[0]
        self.check(inputs, batch)
        time.sleep(float(self.spec.get("seconds_per_request", 0)))
        whisper = bool(self.spec["knowledge"]["whisper"])
        # (batch item, sequence_index or None, the text of every beam of every response)
        answers: list[tuple[int, int | None, list[list[str]]]] = []
        for row in range(batch):
            pieces = self.digest(inputs, row)
            width = int(self.scalar(inputs, "beam_width", row, 1))
            sequences = int(self.scalar(inputs, "num_return_sequences", row, 1))
            streaming = bool(self.scalar(inputs, "streaming", row, 0))
            if width == 1 and sequences > 1:
                # Sampling: every returned sequence is its own stream of responses, with sequence_index.
                for index in range(sequences):
                    tagged = _tagged(pieces, f"sequence={index}", whisper)
                    chunks = [[p] for p in tagged] if streaming else [["".join(tagged)]]
                    answers.append((row, index, chunks))
            elif width == 1:
                # Streaming, each response carries the new tokens only; otherwise one response.
                answers.append((row, None, [[p] for p in pieces] if streaming else [["".join(pieces)]]))
            else:
                # Beam search answers every beam (at most num_return_sequences), each its own text. When
                # streaming, the executor returns all tokens generated so far, of every beam, in every
                # response (beam search can still change earlier tokens): whole beams, never deltas.
                beams = min(width, sequences) if sequences > 1 else width
                beam_pieces = [_tagged(pieces, f"beam={k}", whisper) for k in range(beams)]
                ends = range(1, len(pieces) + 1) if streaming else [len(pieces)]
                chunks = [["".join(beam[:end]) for beam in beam_pieces] for end in ends]
                answers.append((row, 0 if sequences > 1 else None, chunks))
        if not self.decoupled and (batch > 1 or len(answers) > 1):
            raise DoubleError(
                "the TensorRT-LLM backend answers every batch item and returned sequence with its own "
                "response, which only a decoupled model can send"
            )
        responses = []
        for row, sequence, chunks in answers:
            for index, texts in enumerate(chunks):
                responses.append(self.result(inputs, row, batch, sequence, texts, first=index == 0))
        return responses

    def result(
        self,
        inputs: dict[str, Any],
        row: int,
        batch: int,
        sequence: int | None,
        texts: list[str],
        first: bool,
    ) -> list[Any]:
        """One response's tensors for batch item `row`: one text per beam."""
        tokens = [codec.encode_text(text) for text in texts]
        beams, longest = len(tokens), max(len(t) for t in tokens)
        ids = np.full((1, beams, longest), -1, np.int64)
        for beam, beam_tokens in enumerate(tokens):
            ids[0, beam, : len(beam_tokens)] = beam_tokens
        tensors: dict[str, Any] = {
            "output_ids": ids,
            "sequence_length": np.array([[len(t) for t in tokens]]),
        }
        if self.scalar(inputs, "return_log_probs", row, 0):
            tensors["cum_log_probs"] = np.zeros((1, beams))
            tensors["output_log_probs"] = np.zeros((1, beams, longest))
        if self.scalar(inputs, "return_context_logits", row, 0) and first:
            prompt = int(self.scalar(inputs, "input_lengths", row, 1))
            tensors["context_logits"] = np.zeros((1, prompt, codec.VOCAB_SIZE))
        if self.scalar(inputs, "return_generation_logits", row, 0):
            tensors["generation_logits"] = np.zeros((1, beams, longest, codec.VOCAB_SIZE))
        if batch > 1:
            tensors["batch_index"] = np.array([[row]])
        if sequence is not None:
            tensors["sequence_index"] = np.array([[sequence]])
        if self.scalar(inputs, "return_perf_metrics", row, 0):
            now = time.time_ns()
            for name in PERF_OUTPUTS:
                tensors[name] = np.array([[now if name.endswith("_ns") else 0]])
        return [self.output(name, values) for name, values in tensors.items() if self.declares(name)]

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The one response a model without decoupled mode can send."""
        (tensors,) = self.responses(inputs)
        return tensors

    def run_decoupled(self, request: Any) -> None:
        """Every response of the request, the last one flagged final like the backend's."""
        sender = request.get_response_sender()
        responses = self.responses(self.inputs(request))
        for index, tensors in enumerate(responses):
            final = index == len(responses) - 1
            sender.send(
                pb_utils.InferenceResponse(output_tensors=tensors),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0,
            )


class Postprocessing(Model):
    """Detokenizes with the byte tokenizer, skipping special and fake ids.

    OUTPUT is flat like the real one's: one string per (batch item x beam), in that order.
    """

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The text of every beam of every batch item."""
        tokens = self.array(inputs["TOKENS_BATCH"], "TOKENS_BATCH")
        lengths = self.array(inputs["SEQUENCE_LENGTH"], "SEQUENCE_LENGTH")
        texts = [
            codec.decode_ids(tokens[b, beam, : int(lengths[b, beam])]).encode()
            for b in range(tokens.shape[0])
            for beam in range(tokens.shape[1])
        ]
        output = np.empty(len(texts), dtype=object)
        output[:] = texts
        return [self.output("OUTPUT", output)]


def _forward(tensor: Any, name: str, dtype: str, target: dict[str, Any], batch: int) -> Any:
    """A tensor renamed for another model, reshaped to that model's declared dims when they are fixed."""
    if dtype == "TYPE_BF16":
        return pb_utils.Tensor.from_dlpack(name, tensor.to_dlpack())
    values = np.asarray(tensor.as_numpy())
    dims = target["dims"]
    if dims and all(d > 0 for d in dims) and values.size == batch * int(np.prod(dims)):
        values = values.reshape([batch, *dims])
    return pb_utils.Tensor(name, values)


class Bls(Model):
    """Drives models through BLS; subclasses decide what to call."""

    def call(self, model: str, tensors: list[Any], outputs: list[str]) -> list[Any]:
        """Call `model` and return its responses that carry tensors (several when it is decoupled)."""
        target = self.spec["targets"][model]
        request = pb_utils.InferenceRequest(model_name=model, inputs=tensors, requested_output_names=outputs)
        # A decoupled model answers with a stream of responses, which BLS must iterate.
        responses = list(request.exec(decoupled=True)) if target["decoupled"] else [request.exec()]
        for response in responses:
            if response.has_error():
                raise DoubleError(response.error().message())
        return [r for r in responses if r.output_tensors()]

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The one response of a model without decoupled mode: what `generate` yields, unchanged."""
        answers = list(self.generate(inputs))
        if len(answers) != 1:
            raise DoubleError(f"{len(answers)} responses for one request to a model without decoupled mode")
        return answers[0]

    def run_decoupled(self, request: Any) -> None:
        """Send what `generate` yields as it comes, then the final flag."""
        sender = request.get_response_sender()
        for tensors in self.generate(self.inputs(request)):
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @abc.abstractmethod
    def generate(self, inputs: dict[str, Any]) -> Iterator[list[Any]]:
        """The output tensors of every response to one request."""


class TensorrtLlmBls(Bls):
    """tensorrt_llm_bls: the ensemble's steps, called one by one through BLS, plus the BLS-only inputs.

    Each tensorrt_llm response becomes one response whose `text_output` is postprocessing's OUTPUT as it
    came (flat, one string per beam), with the tensorrt_llm outputs that response carried, like the real
    one's; with `accumulate_tokens` a streaming response carries the text of all tokens so far.
    """

    def check(self, inputs: dict[str, Any]) -> None:
        """Refuse what the v0.19.0 BLS refuses before calling any model, in its order and words.

        Like the real one it reads only the first value of `max_tokens` and `num_draft_tokens`. No draft
        model is ever rendered, so every speculative request ends at the last refusal.
        """
        max_tokens = self.array(inputs["max_tokens"], "max_tokens").reshape(-1)
        if max_tokens.size == 0 or max_tokens[0] <= 0:
            got = int(max_tokens[0]) if max_tokens.size else "empty"
            raise DoubleError(f"max_tokens must be a single value > 0 (max_tokens is {got})")
        if "num_draft_tokens" not in inputs:
            return
        drafts = int(self.array(inputs["num_draft_tokens"], "num_draft_tokens").reshape(-1)[0])
        if drafts:
            if "stream" not in inputs:
                raise DoubleError(
                    "'NoneType' object has no attribute 'any' (num_draft_tokens without stream: the real "
                    "BLS reads stream to refuse streaming with speculative decoding)"
                )
            if self.array(inputs["stream"], "stream").any():
                raise DoubleError("streaming is not supported with speculative decoding")
            if self.scalar(inputs, "return_context_logits", 0, 0):
                raise DoubleError("context logits are not supported with speculative decoding")
        if drafts > 0:
            raise DoubleError("cannot perform speculative decoding without draft model")

    def generate(self, inputs: dict[str, Any]) -> Iterator[list[Any]]:
        """Preprocess, encode any image, generate, and postprocess each generated response."""
        self.check(inputs)
        batch = np.asarray(inputs["text_input"].as_numpy()).shape[0]
        tensors: dict[str, tuple[Any, str]] = {n: (t, self.dtype(n)) for n, t in inputs.items()}
        multimodal = any(name in inputs for name in IMAGE_SOURCES)
        for step in self.spec["steps"]:
            model = step["model"]
            if model == "multimodal_encoders" and not multimodal:
                continue
            target = self.spec["targets"][model]
            request: dict[str, Any] = {}
            for model_tensor, source in step["inputs"].items():
                if source in tensors:
                    tensor, dtype = tensors[source]
                    request[model_tensor] = _forward(
                        tensor, model_tensor, dtype, target["input"][model_tensor], batch
                    )
            if model != "tensorrt_llm":
                responses = self.call(model, list(request.values()), list(step["outputs"]))
                for model_tensor, name in step["outputs"].items():
                    found = pb_utils.get_output_tensor_by_name(responses[0], model_tensor)
                    if found is not None:
                        tensors[name] = (found, target["output"][model_tensor]["data_type"])
                continue
            # BLS-only inputs reach tensorrt_llm under their own names (LoRA, prompt tables, ...); the real
            # one does not pass num_return_sequences on, and always says whether to return logits.
            for name, tensor in inputs.items():
                if name in target["input"] and name not in request and name != "num_return_sequences":
                    request[name] = _forward(tensor, name, self.dtype(name), target["input"][name], batch)
            for name in ("return_context_logits", "return_generation_logits"):
                request.setdefault(name, pb_utils.Tensor(name, np.zeros((batch, 1), bool)))
            wanted = [
                name
                for name in target["output"]
                if name in ("output_ids", "sequence_length") or name in self.contract["output"]
            ]
            yield from self.postprocess(self.call(model, list(request.values()), wanted))
            return

    def postprocess(self, responses: list[Any]) -> Iterator[list[Any]]:
        """Each tensorrt_llm response as this model's response, its tokens detokenized by postprocessing."""
        accumulate = self.decoupled and _is_true(self.params.get("accumulate_tokens"))
        accumulated: dict[int, np.ndarray] = {}
        for response in responses:
            ids = pb_utils.get_output_tensor_by_name(response, "output_ids").as_numpy()
            lengths = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy()
            carried = {t.name(): t for t in response.output_tensors()}
            if accumulate:
                if ids.shape[1] != 1:
                    raise DoubleError("Accumulation of tokens is only implemented for beam width = 1")
                index = 0
                if "batch_index" in carried:
                    index = int(carried["batch_index"].as_numpy().reshape(-1)[0])
                if index in accumulated:
                    ids = np.concatenate((accumulated[index], ids), axis=2)
                accumulated[index] = ids
                lengths = np.array([[ids.shape[2]]], np.int32)
            post = [
                pb_utils.Tensor("TOKENS_BATCH", ids.astype(np.int32)),
                pb_utils.Tensor("SEQUENCE_LENGTH", np.asarray(lengths, np.int32)),
            ]
            text = self.call("postprocessing", post, ["OUTPUT"])[0]
            out = [
                pb_utils.Tensor("text_output", pb_utils.get_output_tensor_by_name(text, "OUTPUT").as_numpy())
            ]
            out += [
                pb_utils.Tensor(name, tensor.as_numpy())
                for name, tensor in carried.items()
                if name in self.contract["output"] and name != "text_output"
            ]
            yield out


class WhisperBls(Bls):
    """whisper_bls: audio to band features, then tensorrt_llm with Whisper's prompt; strips special tokens.

    TRANSCRIPTS is a one-element array holding the transcript (so far, when streaming), like the real one's.
    """

    DEFAULT_PREFIX = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"

    def generate(self, inputs: dict[str, Any]) -> Iterator[list[Any]]:
        """Transcribe one utterance: one response, or (decoupled) one per tensorrt_llm answer with tokens."""
        wav = self.array(inputs["WAV"], "WAV")
        if wav.shape[0] != 1:
            raise DoubleError(f"Only support batch size 1 (WAV holds {wav.shape[0]} utterances)")
        length = int(self.array(inputs["WAV_LENS"], "WAV_LENS").reshape(-1)[0])
        prefix = _strings(self.array(inputs["TEXT_PREFIX"], "TEXT_PREFIX"))[0] or self.DEFAULT_PREFIX
        n_mels = int(self.params["n_mels"])
        features = codec.band_spectrogram(wav[0, :length], n_mels)
        if self.params.get("zero_pad") != "true":
            features = np.pad(
                features, ((0, max(0, codec.MAX_FRAMES - features.shape[0])), (0, 0)), constant_values=-6.0
            )
        if features.shape[0] % 2:
            features = np.pad(features, ((0, 1), (0, 0)), constant_values=-6.0)
        frames = features.shape[0]
        prompt = codec.encode_text(prefix)
        knowledge = self.spec["knowledge"]
        target = self.spec["targets"]["tensorrt_llm"]
        request = [
            pb_utils.Tensor("encoder_input_features", features[None].astype(np.float16)),
            pb_utils.Tensor("encoder_output_lengths", np.array([[frames // 2]], np.int32)),
            pb_utils.Tensor("input_lengths", np.array([[frames]], np.int32)),
            pb_utils.Tensor("decoder_input_ids", np.array([prompt], np.int32)),
            pb_utils.Tensor("request_output_len", np.array([[50]], np.int32)),
            pb_utils.Tensor("end_id", np.array([[knowledge["end_id"]]], np.int32)),
            pb_utils.Tensor("pad_id", np.array([[knowledge["pad_id"]]], np.int32)),
            pb_utils.Tensor("streaming", np.array([[target["decoupled"]]], bool)),
        ]
        text = ""
        for response in self.call("tensorrt_llm", request, ["output_ids", "sequence_length"]):
            ids = pb_utils.get_output_tensor_by_name(response, "output_ids").as_numpy()
            count = int(
                pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy().reshape(-1)[0]
            )
            if count == 0:
                continue  # the real one skips responses without tokens
            text += codec.decode_ids(ids.reshape(-1)[:count])
            if self.decoupled:  # streaming: the transcript so far, each time
                yield [self.transcripts(text)]
        if not self.decoupled:
            yield [self.transcripts(text)]

    def transcripts(self, text: str) -> Any:
        """TRANSCRIPTS: [1] holding the text, stripped and then freed of special tokens like the real one."""
        return self.output("TRANSCRIPTS", np.array([_SPECIAL.sub("", text.strip())], dtype=object))


ROLES: dict[str, type[Model]] = {
    "preprocessing": Preprocessing,
    "multimodal_encoders": MultimodalEncoders,
    "tensorrt_llm": TensorrtLlm,
    "postprocessing": Postprocessing,
    "tensorrt_llm_bls": TensorrtLlmBls,
    "whisper_bls": WhisperBls,
}


def build(spec: dict[str, Any]) -> type:
    """The `TritonPythonModel` class of one double."""

    class TritonPythonModel:
        """The Python backend's entry points, delegating to the double of `spec['role']`."""

        def initialize(self, args: dict[str, Any]) -> None:
            """Check the loaded config against the contract and create the double."""
            check_loaded_config(spec, json.loads(args["model_config"]))
            self.model = ROLES[spec["role"]](spec)
            if isinstance(self.model, TensorrtLlm):
                self.model.block_unless_leader()

        def execute(self, requests: list[Any]) -> list[Any] | None:
            """Answer a batch of requests."""
            return self.model.execute(requests)

        def finalize(self) -> None:
            """Nothing to release."""

    return TritonPythonModel
