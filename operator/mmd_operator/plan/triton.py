"""The triton-trtllm-engine runtime's plan: derived limits, cacheKey, build plan, checked repository, argv.

`plan_triton` derives everything the operator needs from a spec of this runtime, after the rendered
repository passed the same check Triton does at load time (its protobuf parse and the ensemble wiring),
so a repository `mmctl render` would refuse never reaches a cluster. Pure: imports the api models, the
knowledge, the builder's plan format and this package's modules of the runtime.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, ClassVar

from engine_builder.plan_format import BuildPlan
from mmd_operator.api.v1alpha1 import DerivedLimits, MultimodalDeploymentSpec, Parallelism
from mmd_operator.api.v1alpha1.rules import BUILD_SHARED_MEMORY
from mmd_operator.api.validation import InvalidSpecError
from mmd_operator.facts import GpuKind
from mmd_operator.knowledge import ImageInput, Modality, RepositoryLayout, Runtime
from mmd_operator.plan.build_plan import build_plan
from mmd_operator.plan.cache_key import cache_key, cache_key_inputs
from mmd_operator.plan.fit import (
    WEIGHT_BYTES,
    GpuNeeds,
    KnownShape,
    context_problems,
    estimate,
    requirements,
    shape_of,
)
from mmd_operator.plan.launch import LaunchPlan, launch_plan
from mmd_operator.plan.model_repository import ModelRepository, render_repository
from mmd_operator.plan.pod_resources import (
    BYTES_16_BITS,
    MIB,
    Checkpoint,
    Figures,
    PlannedResources,
    Share,
    checkpoint_of,
    counted,
    effective,
    helper_resources,
    serving_pods,
    shared_memory_mib,
)
from mmd_operator.plan.repository_check import ModelConfig, check_repository
from mmd_operator.plan.settings import Settings, resolve

# Host memory (MiB) of what runs in the build and serving pods, besides each model type's figures
# (`knowledge.HostMemory`): estimates of what each process loads (docs/resource.md#cpu-and-memory).
# A tritonserver rank: the server, TensorRT-LLM's executor and its libraries, a CUDA context, pinned buffers.
TRITON_RANK_MIB = 3072
# A Python model instance that detokenizes or orchestrates (postprocessing, tensorrt_llm_bls): Python,
# numpy, transformers and the tokenizer.
TOKENIZER_INSTANCE_MIB = 1024
# multimodal_encoders on a rank other than 0: it imports torch and TensorRT-LLM, then returns.
IDLE_ENCODER_MIB = 2048
# The builder: Python, torch, TensorRT-LLM, a CUDA context and TensorRT's host workspace.
BUILDER_MIB = 4096
# CPU (millicores): a rank's scheduling loop and GPU launches keep about a core busy; a Python instance
# that decodes images, video or audio takes half a core while it works, one that tokenizes a quarter.
RANK_CPU, DECODING_INSTANCE_CPU, INSTANCE_CPU = 1000, 500, 250
# The build: the conversion runs torch on the CPU; trtllm-build builds one rank per worker.
BUILD_CPU, BUILD_RANK_CPU = 1000, 1000
_WEIGHT_BYTES = {"none": BYTES_16_BITS, "int8": 1, "int4": 0.5}
SERVER_CONTAINER = "tritonserver"
BUILDER_CONTAINER = "engine-builder"
ASSEMBLY_CONTAINER = "model-repository"


@dataclass(frozen=True)
class TritonPlan:
    """The derived limits, cacheKey, build plan, checked model repository and launch command of a spec."""

    runtime: ClassVar[Runtime] = Runtime.TRITON_TRTLLM_ENGINE

    settings: Settings
    cache_key: str
    build: BuildPlan
    repository: ModelRepository
    launch: LaunchPlan
    resources: PlannedResources
    # What each GPU must offer: capabilities, and memory (`fit`).
    gpu_needs: GpuNeeds

    @property
    def spec(self) -> MultimodalDeploymentSpec:
        """The spec planned."""
        return self.settings.spec

    @property
    def parallelism(self) -> Parallelism:
        """The world of one replica and its shape."""
        return self.settings.parallelism

    @property
    def gpu_kind(self) -> GpuKind | None:
        """The kind of GPU the engine is built for (None: not known)."""
        return self.settings.gpu_kind

    @property
    def limits(self) -> DerivedLimits:
        """The effective build limits and serving sizes."""
        return self.settings.limits

    def derived_summary(self) -> dict[str, Any]:
        """Derived and effective values under TensorRT-LLM's own names, plus the cacheKey and its inputs."""
        settings = self.settings
        summary: dict[str, Any] = {
            "model_type": settings.knowledge.model_type.value,
            "cache_key": self.cache_key,
            "dtype": settings.dtype,
            "tp_size": settings.tensor_parallel_size,
            **self.limits.model_dump(exclude_none=True),
            "cuda_memory_pool_basis": settings.memory_pool.basis,
            "features_per_image": settings.knowledge.features_per_image,
            "encoder_input_features_data_type": settings.knowledge.encoder_input_dtype,
            "n_mels": settings.variant.n_mels if settings.variant else None,
            "versions": {
                "trtllm": settings.release.tensorrt_llm,
                "serving_image": settings.serving_image,
                "builder_image": settings.builder_image,
                "templates": settings.release.template_revision,
                # The host driver branch the release's images were built for (CUDA's forward
                # compatibility aside, the GPU nodes need at least this one).
                "cuda_driver": settings.release.cuda_driver,
            },
            "cache_key_inputs": cache_key_inputs(settings),
            "pod_resources": [pod.model_dump(by_alias=True) for pod in self.resources.status()],
        }
        return {key: value for key, value in summary.items() if value is not None}

    def files(self) -> dict[str, str]:
        """Every file of the plan, relative to an output directory (what `mmctl render` writes)."""
        files = {f"model_repository/{name}": text for name, text in self.repository.files().items()}
        files["derived.json"] = json.dumps(self.derived_summary(), indent=2) + "\n"
        files["build_plan.json"] = self.build.model_dump_json(indent=2) + "\n"
        launch = asdict(self.launch)
        launch["world_size"] = len(self.launch.ranks)
        files["launch.json"] = json.dumps(launch, indent=2) + "\n"
        return files

    @property
    def artifact_location(self) -> str:
        """The engine's directory in the cache claim: its cacheKey, known from the spec alone."""
        return self.cache_key


def plan_triton(spec: MultimodalDeploymentSpec, gpu_kind: GpuKind | None = None) -> TritonPlan:
    """The plan of a valid triton-trtllm-engine spec, its engine built for `gpu_kind`.

    Raises:
        InvalidSpecError: when the spec's values contradict derived limits.
        RenderError: when a template leaves a placeholder (a bug, never a user error).
        RepositoryError: when the rendered repository would not load in Triton (a bug, never a user error).
    """
    settings = resolve(spec, gpu_kind)
    known = _shape(settings)
    problems = context_problems(known, settings.limits.max_seq_len, "spec.engine.maxSeqLen")
    if problems:
        raise InvalidSpecError(problems)
    key = cache_key(settings)
    repository = render_repository(settings, cache_key=key)
    models = check_repository(repository.configs)
    return TritonPlan(
        settings=settings,
        cache_key=key,
        build=build_plan(settings, cache_key=key),
        repository=repository,
        launch=launch_plan(settings),
        resources=pod_resources(settings, models),
        gpu_needs=_gpu_needs(settings, known),
    )


def _shape(settings: Settings) -> KnownShape | None:
    """The language model the figures rest on: a Whisper decoder, the checkpoint's, the reference's."""
    if settings.variant is not None:
        return KnownShape(settings.variant.decoder(), f"Whisper {settings.variant.name}", own=True)
    hub = settings.spec.model.source.huggingface
    knowledge = settings.knowledge
    return shape_of(hub.repo if hub else None, knowledge.checkpoints, knowledge.reference_checkpoint)


def _gpu_needs(settings: Settings, known: KnownShape | None) -> GpuNeeds:
    """What each GPU of the engine's world must offer: rank 0 holds the CUDA pool and the vision engine."""
    engine = settings.spec.engine
    needs = requirements(dtype=settings.dtype, kv_cache_dtype=engine.kv_cache_dtype)
    if known is None:
        return GpuNeeds(needs)
    size = checkpoint(settings)
    precision = engine.weight_only_precision if engine.weight_only_precision != "none" else settings.dtype
    limits, world = settings.limits, settings.tensor_parallel_size
    # Whisper's decoder attends the encoder's 1500 positions (3000 mel frames, halved by its convolutions).
    cross = (
        (limits.max_encoder_input_len or 0) // 2
        if settings.knowledge.layout is RepositoryLayout.WHISPER
        else 0
    )
    memory = estimate(
        known,
        parameters_b=size.parameters_b,
        weight_bytes=WEIGHT_BYTES[precision],
        weights_basis=f"{size.parameters_b:g} B parameters at {precision} over {world} rank(s)",
        world=(world, 1),
        kv_bytes=1 if engine.kv_cache_dtype == "fp8" else 2,
        max_seq_len=limits.max_seq_len,
        sequences=limits.max_batch_size,
        cross_tokens=cross,
        max_num_tokens=limits.max_num_tokens,
        pool_bytes=limits.cuda_memory_pool_bytes,
        kv_fraction=settings.kv_cache_free_gpu_mem_fraction,
    )
    return GpuNeeds(needs, memory)


def checkpoint(settings: Settings) -> Checkpoint:
    """The size of the checkpoint built: a Whisper variant's, else known, stated or the reference's."""
    knowledge = settings.knowledge
    if settings.variant is not None:
        size = settings.variant.parameters_b
        return Checkpoint(size, f"Whisper {settings.variant.name} has {size:g} B parameters")
    return checkpoint_of(
        settings.spec, reference=knowledge.reference_checkpoint, reference_b=knowledge.host.parameters_b
    )


def _instances(config: ModelConfig) -> int:
    return sum(group.count for group in config.instance_group) or 1


def _decodes(settings: Settings) -> bool:
    """Whether the server decodes media itself (images sent as bytes or URLs, video, audio)."""
    knowledge = settings.knowledge
    return bool(knowledge.modalities - {Modality.IMAGE}) or ImageInput.BYTES in knowledge.image_inputs


def _rank(
    settings: Settings, models: Mapping[str, ModelConfig], rank: int, weights: Checkpoint
) -> list[Share]:
    """What one tritonserver rank and the Python model instances it starts hold."""
    knowledge, world = settings.knowledge, settings.tensor_parallel_size
    bytes_per_parameter = _WEIGHT_BYTES[settings.spec.engine.weight_only_precision]
    shares = [
        Share("tritonserver rank", TRITON_RANK_MIB),
        Share("its engine, read whole", weights.mib(bytes_per_parameter, Fraction(1, world))),
    ]
    if settings.lora_cache is not None:
        shares.append(Share("LoRA host cache", math.ceil(settings.lora_cache.host_memory_bytes / MIB)))
    loaded = models if rank == 0 else {name: models[name] for name in knowledge.rank_models}
    each = {
        "preprocessing": knowledge.host.preprocessing_mib,
        "whisper_bls": knowledge.host.preprocessing_mib,
        "multimodal_encoders": knowledge.host.encoder_mib if rank == 0 else IDLE_ENCODER_MIB,
    }
    for name, config in sorted(loaded.items()):
        if config.backend == "python":
            shares.append(
                Share(f"{name} instance", each.get(name, TOKENIZER_INSTANCE_MIB), _instances(config))
            )
    return shares


def _rank_cpu(settings: Settings, models: Mapping[str, ModelConfig], rank: int) -> int:
    loaded = models if rank == 0 else {name: models[name] for name in settings.knowledge.rank_models}
    decoding = DECODING_INSTANCE_CPU if _decodes(settings) else INSTANCE_CPU
    instances = sum(
        _instances(config) * (decoding if name == "preprocessing" else INSTANCE_CPU)
        for name, config in loaded.items()
        if config.backend == "python"
    )
    return RANK_CPU + instances


def serving_figures(settings: Settings, models: Mapping[str, ModelConfig], ranks: range) -> Figures:
    """A serving pod running the tritonserver ranks `ranks` (rank 0 serves the whole repository)."""
    weights = checkpoint(settings)
    shares = [share for rank in ranks for share in _rank(settings, models, rank, weights)]
    shm = Share("/dev/shm", shared_memory_mib(settings.spec.serving.shared_memory_size))
    return Figures(
        cpu_millis=sum(_rank_cpu(settings, models, rank) for rank in ranks),
        processes=counted(shares),
        volumes=(shm,),
        rests_on=weights.known_by,
    )


def build_figures(settings: Settings) -> Figures:
    """The build pod: the conversion holds the checkpoint twice, as loaded and as converted.

    trtllm-build's workers afterwards hold one rank's share each, weights and engine: no more in all.
    """
    weights = checkpoint(settings)
    bytes_per_parameter = _WEIGHT_BYTES[settings.spec.engine.weight_only_precision]
    ranks = settings.parallelism.gpus_per_pod
    published = settings.knowledge.host.published_bytes
    return Figures(
        cpu_millis=BUILD_CPU + BUILD_RANK_CPU * ranks,
        processes=(
            Share("builder", BUILDER_MIB),
            Share(f"the checkpoint as loaded, {8 * published} bits", weights.mib(published)),
            Share("the converted weights", weights.mib(bytes_per_parameter)),
        ),
        volumes=(Share("/dev/shm", shared_memory_mib(BUILD_SHARED_MEMORY)),),
        rests_on=weights.known_by,
    )


def pod_resources(settings: Settings, models: Mapping[str, ModelConfig]) -> PlannedResources:
    """The build pod's, the serving pods' (a group's leader and workers) and the init container's."""
    spec = settings.spec
    per_pod = settings.parallelism.gpus_per_pod

    def figures(serves: bool) -> Figures:
        # A group's leader runs the first pod's ranks (rank 0 among them); a worker, the ranks of another.
        return serving_figures(settings, models, range(per_pod) if serves else range(per_pod, 2 * per_pod))

    serving, worker = serving_pods(
        settings.parallelism, spec.serving.pod.resources, SERVER_CONTAINER, figures
    )
    build = effective(build_figures(settings), spec.build.pod.resources, "Build", BUILDER_CONTAINER, per_pod)
    return PlannedResources(
        job=build,
        serving=serving,
        worker=worker,
        helper=helper_resources(ASSEMBLY_CONTAINER),
    )
