"""The doubles of the BLS entry points, `tensorrt_llm_bls` and `whisper_bls`: real BLS calls to the others.

The first follows the ensemble's own wiring and passes postprocessing's strings on unchanged, after the
real one's own refusals; the second drives Whisper's encoder and decoder as the real one does. Like the
real ones, a failure inside their `try` (their checks, a refusal of a model they call) becomes that
request's error response holding `traceback.format_exc()`; what whisper_bls does before its `try` fails
the whole batch. Imports `base` and what it imports.
"""

from __future__ import annotations

import abc
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from . import codec
from .base import IMAGE_SOURCES, SPECIAL_TOKENS, DoubleError, Model, is_true, strings


class RequestValidationError(Exception):
    """The real BLS's own exception type (`lib/decode.py`): its name ends the traceback the client reads."""


def _validate_that(condition: bool, message: str) -> None:
    if not condition:
        raise RequestValidationError(message)


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
        """Call `model` and return its responses that carry tensors (several when it is decoupled).

        A refusal is raised as the real BLS models raise it: `pb_utils.TritonModelException(message)`.
        """
        target = self.spec["targets"][model]
        request = pb_utils.InferenceRequest(model_name=model, inputs=tensors, requested_output_names=outputs)
        # A decoupled model answers with a stream of responses, which BLS must iterate.
        responses = list(request.exec(decoupled=True)) if target["decoupled"] else [request.exec()]
        for response in responses:
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
        return [r for r in responses if r.output_tensors()]

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Answer every request as the real BLS models do (see the module's docstring)."""
        responses: list[Any] = []
        for request in requests:
            inputs = self.inputs(request)
            prepared = self.prepare(inputs)  # outside the try, as in whisper_bls
            sender = request.get_response_sender() if self.decoupled else None
            try:
                if sender is not None:
                    for tensors in self.generate(inputs, prepared):
                        sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                else:
                    responses.append(pb_utils.InferenceResponse(output_tensors=self.single(inputs, prepared)))
            except Exception:  # the real ones catch everything here, and answer with the traceback
                failed = pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError(traceback.format_exc())
                )
                if sender is not None:
                    sender.send(failed)
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                else:
                    responses.append(failed)
        return None if self.decoupled else responses

    def single(self, inputs: dict[str, Any], prepared: Any) -> list[Any]:
        """The one response of a model without decoupled mode: what `generate` yields, unchanged."""
        answers = list(self.generate(inputs, prepared))
        if len(answers) != 1:
            raise DoubleError(f"{len(answers)} responses for one request to a model without decoupled mode")
        return answers[0]

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The one response of a model without decoupled mode (`execute` calls `single` itself)."""
        return self.single(inputs, self.prepare(inputs))

    def prepare(self, inputs: dict[str, Any]) -> Any:
        """What the real model computes before its try (nothing, unless a subclass says)."""
        return None

    @abc.abstractmethod
    def generate(self, inputs: dict[str, Any], prepared: Any) -> Iterator[list[Any]]:
        """The output tensors of every response to one request."""


class TensorrtLlmBls(Bls):
    """tensorrt_llm_bls: the ensemble's steps, called one by one through BLS, plus the BLS-only inputs.

    Each tensorrt_llm response becomes one response whose `text_output` is postprocessing's OUTPUT as it
    came (flat, one string per beam), with the tensorrt_llm outputs that response carried, like the real
    one's; with `accumulate_tokens` a streaming response carries the text of all tokens so far.
    """

    def check(self, inputs: dict[str, Any]) -> None:
        """Refuse what the v0.19.0 BLS refuses before calling any model, in its order and words.

        `Request.validate()` (lib/decode.py) reads only the first value of `max_tokens` and
        `num_draft_tokens`, and calls `stream.any()` even when no `stream` came (an AttributeError); then
        model.py refuses speculative decoding without a draft model, which is never rendered.
        """
        text = self.array(inputs["text_input"], "text_input") if "text_input" in inputs else None
        _validate_that(text is not None and text.size > 0, "text_input is required")
        max_tokens = self.array(inputs["max_tokens"], "max_tokens") if "max_tokens" in inputs else None
        _validate_that(
            max_tokens is not None and max_tokens.size > 0, "max_tokens must be a single value > 0"
        )
        assert max_tokens is not None
        _validate_that(max_tokens.reshape(-1)[0] > 0, "max_tokens must be a single value > 0")
        drafts = int(self.scalar(inputs, "num_draft_tokens", 0, 0))
        context_logits = self.scalar(inputs, "return_context_logits", 0, 0)
        stream: Any = self.array(inputs["stream"], "stream") if "stream" in inputs else None
        if drafts:
            _validate_that(not stream.any(), "streaming is not supported with speculative decoding")
            _validate_that(not context_logits, "context logits are not supported with speculative decoding")
        if drafts > 0:
            raise Exception("cannot perform speculative decoding without draft model")

    def generate(self, inputs: dict[str, Any], prepared: Any) -> Iterator[list[Any]]:
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
                    raise Exception("Accumulation of tokens is only implemented for beam width = 1")
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

    def prepare(self, inputs: dict[str, Any]) -> tuple[list[int], np.ndarray]:
        """The prompt and the features, computed as the real one does before its try.

        fbank.py's compute_feature: the whole WAV row (WAV_LENS cuts it only with `zero_pad`), padded to
        3000 frames unless `zero_pad`, then to an even count; longer audio stays longer (the encoder
        engine refuses it).
        """
        prefix = strings(self.array(inputs["TEXT_PREFIX"], "TEXT_PREFIX"))[0] or self.DEFAULT_PREFIX
        wav = self.array(inputs["WAV"], "WAV")
        if wav.shape[0] != 1:
            raise AssertionError("Only support batch size 1")
        length = int(self.array(inputs["WAV_LENS"], "WAV_LENS").item())
        zero_pad = self.params.get("zero_pad") == "true"
        features = codec.band_spectrogram(wav[0, :length] if zero_pad else wav[0], int(self.params["n_mels"]))
        if not zero_pad and features.shape[0] < codec.MAX_FRAMES:
            features = np.pad(
                features, ((0, codec.MAX_FRAMES - features.shape[0]), (0, 0)), constant_values=-6.0
            )
        if features.shape[0] % 2:
            features = np.pad(features, ((0, 1), (0, 0)), constant_values=-6.0)
        return codec.encode_text(prefix), features

    def generate(self, inputs: dict[str, Any], prepared: Any) -> Iterator[list[Any]]:
        """Transcribe one utterance: one response, or (decoupled) one per tensorrt_llm answer with tokens."""
        prompt, features = prepared
        frames = features.shape[0]
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
