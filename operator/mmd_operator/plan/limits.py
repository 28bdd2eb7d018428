"""Derive the build limits and serving sizes from a spec; never trust hand-typed ones.

The limits that must agree with each other are computed here:

- `max_multimodal_len = max_batch_size x features_per_image x max_images_per_request`. Preprocessing
  inserts `max_multimodal_len // max_batch_size // max_num_images` placeholder tokens per image, so a
  wrong value silently produces wrong answers.
- the vision engine batch: engine batch x images per request (x patches or frames for LLaVA-OneVision).
- preprocessing's `max_num_images` equals the build-time images per request.
- Whisper's encoder takes exactly 3000 mel frames (30 s of audio), so its encoder limits are fixed.
- the beam width `tensorrt_llm` serves, which requests must match exactly (Whisper: built 4, served 1).
- the CUDA memory pool on GPU 0, which carries tensors between models (see `memory_pool`).

A user value that contradicts a derived one is refused with both numbers in the message.
Pure: imports the api models and the knowledge table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmd_operator.api.v1alpha1 import DerivedLimits, MultimodalDeploymentSpec
from mmd_operator.api.validation import InvalidSpecError, Problem
from mmd_operator.knowledge import MEL_FRAMES_PER_SECOND, ModelKnowledge, VisionBatchRule, knowledge_of

MIB = 1 << 20
# Triton's own default pool: room for every other tensor that crosses models on the GPU.
BASE_POOL_BYTES = 64 * MIB
# One batch in flight while the next is produced.
POOL_BUFFERS = 2
# The reference workflow launches every multimodal and Whisper repository with this pool
# (`--multimodal_gpu0_cuda_mem_pool_bytes 300000000`); the estimate below was never checked on a GPU,
# so it only ever raises the pool above this floor.
REFERENCE_POOL_BYTES = 300_000_000
_DTYPE_BYTES = {"TYPE_FP16": 2, "TYPE_BF16": 2, "TYPE_FP32": 4, "float16": 2, "bfloat16": 2}


def cuda_memory_pool_bytes(
    *,
    prompt_table_rows: int,
    hidden_size: int,
    prompt_table_dtype: str,
    encoder_feature_bytes: int,
) -> int:
    """Size of the CUDA memory pool on GPU 0, in bytes.

    pool = round_up_MiB(2 x (prompt_table + encoder_features) + 64 MiB), where
    prompt_table = dtype bytes x max_multimodal_len x hidden size (one full batch of image features), and
    encoder_features = the encoder inputs of one Triton batch (mllama: BF16 x max_encoder_input_len x
    hidden size x batch; Whisper: FP16 x 3000 frames x n_mels x batch). The factor 2 lets one batch be in
    flight while the next is produced; 64 MiB is Triton's default pool for everything else.
    """
    prompt_table = _DTYPE_BYTES[prompt_table_dtype] * prompt_table_rows * hidden_size
    needed = POOL_BUFFERS * (prompt_table + encoder_feature_bytes) + BASE_POOL_BYTES
    return math.ceil(needed / MIB) * MIB


@dataclass(frozen=True)
class MemoryPool:
    """The CUDA memory pool on GPU 0 and why it has that size."""

    size: int
    estimate: int
    basis: str


def memory_pool(
    spec: MultimodalDeploymentSpec,
    *,
    max_multimodal_len: int | None,
    encoder_input_len: int | None,
    triton_batch: int,
) -> MemoryPool:
    """The pool `spec` gets: the user's value, else the larger of the reference's floor and the estimate."""
    knowledge = knowledge_of(spec.model.type)
    hidden_size = spec.model.hidden_size or knowledge.reference_hidden_size
    variant = knowledge.variant(spec.model.variant) if spec.model.variant else None
    estimate = cuda_memory_pool_bytes(
        prompt_table_rows=max_multimodal_len or 0,
        hidden_size=hidden_size,
        prompt_table_dtype=spec.serving.prompt_table_datatype,
        encoder_feature_bytes=_encoder_feature_bytes(
            knowledge,
            encoder_input_len=encoder_input_len,
            hidden_size=hidden_size,
            batch=triton_batch,
            n_mels=variant.n_mels if variant else None,
        ),
    )
    given = spec.serving.cuda_memory_pool_bytes
    if given is not None:
        return MemoryPool(given, estimate, f"serving.cudaMemoryPoolBytes (the estimate is {estimate})")
    if estimate > REFERENCE_POOL_BYTES:
        return MemoryPool(
            estimate,
            estimate,
            f"estimate 2 x (prompt table + encoder features) + 64 MiB, above the reference's "
            f"{REFERENCE_POOL_BYTES}",
        )
    return MemoryPool(
        REFERENCE_POOL_BYTES,
        estimate,
        f"the reference workflow's {REFERENCE_POOL_BYTES}, a floor over the estimate {estimate} "
        "(never checked on a GPU)",
    )


def _encoder_feature_bytes(
    knowledge: ModelKnowledge,
    *,
    encoder_input_len: int | None,
    hidden_size: int,
    batch: int,
    n_mels: int | None,
) -> int:
    if not knowledge.encoder_decoder or encoder_input_len is None:
        return 0
    width = n_mels if n_mels is not None else hidden_size
    return _DTYPE_BYTES[knowledge.encoder_input_dtype] * encoder_input_len * width * batch


def _mismatch(path: str, given: int, derived: int, formula: str) -> Problem:
    return Problem(
        path, f"is {given} but must equal {formula} = {derived}; leave it out to use the derived value"
    )


def derive_limits(spec: MultimodalDeploymentSpec) -> DerivedLimits:
    """Return the effective build limits and serving sizes of `spec`.

    Raises:
        InvalidSpecError: when a value the user set contradicts a derived one, or the limits cannot hold.
    """
    knowledge = knowledge_of(spec.model.type)
    engine, serving, defaults = spec.engine, spec.serving, knowledge.build
    problems: list[Problem] = []

    batch = engine.max_batch_size or defaults.max_batch_size
    input_len = engine.max_input_len or defaults.max_input_len
    seq_len = engine.max_seq_len or defaults.max_seq_len
    if seq_len <= input_len:
        problems.append(
            Problem(
                "spec.engine.maxSeqLen",
                f"must be greater than maxInputLen: maxSeqLen is {seq_len}, maxInputLen is {input_len} "
                f"(defaults for {knowledge.model_type} fill in what the spec leaves out)",
            )
        )
    images = engine.max_images_per_request

    max_multimodal_len = None
    if knowledge.features_per_image is not None:
        features = knowledge.features_per_image
        max_multimodal_len = batch * features * images
        formula = f"maxBatchSize x features per image x maxImagesPerRequest = {batch} x {features} x {images}"
        if engine.max_multimodal_len is not None and engine.max_multimodal_len != max_multimodal_len:
            problems.append(
                _mismatch(
                    "spec.engine.maxMultimodalLen", engine.max_multimodal_len, max_multimodal_len, formula
                )
            )
        if features * images >= input_len:
            problems.append(
                Problem(
                    "spec.engine.maxInputLen",
                    f"is {input_len} but one request carries {features} x {images} = {features * images} "
                    "visual tokens before any text; raise maxInputLen or lower maxImagesPerRequest",
                )
            )

    encoder_input_len = engine.max_encoder_input_len or defaults.max_encoder_input_len
    if defaults.fixed_encoder_input_len and engine.max_encoder_input_len not in (
        None,
        defaults.max_encoder_input_len,
    ):
        encoder_input_len = defaults.max_encoder_input_len
        problems.append(
            Problem(
                "spec.engine.maxEncoderInputLen",
                f"is {engine.max_encoder_input_len} but the {knowledge.model_type} encoder takes exactly "
                f"{encoder_input_len} mel frames (30 s of audio); leave it out",
            )
        )

    vision_batch = None
    if knowledge.has_vision_engine:
        if knowledge.vision_batch_rule is VisionBatchRule.PER_PATCH:
            patches = engine.vision.max_patches_per_request or knowledge.default_patches_per_request or 1
            vision_batch, formula = (
                batch * patches,
                f"maxBatchSize x maxPatchesPerRequest = {batch} x {patches}",
            )
        else:
            vision_batch, formula = batch * images, f"maxBatchSize x maxImagesPerRequest = {batch} x {images}"
        if engine.vision.max_batch_size is not None and engine.vision.max_batch_size != vision_batch:
            problems.append(
                _mismatch(
                    "spec.engine.vision.maxBatchSize", engine.vision.max_batch_size, vision_batch, formula
                )
            )

    default_triton_batch = min(knowledge.serving.triton_max_batch_size or batch, batch)
    triton_batch = serving.triton_max_batch_size or default_triton_batch
    if triton_batch > batch:
        problems.append(
            Problem(
                "spec.serving.tritonMaxBatchSize",
                f"is {triton_batch} but must not exceed the engine's maxBatchSize {batch}",
            )
        )

    engine_beam = engine.max_beam_width or defaults.max_beam_width
    served_beam = serving.max_beam_width or knowledge.serving.max_beam_width or engine_beam
    if served_beam > engine_beam:
        problems.append(
            Problem(
                "spec.serving.maxBeamWidth",
                f"is {served_beam} but must not exceed the engine's maxBeamWidth {engine_beam}",
            )
        )

    pool = memory_pool(
        spec,
        max_multimodal_len=max_multimodal_len,
        encoder_input_len=encoder_input_len,
        triton_batch=triton_batch,
    )
    if pool.size < pool.estimate:
        problems.append(
            Problem(
                "spec.serving.cudaMemoryPoolBytes",
                f"is {pool.size} but the prompt tables and encoder features need at least {pool.estimate} "
                "bytes; leave it out to use the derived size",
            )
        )

    if problems:
        raise InvalidSpecError(problems)
    return DerivedLimits(
        max_batch_size=batch,
        max_input_len=input_len,
        max_seq_len=seq_len,
        max_beam_width=engine_beam,
        max_num_tokens=engine.max_num_tokens or defaults.max_num_tokens,
        max_multimodal_len=max_multimodal_len,
        max_encoder_input_len=encoder_input_len if knowledge.encoder_decoder else None,
        max_audio_seconds=(
            encoder_input_len // MEL_FRAMES_PER_SECOND
            if knowledge.whisper_variants and encoder_input_len
            else None
        ),
        vision_max_batch_size=vision_batch,
        max_num_images=images if knowledge.has_vision_engine else None,
        triton_max_batch_size=triton_batch,
        triton_max_beam_width=served_beam,
        cuda_memory_pool_bytes=pool.size,
    )
