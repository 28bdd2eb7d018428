"""Resolve a spec into effective settings: every per-model-type default filled in, once.

Rendering, the build plan, the cacheKey and the launch argv all read `Settings`, so a default is decided
in exactly one place and `render` shows the same values the operator uses. The kind of GPU the engine
is built for is an input beside the spec (the operator reads it from the nodes the placement reaches).
Pure: imports the api models, the facts' `GpuKind`, the knowledge table, the limits derivation and the
pinned versions.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_builder import versions
from mmd_operator.api.v1alpha1 import DerivedLimits, MultimodalDeploymentSpec, Parallelism
from mmd_operator.facts import GPU_PRODUCT_LABEL, GpuKind
from mmd_operator.knowledge import LoraCacheDefaults, ModelKnowledge, WhisperVariant, knowledge_of
from mmd_operator.plan.limits import MemoryPool, derive_limits, memory_pool

# Where serving pods mount the engine cache volume and the assembled model repository.
ENGINE_MOUNT = "/engines"
MODEL_REPOSITORY = "/models"
DEFAULT_CROSS_KV_CACHE_FRACTION = 0.5


@dataclass(frozen=True)
class EngineLayout:
    """Directories inside one cache entry `<cache dir>/<cacheKey>/`, relative to it."""

    llm: str = "llm"  # the LLM engine (Whisper: the decoder)
    encoder: str = "encoder"  # the vision engine (Whisper: the audio encoder)
    tokenizer: str = "tokenizer"  # tokenizer, processor and config files of the checkpoint
    lora: str = "lora"  # converted LoRA weights
    assets: str = "assets"  # Whisper's tokenizer and mel filters, for whisper_bls


LAYOUT = EngineLayout()


@dataclass(frozen=True)
class Settings:
    """A spec with every default resolved; the input of every planner."""

    spec: MultimodalDeploymentSpec
    knowledge: ModelKnowledge
    limits: DerivedLimits
    memory_pool: MemoryPool
    dtype: str
    tensor_parallel_size: int
    # The world of one replica and its shape (`spec.parallelism`), carried by the plan.
    parallelism: Parallelism
    variant: WhisperVariant | None
    # The engine path's release the engine is built and served with.
    release: versions.EngineRelease
    builder_image: str
    serving_image: str
    enable_bls: bool
    exclude_input_in_output: bool
    kv_cache_free_gpu_mem_fraction: float
    cross_kv_cache_fraction: float | None
    max_tokens_in_paged_kv_cache: int | None
    batch_scheduler_policy: str
    lora_cache: LoraCacheDefaults | None
    # The kind of GPU the engine is built for and served on; None when nothing says (no feature discovery).
    gpu_kind: GpuKind | None = None

    def gpu_selector(self) -> dict[str, str]:
        """The node label that keeps the build and serving pods on the engine's kind of GPU.

        None for GPUs asked for by claim: the claim's template selects the kind (`desired.gpu_claims`).
        """
        if self.gpu_kind is None or self.spec.gpus.resource_claim is not None:
            return {}
        return {GPU_PRODUCT_LABEL: self.gpu_kind.product}

    def engine_dir(self, cache_key: str, part: str) -> str:
        """Absolute path of `part` of the cache entry `cache_key`, as the serving pods see it."""
        return f"{ENGINE_MOUNT}/{cache_key}/{part}"


def resolve(spec: MultimodalDeploymentSpec, gpu_kind: GpuKind | None = None) -> Settings:
    """Return the effective settings of `spec`, its engine built for `gpu_kind`.

    Raises:
        InvalidSpecError: when derived limits contradict values in the spec.
    """
    knowledge = knowledge_of(spec.model.type)
    serving = spec.serving
    lora_cache = None
    if knowledge.lora_cache is not None:
        type_defaults, given = knowledge.lora_cache, serving.lora_cache
        lora_cache = LoraCacheDefaults(
            optimal_adapter_size=given.optimal_adapter_size or type_defaults.optimal_adapter_size,
            max_adapter_size=given.max_adapter_size or type_defaults.max_adapter_size,
            gpu_memory_fraction=given.gpu_memory_fraction or type_defaults.gpu_memory_fraction,
            host_memory_bytes=(
                given.host_memory_bytes
                if given.host_memory_bytes is not None
                else type_defaults.host_memory_bytes
            ),
        )
    cross_fraction = None
    if knowledge.encoder_decoder:
        cross_fraction = serving.cross_kv_cache_fraction or DEFAULT_CROSS_KV_CACHE_FRACTION
    limits = derive_limits(spec)
    release = versions.ENGINE_RELEASES.get(
        spec.engine.tensorrt_llm_version or "", versions.DEFAULT_ENGINE_RELEASE
    )
    return Settings(
        spec=spec,
        knowledge=knowledge,
        limits=limits,
        memory_pool=memory_pool(
            spec,
            max_multimodal_len=limits.max_multimodal_len,
            encoder_input_len=limits.max_encoder_input_len,
            triton_batch=limits.triton_max_batch_size,
        ),
        dtype=spec.engine.dtype or knowledge.build.dtype,
        tensor_parallel_size=spec.engine.tensor_parallel_size,
        parallelism=spec.parallelism,
        variant=knowledge.variant(spec.model.variant) if spec.model.variant else None,
        release=release,
        builder_image=spec.engine.builder_image or release.builder_image,
        serving_image=serving.image or release.serving_image,
        enable_bls=serving.enable_bls if serving.enable_bls is not None else knowledge.bls,
        exclude_input_in_output=(
            serving.exclude_input_in_output
            if serving.exclude_input_in_output is not None
            else knowledge.serving.exclude_input_in_output
        ),
        kv_cache_free_gpu_mem_fraction=(
            serving.kv_cache_free_gpu_mem_fraction or knowledge.serving.kv_cache_free_gpu_mem_fraction
        ),
        cross_kv_cache_fraction=cross_fraction,
        max_tokens_in_paged_kv_cache=(
            serving.max_tokens_in_paged_kv_cache or knowledge.serving.max_tokens_in_paged_kv_cache
        ),
        batch_scheduler_policy=serving.batch_scheduler_policy or knowledge.serving.batch_scheduler_policy,
        lora_cache=lora_cache,
        gpu_kind=gpu_kind,
    )
