"""The doubles of the BLS entry points, `tensorrt_llm_bls` and `whisper_bls`: real BLS calls to the others.

The first follows the ensemble's own wiring and passes postprocessing's strings on unchanged, after the
real one's own refusals; the second drives Whisper's encoder and decoder as the real one does. Imports
`base` and what it imports.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from . import codec
from .base import IMAGE_SOURCES, SPECIAL_TOKENS, DoubleError, Model, is_true, strings


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
        accumulate = self.decoupled and is_true(self.params.get("accumulate_tokens"))
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
        prefix = strings(self.array(inputs["TEXT_PREFIX"], "TEXT_PREFIX"))[0] or self.DEFAULT_PREFIX
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
        return self.output("TRANSCRIPTS", np.array([SPECIAL_TOKENS.sub("", text.strip())], dtype=object))
