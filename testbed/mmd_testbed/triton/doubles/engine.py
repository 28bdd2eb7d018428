"""The double of `tensorrt_llm` (run as `backend: "python"`): the TensorRT-LLM backend's contract, no GPU.

It generates `type|pre:...|enc:...|llm:...`, naming every optional input that arrived, once per beam; it
answers one response per batch item (per segment when streaming), refuses what the backend and the
executor refuse, in their words and order (`executor`, with the limits of the engines' own config.json),
keeps a LoRA cache, reads Whisper's tones from encoder features, and, in leader mode, never finishes
loading on ranks other than 0. Under mpirun (a world of more than one rank) every rank first joins the MPI
world (`world.join`, bounded: a world that does not form fails the load, saying how many ranks joined of how
many); when the world spans more than one host, rank 0's llm segment ends with
`world=<ranks> ranks on <hosts> hosts: <names>`, so an answer shows that the ranks of other pods joined
(one host, as single-pod tensor parallelism: the answer is unchanged). Imports `base`, `executor`, `world`
and what they import.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from . import codec, executor, world
from .base import SPECIAL_TOKENS, DoubleError, Model, RefusalError, strings
from .executor import Item, Limits, Serving
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
    `sequence_index` only when the request asks for them or they tell items apart. Refuses what the
    backend and the executor refuse, with their texts (`executor`); request ids count from 1 per
    instance, as the executor's do.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.rank = _mpi_rank()
        self.world: world.World | None = None
        self.lora_cache: dict[int, str] = {}
        self.lock = threading.Lock()
        self.last_request_id = 0
        self.requests_seen = 0
        missing = next((name for name in executor.LOAD_PARAMETERS if name not in self.params), None)
        if missing is not None:
            raise RuntimeError(f"Cannot find parameter with name: {missing}")  # ModelState::GetParameter
        self.serving = Serving.read(self.params)
        # An encoder engine makes the executor an encoder-decoder one (Whisper); mllama has none.
        self.encoder_decoder = str(self.params.get("encoder_model_path") or "").startswith("/")
        llm = executor.engine_config(spec, "gpt_model_path")
        encoder = executor.engine_config(spec, "encoder_model_path") if self.encoder_decoder else None
        built = (llm or {}).get("version")
        if built and built != spec["release"]["tensorrt_llm"]:
            raise RuntimeError(executor.engine_release_refusal(built, spec["release"]))
        self.limits = Limits.read(llm, encoder, self.serving.chunked_context) if llm else None
        if self.limits and self.max_beam_width > self.limits.engine_max_beam_width:
            raise RuntimeError(  # trtGptModel.h, at load: the model never becomes ready
                f"{executor.ASSERTION}Runtime configured max beam width ({self.max_beam_width}) must not "
                f"exceed engine max beam width ({self.limits.engine_max_beam_width})"
            )

    def join_world(self) -> None:
        """Under MPI, join the world as the TensorRT-LLM backend does at load, within `world.WORLD_SECONDS`.

        A world that does not form fails the load (tritonserver then exits: failed to load).
        """
        if world.world_size() <= 1:
            return
        try:
            self.world = world.join()
        except world.WorldError as error:
            raise DoubleError(f"tensorrt_llm double, rank {self.rank}: {error}") from error
        print(
            f"tensorrt_llm double: rank {self.world.rank} joined the MPI world: {self.world.summary()}",
            flush=True,
        )

    def block_unless_leader(self) -> None:
        """In leader mode, never return from loading on ranks other than 0."""
        if self.rank != 0:
            # Leader mode: ranks other than 0 join the leader's MPI world and never return from loading,
            # so they never open their ports. They end when mpirun ends them.
            print(f"tensorrt_llm double: rank {self.rank} waits for the leader", flush=True)
            threading.Event().wait()

    @property
    def max_beam_width(self) -> int:
        """The runtime max beam width: the `max_beam_width` parameter (the backend's default is 1)."""
        return executor.parameter_int(self.params, "max_beam_width", 1)

    def prompt(self, inputs: dict[str, Any], row: int, batch: int) -> list[int]:
        """Batch item `row`'s input ids as the executor gets them.

        Decoder-only: `input_ids`, cut to `input_lengths` only when the request holds several items (the
        backend slices only then). Encoder-decoder: `decoder_input_ids`, else one pad id.
        """
        if self.encoder_decoder:
            if "decoder_input_ids" in inputs:
                return [int(i) for i in self.array(inputs["decoder_input_ids"], "decoder_input_ids")[row]]
            return [int(self.scalar(inputs, "pad_id", row, 0))] if "pad_id" in inputs else []
        if "input_ids" not in inputs:
            return []
        ids = self.array(inputs["input_ids"], "input_ids")[row].reshape(-1)
        if batch > 1:
            ids = ids[: int(self.array(inputs["input_lengths"], "input_lengths").reshape(-1)[row])]
        return [int(i) for i in ids]

    def prompt_len(self, prompt: list[int]) -> int:
        """How many tokens the executor counts; Whisper's special tokens are one token each, as tiktoken's."""
        if not self.spec["knowledge"]["whisper"]:
            return len(prompt)
        text = codec.decode_ids(prompt)
        return len(SPECIAL_TOKENS.findall(text)) + len(SPECIAL_TOKENS.sub("", text).encode())

    def item(self, inputs: dict[str, Any], row: int, batch: int) -> Item:
        """What the backend makes of batch item `row` (utils.cc createRequestsFromInputTensors)."""
        prompt = self.prompt(inputs, row, batch)
        # The release's backend reads each sampling input under its own name (min_tokens from 1.x).
        renamed = self.spec["release"]["renamed_inputs"]
        sampling = {
            name: self.scalar(inputs, renamed.get(name, name), row, 0)
            for name in executor.SAMPLING_INPUTS
            if renamed.get(name, name) in inputs
        }
        extra = inputs.get("prompt_table_extra_ids")
        words = [
            [int(v) for v in self.array(inputs[name], name)[row].reshape(-1)]
            for name in ("bad_words_list", "stop_words_list")
            if name in inputs
        ]
        guide = inputs.get("guided_decoding_guide_type")
        encoder_len = None
        if "encoder_input_features" in inputs:
            encoder_len = int(
                self.array(inputs["encoder_input_features"], "encoder_input_features")[row].shape[0]
            )
            if batch > 1:
                encoder_len = int(self.array(inputs["input_lengths"], "input_lengths").reshape(-1)[row])
        return Item(
            prompt_len=self.prompt_len(prompt),
            max_new_tokens=int(self.scalar(inputs, "request_output_len", row, 0)),
            beam_width=int(self.scalar(inputs, "beam_width", row, 1)),
            sampling=sampling,
            words=words,
            streaming=bool(self.scalar(inputs, "streaming", 0, 0)),
            prompt_table="prompt_embedding_table" in inputs,
            extra_ids=extra is not None
            and self.array(extra, "prompt_table_extra_ids")[row].size == len(prompt),
            encoder_len=encoder_len,
            context_logits=bool(self.scalar(inputs, "return_context_logits", row, 0)),
            generation_logits=bool(self.scalar(inputs, "return_generation_logits", row, 0)),
            guided=guide is not None
            and strings(self.array(guide, "guided_decoding_guide_type")[row])[0] in executor.GUIDE_TYPES,
            draft_tokens=self.array(inputs["draft_input_ids"], "draft_input_ids")[row].size
            if "draft_input_ids" in inputs
            else 0,
            lora_weights="lora_weights" in inputs,
            lora_config="lora_config" in inputs,
        )

    def digest(self, inputs: dict[str, Any], row: int, item: Item, batch: int) -> list[str]:
        """The pieces of batch item `row`'s generated text (one response each when streaming)."""
        knowledge = self.spec["knowledge"]
        segments = [self.spec["model_type"]]
        fake = 0
        if "input_ids" in inputs and not self.encoder_decoder:
            ids = np.array(self.prompt(inputs, row, batch))
            segments.append(codec.decode_ids(ids))
            fake = int(np.sum(ids >= codec.VOCAB_SIZE))
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
                if not item.prompt_table or not item.extra_ids:
                    continue  # the backend reads them only with a prompt table, and drops ill-sized ones
                items.append(
                    f"{name}={';'.join(str(v) for v in sorted(set(values.reshape(-1).tolist()) - {0}))}"
                )
            elif name == "decoder_input_ids" and knowledge["encoder_decoder"]:
                # Special tokens spelled without their brackets: the whole digest may sit inside one.
                prompt = codec.decode_ids(values.reshape(-1))
                items.append(
                    f"decoder_input_ids={'+'.join(re.findall(r'<[|]([^|]+)[|]>', prompt)) or prompt}"
                )
            elif self.dtype(name) == "TYPE_STRING":
                items.append(f"{name}={';'.join(strings(values))}")
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
        requested = int(self.scalar(inputs, "request_output_len", row, 0))
        if item.max_new_tokens != requested:  # the executor cut max_tokens to fit max_seq_len (a warning)
            items.append(f"max_new_tokens={item.max_new_tokens}")
        items += self.lora(inputs, row)
        if self.world is not None and self.world.spans_hosts:
            items.append(f"world={self.world.summary()}")
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
            return [f"lora=cached#{self.lora_cache[task]}"]

    def lora_miss(self, inputs: dict[str, Any], row: int) -> str | None:
        """The PEFT cache's refusal of an unknown task id sent without weights (peftCacheManager.cpp)."""
        if "lora_task_id" not in inputs or "lora_weights" in inputs:
            return None
        task = int(self.array(inputs["lora_task_id"], "lora_task_id").reshape(-1)[row])
        with self.lock:
            cached = task in self.lora_cache
        return (
            None if cached else f"LoRA task {task} not found in cache. Please send LoRA weights with request"
        )

    def check(self, inputs: dict[str, Any], batch: int) -> list[Item]:
        """Refuse what the backend and the executor refuse, in their order; the items they accept.

        The backend converts the whole Triton request first (a refusal there is its exception's text);
        the executor then fetches each item under its own request id (validate and the fetch-time
        checks, the PEFT cache) and runs a step, where a beam width above the runtime maximum fails.
        A request the double refuses is refused whole: the real one still answers a batch's other items.
        """
        if "input_ids" not in inputs and "encoder_input_features" not in inputs:
            raise RefusalError("inputTokens or encoderInputFeatures tensor not provided")
        if not self.decoupled and batch > 1:
            raise RefusalError(
                "Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy"
            )
        if self.scalar(inputs, "streaming", 0, 0) and not self.decoupled:
            raise RefusalError("Streaming is only supported if model is deployed using decoupled mode.")
        items = [self.item(inputs, row, batch) for row in range(batch)]
        present = [name for name in inputs if name in self.contract["input"]]
        for item in items:
            refusal = executor.conversion_refusal(item, present)
            if refusal:
                raise RefusalError(refusal)
        for row, item in enumerate(items):
            with self.lock:
                request_id = self.last_request_id + 1
                sequences = int(item.sampling.get("num_return_sequences", 1))
                self.last_request_id += sequences if item.beam_width == 1 and sequences > 1 else 1
            refusal = executor.fetch_refusal(item, self.limits, self.serving)
            if refusal:
                raise RefusalError(executor.executor_failed(request_id, executor.FETCHING + refusal))
            refusal = self.lora_miss(inputs, row)
            if refusal:
                raise RefusalError(executor.executor_failed(request_id, refusal))
            refusal = executor.forward_refusal(item, self.max_beam_width)
            if refusal:
                raise RefusalError(executor.executor_failed(request_id, executor.FORWARD + refusal))
        return items

    def fail_my_share(self) -> None:
        """With `fail_share` in the spec (the engine knob), fail that share of the requests, spread evenly."""
        share = float(self.spec.get("fail_share", 0))
        with self.lock:
            self.requests_seen += 1
            seen = self.requests_seen
        if math.floor(seen * share) > math.floor((seen - 1) * share):
            raise DoubleError(f"request {seen} fails: this engine fails a share of {share:g} (fail_share)")

    def responses(self, inputs: dict[str, Any]) -> list[list[Any]]:
        """The output tensors of every response, in order: per batch item, per sequence, per segment.

        With `seconds_per_request` in the spec (the engine's knob), each request first takes that long:
        the model instance works on one at a time, so requests beyond its pace wait in Triton's queue.
        """
        batch = self.array(inputs["request_output_len"], "request_output_len").shape[0]
        items = self.check(inputs, batch)
        time.sleep(float(self.spec.get("seconds_per_request", 0)))
        self.fail_my_share()
        whisper = bool(self.spec["knowledge"]["whisper"])
        # (batch item, sequence_index or None, the text of every beam of every response)
        answers: list[tuple[int, int | None, list[list[str]]]] = []
        for row, item in enumerate(items):
            pieces = self.digest(inputs, row, item, batch)
            width = item.beam_width
            sequences = int(item.sampling.get("num_return_sequences", 1))
            streaming = item.streaming
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

    def stopped(self, request: Any) -> bool:
        """Whether `request` asks to stop another one (`stop`), which the backend answers empty.

        Without a request id it is refused (model_instance_state.cc handleStopRequest).
        """
        stop = self.inputs(request).get("stop")
        if stop is None or not bool(self.array(stop, "stop").reshape(-1)[0]):
            return False
        if not request.request_id():
            raise RefusalError("Trying to stop a request but request ID is not provided")
        return True

    def run(self, request: Any) -> Any:
        """The one response of a request to a model without decoupled mode."""
        if self.stopped(request):
            return pb_utils.InferenceResponse(output_tensors=[])
        return super().run(request)

    def run_decoupled(self, request: Any) -> None:
        """Every response of the request, the last one flagged final like the backend's."""
        sender = request.get_response_sender()
        if self.stopped(request):
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        responses = self.responses(self.inputs(request))
        for index, tensors in enumerate(responses):
            final = index == len(responses) - 1
            sender.send(
                pb_utils.InferenceResponse(output_tensors=tensors),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0,
            )
