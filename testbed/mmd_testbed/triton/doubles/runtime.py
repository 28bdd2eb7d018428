"""The Python-backend doubles' entry point (`build`); runs inside tritonserver's Python backend stub.

A double, not the real model: `repository.py` writes, into every model directory it replaces, a
`model.py` holding that model's contract (parsed from the operator's rendered `config.pbtxt`) and copies
this package's runtime modules beside it as the package `triton_doubles`. Imports the doubles of every
role (`frontends`, `engine`, `bls`) and what they share (`base`).

Each double checks at load time that the config Triton loaded is exactly the contract it was generated
from, and answers with the tensors the real model of the pinned release (tensorrtllm_backend v0.19.0)
sends: the same names, dtypes, ranks and layouts (flat or nested), present in the same cases, which is
not always what the config declares. Small sizes stand in for the real ones (a 4x4 "image", a 256-id
vocabulary). What reached each model is reported in the generated text:

- `preprocessing` encodes a trace of its inputs (text, images fetched from URLs, raw bytes, video, ids) as
  the prompt's token ids, inserting one fake prompt-table id per block of them the real one inserts, and
  refuses what the real one (and the Hugging Face processor it calls) refuses, raising the real
  exception out of `execute`;
- `multimodal_encoders` encodes a trace of the tensors it got as the prompt table (FP16) or, for mllama,
  as encoder features (BF16); it refuses a request without an image except for mllama, like the real one;
- `tensorrt_llm` (run as `backend: "python"`) generates `type|pre:...|enc:...|llm:...`, naming every
  optional input that arrived, once per beam; it answers one response per batch item (per segment when
  streaming: the new segment with one beam, every beam's text so far with beam search), refuses what the
  TensorRT-LLM backend and executor refuse (`executor`), in their words, against the limits in the
  engines' own config.json, keeps a LoRA cache, reads Whisper's tones from encoder features, under
  mpirun joins the MPI world first (`world`; rank 0's answers name the world when it spans hosts), and, in
  leader mode, never finishes loading on ranks other than 0;
- `postprocessing` detokenizes into one flat string per (batch item x beam); `tensorrt_llm_bls` and
  `whisper_bls` drive the other models through real BLS calls (`pb_utils.InferenceRequest`), the first
  following the ensemble's own wiring and passing postprocessing's strings on unchanged; both refuse
  what the real ones refuse and answer a failure with its traceback, as they do.
"""

from __future__ import annotations

import json
from typing import Any

from .base import Model, check_loaded_config
from .bls import TensorrtLlmBls, WhisperBls
from .engine import TensorrtLlm
from .frontends import MultimodalEncoders, Postprocessing, Preprocessing

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
                self.model.join_world()
                self.model.block_unless_leader()

        def execute(self, requests: list[Any]) -> list[Any] | None:
            """Answer a batch of requests."""
            return self.model.execute(requests)

        def finalize(self) -> None:
            """Nothing to release."""

    return TritonPythonModel
