"""The double of `tensorrt_llm` (run as `backend: "python"`): the TensorRT-LLM backend's contract, no GPU.

It generates `type|pre:...|enc:...|llm:...`, naming every optional input that arrived, once per beam; it
answers one response per batch item (per segment when streaming), refuses what the executor refuses,
keeps a LoRA cache, reads Whisper's tones from encoder features, and, in leader mode, never finishes
loading on ranks other than 0. Imports `base` and what it imports.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from . import codec
from .base import DoubleError, Model
from .frontends import read_table


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
                segments.append(read_table(self.array(inputs[name], name)[row]))
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
