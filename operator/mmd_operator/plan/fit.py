"""Does a resource fit the GPUs it may land on? The checkpoint's context, the capability, the memory.

Three questions, each answered from the plan alone (what a GPU kind offers is the judgement's):

- **Context.** A known checkpoint's positions reach `context` tokens (`max_position_embeddings`; Whisper's
  decoder `max_target_positions`); an engine built for longer sequences answers garbage past it, so a
  longer `maxSeqLen` is refused with both numbers (`context_problems`). The knowledge records contexts
  that already count the RoPE scaling a config sets; a checkpoint it does not know is not checked here.
- **Capability.** bfloat16 needs compute capability 8.0 or later, an FP8 KV cache 8.9 (`Requirement`).
- **Memory.** One GPU of the busiest rank holds its share of the weights at the engine's precision, the
  fixed part (the CUDA memory pool on GPU 0, the runtime and its activations) and the KV cache, which
  TensorRT-LLM sizes as a fraction of what is left (`kvCacheFreeGpuMemFraction`). The resource fits a
  kind when one sequence of `maxSeqLen` fits there; it is served at full speed when `maxBatchSize` of
  them do (`MemoryEstimate`). Figures of a checkpoint the knowledge does not know rest on the model
  type's reference checkpoint, and only warn.

The estimate's parts, and why, are in docs/resource.md ("Does it fit?"), with our figures beside
published ones. Pure: imports the api's `Problem`, the facts' `GpuKind` and the knowledge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mmd_operator.api.validation import Problem
from mmd_operator.facts import GpuKind
from mmd_operator.knowledge import LanguageModelShape

GIB = 1 << 30
MIB = 1 << 20
# The CUDA context, TensorRT-LLM's runtime, cuBLAS workspaces and NCCL buffers on every GPU.
RUNTIME_BYTES = 1 * GIB
# Activations: `maxNumTokens` tokens x the hidden size x 2 bytes x this many layer-wide buffers alive at
# once (TensorRT reuses activation memory between layers; attention and MLP intermediates are the peak).
ACTIVATION_BUFFERS = 8
# What TensorRT-LLM's builder and trtllm-serve take when `maxNumTokens` is not set.
DEFAULT_MAX_NUM_TOKENS = 8192
# Bytes per weight, by what the engine stores.
WEIGHT_BYTES = {"float16": 2.0, "bfloat16": 2.0, "int8": 1.0, "int4": 0.5}


def _gib(size: float) -> str:
    return f"{size / GIB:.1f} GiB"


def _capability(text: str) -> tuple[int, int] | None:
    major, _, minor = text.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


@dataclass(frozen=True)
class Requirement:
    """The compute capability a spec's choice needs: `field` (its path), `what` it chose, the `least` one."""

    field: str
    what: str
    least: str

    def unmet_by(self, kind: GpuKind) -> str | None:
        """Why `kind` cannot run it, or None (also when the kind's capability is not known)."""
        has, needs = _capability(kind.compute_capability), _capability(self.least)
        if has is None or needs is None or has >= needs:
            return None
        return f"{self.what} needs compute capability {self.least} or later; {kind.describe()} has not"


def requirements(*, dtype: str | None, kv_cache_dtype: str) -> tuple[Requirement, ...]:
    """What the engine's precision and KV-cache type ask of the GPU."""
    found = []
    if dtype == "bfloat16":
        found.append(Requirement("spec.engine.dtype", "dtype bfloat16", "8.0"))
    if kv_cache_dtype == "fp8":
        found.append(Requirement("spec.engine.kvCacheDtype", "kvCacheDtype fp8", "8.9"))
    return tuple(found)


@dataclass(frozen=True)
class KnownShape:
    """The language model the figures rest on: the spec's own checkpoint, or the type's reference."""

    shape: LanguageModelShape
    checkpoint: str
    # True when `checkpoint` is the one the spec serves; False when only the reference's is known.
    own: bool


def shape_of(
    source_repo: str | None, checkpoints: Mapping[str, LanguageModelShape], reference: str
) -> KnownShape | None:
    """The shape of the checkpoint at `source_repo`, else of `reference`, else None."""
    if source_repo is not None and source_repo in checkpoints:
        return KnownShape(checkpoints[source_repo], source_repo, own=True)
    if reference in checkpoints:
        return KnownShape(checkpoints[reference], reference, own=False)
    return None


def context_problems(known: KnownShape | None, max_seq_len: int, field: str) -> list[Problem]:
    """A refusal of a `max_seq_len` beyond the spec's own checkpoint's context."""
    if known is None or not known.own or known.shape.context is None or max_seq_len <= known.shape.context:
        return []
    return [
        Problem(
            field,
            f"is {max_seq_len}, beyond the {known.shape.context} positions of {known.checkpoint} "
            "(max_position_embeddings in its config.json): tokens past them are answered with garbage; "
            f"set at most {known.shape.context}",
        )
    ]


@dataclass(frozen=True)
class MemoryEstimate:
    """What one GPU of the busiest rank holds, in bytes, and what the figures rest on."""

    known: KnownShape
    weights: int
    # The CUDA memory pool (rank 0 of the engine runtime), the runtime and the activations.
    fixed: int
    kv_per_sequence: int
    sequences: int
    max_seq_len: int
    kv_fraction: float
    # How the weights were counted, for messages.
    weights_basis: str

    @property
    def least(self) -> int:
        """The weights, the fixed part and the KV cache of one sequence of `max_seq_len`."""
        return self.weights + self.fixed + self.kv_per_sequence

    def sequences_held(self, memory: int) -> int:
        """How many sequences of `max_seq_len` the KV cache holds on a GPU of `memory` bytes."""
        left = (memory - self.weights - self.fixed) * self.kv_fraction
        return max(0, math.floor(left / self.kv_per_sequence)) if self.kv_per_sequence else self.sequences

    def describe(self) -> str:
        """The parts, for a message."""
        rests = "" if self.known.own else f" (figures of the reference checkpoint {self.known.checkpoint})"
        return (
            f"{_gib(self.least)} per GPU at the least{rests}: weights {_gib(self.weights)} "
            f"({self.weights_basis}), CUDA pool, runtime and activations {_gib(self.fixed)}, "
            f"the KV cache of one sequence of {self.max_seq_len} tokens {_gib(self.kv_per_sequence)}"
        )


def estimate(
    known: KnownShape,
    *,
    parameters_b: float,
    weight_bytes: float,
    weights_basis: str,
    world: tuple[int, int],
    kv_bytes: int,
    max_seq_len: int,
    sequences: int,
    cross_tokens: int,
    max_num_tokens: int | None,
    pool_bytes: int,
    kv_fraction: float,
) -> MemoryEstimate:
    """The estimate for a world of (tensor, pipeline) ranks; `cross_tokens`: encoder positions attended."""
    tensor, pipeline = world
    shape = known.shape
    per_token = shape.kv_bytes_per_token(tensor_parallel_size=tensor, bytes_per_value=kv_bytes)
    per_token = math.ceil(per_token / pipeline)
    hidden = shape.attention * shape.head_dim
    activations = (max_num_tokens or DEFAULT_MAX_NUM_TOKENS) * hidden * 2 * ACTIVATION_BUFFERS
    return MemoryEstimate(
        known=known,
        weights=math.ceil(parameters_b * 1e9 * weight_bytes / (tensor * pipeline)),
        fixed=pool_bytes + RUNTIME_BYTES + activations,
        kv_per_sequence=per_token * (max_seq_len + cross_tokens),
        sequences=sequences,
        max_seq_len=max_seq_len,
        kv_fraction=kv_fraction,
        weights_basis=weights_basis,
    )


@dataclass(frozen=True)
class GpuNeeds:
    """What a plan asks of each GPU it runs on: capabilities, and memory when a shape is known."""

    requirements: tuple[Requirement, ...] = ()
    memory: MemoryEstimate | None = None


@dataclass(frozen=True)
class KindOffer:
    """A kind of GPU in reach, with the memory of one of its GPUs (MiB; None when no label says)."""

    kind: GpuKind
    memory_mib: int | None


@dataclass(frozen=True)
class Fit:
    """The verdict on needs over the kinds in reach: a refusal and warnings, each (field, message)."""

    refusal: tuple[str, str] | None = None
    warnings: tuple[tuple[str, str], ...] = ()


MEMORY_FIELD = "spec.engine"
MEMORY_FIX = (
    "raise spec.engine.tensorParallelSize, lower maxSeqLen or maxBatchSize, set weightOnlyPrecision, or "
    "place the pods on a GPU with more memory (spec.serving.pod.nodeSelector)"
)
CAPABILITY_FIX = (
    "place the pods on a kind of GPU that has it (spec.serving.pod.nodeSelector), or choose otherwise"
)


def _cannot(needs: GpuNeeds, offer: KindOffer) -> tuple[str, str] | None:
    """Why `offer` cannot run what is needed at all: (field, reason), or None."""
    for requirement in needs.requirements:
        unmet = requirement.unmet_by(offer.kind)
        if unmet is not None:
            return requirement.field, unmet
    memory = needs.memory
    if memory is None or offer.memory_mib is None or memory.least <= offer.memory_mib * MIB:
        return None
    return MEMORY_FIELD, (
        f"{offer.kind.describe()} has {_gib(offer.memory_mib * MIB)} per GPU and the model needs "
        f"{memory.describe()}"
    )


def _batch_short(memory: MemoryEstimate, offer: KindOffer) -> tuple[str, str] | None:
    """A warning when `offer`'s KV cache holds fewer whole sequences than the batch."""
    if offer.memory_mib is None:
        return None
    held = memory.sequences_held(offer.memory_mib * MIB)
    if held >= memory.sequences:
        return None
    return "spec.engine.maxBatchSize", (
        f"on {offer.kind.describe()} ({_gib(offer.memory_mib * MIB)} per GPU) the KV cache holds {held} "
        f"of {memory.sequences} sequences of {memory.max_seq_len} tokens; the rest wait (the model needs "
        f"{memory.describe()})"
    )


def fit(needs: GpuNeeds, offers: Sequence[KindOffer]) -> Fit:
    """The verdict on `needs` over the kinds in reach.

    Refused when no kind can run it (for memory, only when the figures are the spec's own checkpoint's);
    a warning for each kind that cannot, and for each that holds fewer sequences than the batch.
    """
    cannot = {offer.kind: _cannot(needs, offer) for offer in offers}
    refused = [reason for reason in cannot.values() if reason is not None]
    able = [offer for offer in offers if cannot[offer.kind] is None]
    memory = needs.memory
    short = [_batch_short(memory, offer) for offer in able] if memory is not None else []
    by_memory = any(field == MEMORY_FIELD for field, _ in refused)
    if not offers or able or (by_memory and memory is not None and not memory.known.own):
        return Fit(warnings=tuple(refused) + tuple(warning for warning in short if warning is not None))
    fixes = [MEMORY_FIX] if by_memory else [CAPABILITY_FIX]
    if by_memory and len({field for field, _ in refused}) > 1:
        fixes.append(CAPABILITY_FIX)
    reasons = "; ".join(reason for _, reason in refused)
    message = f"no kind of GPU in reach can run it: {reasons}. To fix: {'; or '.join(fixes)}"
    return Fit(refusal=(refused[0][0], message))
