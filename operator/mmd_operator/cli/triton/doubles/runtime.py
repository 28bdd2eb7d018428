"""Behaviour of the Python-backend doubles; runs inside tritonserver's Python backend stub.

A double, not the real model: `repository.py` writes, into every model directory it replaces, a
`model.py` holding that model's contract (parsed from the operator's rendered `config.pbtxt`) and copies
this file and `codec.py` beside it as the package `triton_doubles`. Imports numpy, Pillow, the standard
library, `triton_python_backend_utils` and the codec.

Each double checks at load time that the config Triton loaded is exactly the contract it was generated
from, produces only what that contract declares, and reports what reached it:

- `preprocessing` encodes a trace of its inputs (text, images fetched from URLs, raw bytes, video, ids) as
  the prompt's token ids, inserting one fake prompt-table id per image slot, like the real one;
- `multimodal_encoders` encodes a trace of the tensors it got as the prompt table (FP16) or, for mllama,
  as encoder features (BF16); it refuses a request without an image except for mllama, like the real one;
- `tensorrt_llm` (run as `backend: "python"`) generates `type|pre:...|enc:...|llm:...`, naming every
  optional input that arrived; it streams one response per segment when asked, keeps a LoRA cache, reads
  Whisper's tones from encoder features, and, in leader mode, never finishes loading on ranks other than 0;
- `postprocessing` detokenizes; `tensorrt_llm_bls` and `whisper_bls` drive the other models through real
  BLS calls (`pb_utils.InferenceRequest`), the first following the ensemble's own wiring.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import sys
import threading
import urllib.request
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


class Model:
    """Common plumbing: contract-typed outputs, inputs by name, responses for either transaction policy."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.contract = spec["contract"]
        self.decoupled = bool(self.contract["decoupled"])
        self.params = spec.get("parameters", {})

    # --- tensors ---------------------------------------------------------------------------------

    def inputs(self, request: Any) -> dict[str, Any]:
        found = {}
        for name in self.contract["input"]:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                found[name] = tensor
        return found

    def dtype(self, name: str, kind: str = "input") -> str:
        return str(self.contract[kind][name]["data_type"])

    def array(self, tensor: Any, name: str) -> np.ndarray:
        if self.dtype(name) == "TYPE_BF16":
            return codec.bf16_from_capsule(tensor.to_dlpack())
        return np.asarray(tensor.as_numpy())

    def output(self, name: str, values: Any) -> Any:
        dtype = self.dtype(name, "output")
        if dtype == "TYPE_BF16":
            return pb_utils.Tensor.from_dlpack(name, codec.bf16_capsule(np.asarray(values, np.float32)))
        return pb_utils.Tensor(name, np.asarray(values, dtype=_NUMPY[dtype]))

    def declares(self, name: str) -> bool:
        return name in self.contract["output"]

    def describe(self, name: str, values: np.ndarray, with_hash: bool = False) -> str:
        kind = self.dtype(name).removeprefix("TYPE_")
        text = f"{kind}{list(values.shape)}".replace(" ", "")
        if with_hash:
            text += "#" + codec.short_hash(np.ascontiguousarray(values).tobytes())
        return text

    # --- responses -------------------------------------------------------------------------------

    def execute(self, requests: list[Any]) -> list[Any] | None:
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
        return pb_utils.InferenceResponse(output_tensors=self.compute(self.inputs(request)))

    def run_decoupled(self, request: Any) -> None:
        sender = request.get_response_sender()
        sender.send(
            pb_utils.InferenceResponse(output_tensors=self.compute(self.inputs(request))),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        raise NotImplementedError


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
    """Tokenizes (byte tokenizer) and, for server-side image types, loads images like the real one."""

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        knowledge = self.spec["knowledge"]
        query = self.array(inputs["QUERY"], "QUERY")
        batch = query.shape[0]
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
            if video:
                frames = self.array(inputs["VIDEO_BYTES"], "VIDEO_BYTES")[row]
                items.append(f"video={'x'.join(map(str, frames.shape))}#{codec.short_hash(frames.tobytes())}")
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
            # One fake prompt-table id per image slot (VILA: per <image> marker), as the real one inserts.
            slots = 0
            if knowledge["uses_prompt_table"]:
                marker = knowledge["image_marker"]
                slots = max(1, text.count(marker)) if marker and knowledge["multi_image"] else 1
            ids = [codec.VOCAB_SIZE + i for i in range(slots)] + codec.encode_text("pre:" + ",".join(items))
            all_ids.append(ids)
            if "PROMPT_TABLE_EXTRA_ID" in inputs:
                extra = int(
                    self.array(inputs["PROMPT_TABLE_EXTRA_ID"], "PROMPT_TABLE_EXTRA_ID")[row].reshape(-1)[0]
                )
                extra_rows.append([extra if i >= codec.VOCAB_SIZE else 0 for i in ids])
            if images and "PIXEL_VALUES" in self.contract["output"] and "IMAGE" not in inputs:
                outputs.setdefault("PIXEL_VALUES", []).append(np.full((images, 3, 4, 4), row + 1, np.float16))
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
        ids_array = _pad(all_ids)
        result = [
            self.output("INPUT_ID", ids_array),
            self.output("REQUEST_INPUT_LEN", [[len(ids)] for ids in all_ids]),
            self.output("REQUEST_OUTPUT_LEN", self.array(inputs["REQUEST_OUTPUT_LEN"], "REQUEST_OUTPUT_LEN")),
        ]
        for name, given, default in (
            ("OUT_END_ID", "END_ID", knowledge["end_id"]),
            ("OUT_PAD_ID", "PAD_ID", knowledge["pad_id"]),
        ):
            values = self.array(inputs[given], given) if given in inputs else np.full((batch, 1), default)
            result.append(self.output(name, values))
        for name, given in (("BAD_WORDS_IDS", "BAD_WORDS_DICT"), ("STOP_WORDS_IDS", "STOP_WORDS_DICT")):
            if given in inputs and self.declares(name):
                result.append(
                    self.output(
                        name,
                        [_words_ids(_strings(self.array(inputs[given], given)[r])) for r in range(batch)],
                    )
                )
        if "EMBEDDING_BIAS_WEIGHTS" in inputs and self.declares("EMBEDDING_BIAS"):
            result.append(
                self.output(
                    "EMBEDDING_BIAS", self.array(inputs["EMBEDDING_BIAS_WEIGHTS"], "EMBEDDING_BIAS_WEIGHTS")
                )
            )
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


def _words_ids(words: list[str]) -> list[list[int]]:
    """Words as the [2, n] ids + offsets layout of TensorRT-LLM's stop/bad words lists."""
    ids, offsets = [], []
    for word in words:
        ids += codec.encode_text(word)
        offsets.append(len(ids))
    width = max(len(ids), len(offsets), 1)
    return [ids + [0] * (width - len(ids)), offsets + [-1] * (width - len(offsets))]


def _extra_output(name: str, images: int, length: int) -> np.ndarray:
    """Model-type specific vision tensors of the real preprocessing, with plausible shapes."""
    shapes = {
        "ASPECT_RATIO_IDS": (images,),
        "ASPECT_RATIO_MASK": (images, 4),
        "CROSS_ATTENTION_MASK": (length, images, 4),
        "IMAGE_GRID_THW": (3,),
        "ATTENTION_MASK": (length,),
        "IMAGE_SIZES": (2,),
        "VISION_INPUT_ID": (length,),
    }
    return np.ones(shapes[name], dtype=np.int64)


def _table(trace: list[int], hidden: int = 8) -> np.ndarray:
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
    """The vision engine's stand-in: traces its inputs into the prompt table or encoder features."""

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        knowledge = self.spec["knowledge"]
        source = next((name for name in ("IMAGE", "pixel_values") if name in inputs), None)
        batch = None
        if source is None:
            if not knowledge["text_only_requests"]:
                raise DoubleError("There is no preprocessed image tensor to encode")
            # Text-only mllama: the real encoder only tells the LLM to skip cross attention.
            max_tokens = self.array(inputs["max_tokens"], "max_tokens")
            return [self.output("SKIP_CROSS_ATTN_BLOCKS", np.ones((max_tokens.shape[0], 1), bool))]
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
        result = []
        if knowledge["encoder_decoder"]:
            rows = table.shape[1]
            result += [
                self.output("ENCODER_INPUT_FEATURES", table),
                self.output("ENCODER_OUTPUT_LENGTHS", np.full((batch,), rows)),
                self.output("CROSS_ATTENTION_MASK", np.ones((batch, 1, rows), bool)),
                self.output("SKIP_CROSS_ATTN_BLOCKS", np.zeros((batch, 1), bool)),
            ]
        else:
            result += [
                self.output("OUT_PROMPT_EMBEDDING_TABLE", table),
                self.output("OUT_PROMPT_VOCAB_SIZE", np.full((batch, 1), codec.VOCAB_SIZE)),
            ]
        if knowledge["mrope"]:
            result += [
                self.output("MROPE_ROTARY_COS_SIN", np.zeros((batch, 4))),
                self.output("MROPE_POSITION_DELTAS", np.zeros((batch, 1))),
            ]
        return result


def _mpi_rank() -> int:
    """This process's tensor-parallel rank: Open MPI's variable, else the shm prefix `prefix<rank>_`."""
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        return int(os.environ["OMPI_COMM_WORLD_RANK"])
    match = next((re.match(r"prefix(\d+)_", arg) for arg in sys.argv if re.match(r"prefix\d+_", arg)), None)
    return int(match.group(1)) if match else 0


_SUMMARISED = {"input_ids", "input_lengths", "prompt_embedding_table", "encoder_input_features"}


class TensorrtLlm(Model):
    """The TensorRT-LLM backend's stand-in: generates a digest of what arrived, in leader mode."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.rank = _mpi_rank()
        self.lora_cache: dict[int, str] = {}
        self.lock = threading.Lock()

    def block_unless_leader(self) -> None:
        if self.rank != 0:
            # Leader mode: ranks other than 0 join the leader's MPI world and never return from loading,
            # so they never open their ports. They end when mpirun ends them.
            print(f"tensorrt_llm double: rank {self.rank} waits for the leader", flush=True)
            threading.Event().wait()

    def digest(self, inputs: dict[str, Any], row: int) -> tuple[list[str], bool]:
        knowledge = self.spec["knowledge"]
        segments = [self.spec["model_type"]]
        streaming = False
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
                items.append(
                    f"{name}={';'.join(str(v) for v in sorted(set(values.reshape(-1).tolist()) - {0}))}"
                )
            elif name == "decoder_input_ids":
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
                streaming = streaming or (name == "streaming" and bool(value))
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
            return [f"<|llm:{','.join(items)}|>", *[w + " " for w in words.split(" ")]], streaming
        segments.append("llm:" + ",".join(items))
        return [segment + "|" for segment in segments[:-1]] + segments[-1:], streaming

    def lora(self, inputs: dict[str, Any], row: int) -> list[str]:
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

    def responses(self, inputs: dict[str, Any]) -> list[list[Any]]:
        """The output tensors of every response, in order (one unless streaming)."""
        batch = self.array(inputs["request_output_len"], "request_output_len").shape[0]
        per_row = [self.digest(inputs, row) for row in range(batch)]
        streaming = any(s for _, s in per_row)
        chunks_per_row = [pieces if streaming else ["".join(pieces)] for pieces, _ in per_row]
        count = max(len(chunks) for chunks in chunks_per_row)
        responses = []
        for index in range(count):
            tokens = [codec.encode_text(c[index]) if index < len(c) else [] for c in chunks_per_row]
            ids = _pad(tokens)[:, None, :]
            length = ids.shape[-1]
            tensors = {
                "output_ids": ids,
                "sequence_length": np.array([[len(t)] for t in tokens]),
                "cum_log_probs": np.zeros((batch, 1)),
                "output_log_probs": np.zeros((batch, 1, length)),
                "context_logits": np.zeros((batch, 1, 1)),
                "generation_logits": np.zeros((batch, 1, 1, 1)),
                "batch_index": np.zeros((batch, 1)),
                "sequence_index": np.zeros((batch, 1)),
            }
            responses.append([self.output(n, v) for n, v in tensors.items() if self.declares(n)])
        return responses

    def run(self, request: Any) -> Any:
        # Without decoupled mode only one response is possible.
        pieces = self.responses(self.inputs(request))
        if len(pieces) == 1:
            return pb_utils.InferenceResponse(output_tensors=pieces[0])
        raise DoubleError("streaming requires decoupled mode (model_transaction_policy.decoupled)")

    def run_decoupled(self, request: Any) -> None:
        sender = request.get_response_sender()
        for tensors in self.responses(self.inputs(request)):
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class Postprocessing(Model):
    """Detokenizes with the byte tokenizer, skipping special and fake ids."""

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        tokens = self.array(inputs["TOKENS_BATCH"], "TOKENS_BATCH")
        lengths = self.array(inputs["SEQUENCE_LENGTH"], "SEQUENCE_LENGTH")
        texts = [
            [
                codec.decode_ids(tokens[b, beam, : int(lengths[b, beam])]).encode()
                for beam in range(tokens.shape[1])
            ]
            for b in range(tokens.shape[0])
        ]
        return [self.output("OUTPUT", np.array(texts, dtype=object))]


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
        """Call `model` and return its responses (several when it is decoupled)."""
        target = self.spec["targets"][model]
        request = pb_utils.InferenceRequest(model_name=model, inputs=tensors, requested_output_names=outputs)
        # A decoupled model answers with a stream of responses, which BLS must iterate.
        responses = list(request.exec(decoupled=True)) if target["decoupled"] else [request.exec()]
        for response in responses:
            if response.has_error():
                raise DoubleError(response.error().message())
        return [r for r in responses if r.output_tensors()]

    def run(self, request: Any) -> Any:
        texts: list[bytes] = []
        extra: dict[str, Any] = {}
        for tensors in self.generate(self.inputs(request)):
            for tensor in tensors:
                if tensor.name() == self.spec["text_output"]:
                    texts.append(b"".join(tensor.as_numpy().reshape(-1).tolist()))
                else:
                    extra[tensor.name()] = tensor
        text = self.output(self.spec["text_output"], np.array([[b"".join(texts)]], dtype=object))
        return pb_utils.InferenceResponse(output_tensors=[text, *extra.values()])

    def run_decoupled(self, request: Any) -> None:
        sender = request.get_response_sender()
        for tensors in self.generate(self.inputs(request)):
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def generate(self, inputs: dict[str, Any]) -> Any:
        raise NotImplementedError


class TensorrtLlmBls(Bls):
    """tensorrt_llm_bls: the ensemble's steps, called one by one through BLS, plus the BLS-only inputs."""

    def generate(self, inputs: dict[str, Any]) -> Any:
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
            if model == "tensorrt_llm":
                # BLS-only inputs reach tensorrt_llm under their own names (LoRA, prompt tables, ...).
                for name, tensor in inputs.items():
                    if name in target["input"] and name not in request:
                        request[name] = _forward(tensor, name, self.dtype(name), target["input"][name], batch)
            responses = self.call(model, list(request.values()), list(step["outputs"]))
            if model != "tensorrt_llm":
                for model_tensor, name in step["outputs"].items():
                    found = pb_utils.get_output_tensor_by_name(responses[0], model_tensor)
                    if found is not None:
                        tensors[name] = (found, target["output"][model_tensor]["data_type"])
                continue
            post = self.spec["steps"][-1]
            for response in responses:
                produced = {}
                for model_tensor, name in step["outputs"].items():
                    found = pb_utils.get_output_tensor_by_name(response, model_tensor)
                    if found is not None:
                        produced[name] = found
                post_inputs = [
                    pb_utils.Tensor(model_tensor, produced[source].as_numpy())
                    for model_tensor, source in post["inputs"].items()
                ]
                text = self.call(post["model"], post_inputs, ["OUTPUT"])[0]
                out = [
                    pb_utils.Tensor(
                        "text_output", pb_utils.get_output_tensor_by_name(text, "OUTPUT").as_numpy()
                    )
                ]
                out += [
                    pb_utils.Tensor(name, tensor.as_numpy())
                    for name, tensor in produced.items()
                    if name in self.contract["output"] and name != "text_output"
                ]
                yield out
            return


class WhisperBls(Bls):
    """whisper_bls: audio to band features, then tensorrt_llm with Whisper's prompt; strips special tokens."""

    DEFAULT_PREFIX = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"

    def generate(self, inputs: dict[str, Any]) -> Any:
        wav = self.array(inputs["WAV"], "WAV")
        if wav.shape[0] != 1:
            raise DoubleError("whisper_bls takes one utterance per request")
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
            text += codec.decode_ids(ids.reshape(-1)[:count])
            transcript = _SPECIAL.sub("", text).strip()
            if self.decoupled:  # streaming: the transcript so far, each time
                yield [self.output("TRANSCRIPTS", np.array([[transcript.encode()]], dtype=object))]
        if not self.decoupled:
            yield [
                self.output(
                    "TRANSCRIPTS", np.array([[_SPECIAL.sub("", text).strip().encode()]], dtype=object)
                )
            ]

    def run(self, request: Any) -> Any:
        (tensors,) = list(self.generate(self.inputs(request)))
        return pb_utils.InferenceResponse(output_tensors=tensors)


ROLES = {
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
        def initialize(self, args: dict[str, Any]) -> None:
            check_loaded_config(spec, json.loads(args["model_config"]))
            self.model = ROLES[spec["role"]](spec)
            if isinstance(self.model, TensorrtLlm):
                self.model.block_unless_leader()

        def execute(self, requests: list[Any]) -> list[Any] | None:
            return self.model.execute(requests)

        def finalize(self) -> None:
            pass

    return TritonPythonModel
