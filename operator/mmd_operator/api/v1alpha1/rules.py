"""The cross-field CEL rules of the spec, as `x-kubernetes-validations` entries on the whole spec.

`spec_rules` lists them: what each model type takes (from `mmd_operator.knowledge`), what each runtime
takes, immutable fields, autoscaling against replicas, the runtime's metrics and the GPU budget, and the
pods' memory limits against their memory-backed /dev/shm.
Rules that read one model's fields only sit on that model. Pure: imports pydantic's JSON types,
`mmd_operator.knowledge`, `mmd_operator.scaling_metrics` and the package's `cel` and `parallelism`; none
of the models.
"""

from __future__ import annotations

from pydantic import JsonValue
from pydantic.config import JsonDict

from mmd_operator.api.v1alpha1.cel import REQUIRED, cel_list, cel_rule
from mmd_operator.api.v1alpha1.parallelism import DEFAULT_GPUS_PER_POD, GPUS_PER_POD, WORLD
from mmd_operator.knowledge import (
    KNOWLEDGE,
    NODE_WORLD,
    LanguageModelShape,
    Modality,
    ModelType,
    Runtime,
    checkpoint_shapes,
    pipeline_types,
    serve_types_where,
    types_by_largest_world,
    types_of,
    types_taking,
    types_where,
)
from mmd_operator.scaling_metrics import SCALING_METRICS, metrics_of

# The model types whose model.variant names a Whisper checkpoint.
WHISPER_TYPES = types_where("whisper_variants")
# The tensor-parallel sizes a spec may ask for (engine.tensorParallelSize).
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8, 16, 32)
_WORLD_WORDS = (
    "engine.tensorParallelSize x engine.pipelineParallelSize ({self.engine.tensorParallelSize} x "
    f"{{self.engine.pipelineParallelSize}} = {{{WORLD}}})"
)
# A replica of one pod: the pod holds the whole world.
_ONE_POD = f"{WORLD} == {GPUS_PER_POD}"


def _only_for(attribute: str, condition: str, what: str, field_path: str) -> JsonDict:
    """A rule allowing `condition` only for model types whose knowledge flag `attribute` is set."""
    allowed = types_where(attribute)
    return cel_rule(
        f"!({condition}) || self.model.type in {cel_list(allowed)}",
        f"{what} is supported only for model types {', '.join(allowed)}; model.type is {{self.model.type}}",
        field_path=field_path,
    )


def _engine_and_common_rules() -> list[JsonDict]:
    lora_types = types_where("lora")
    encoder_decoder = types_where("encoder_decoder")
    whisper = ", ".join(WHISPER_TYPES)
    rules: list[JsonDict] = [
        # A transition rule: only an update can break it (the API server gives it the stored spec as oldSelf).
        cel_rule(
            "self.model.type == oldSelf.model.type",
            "model.type is immutable ({oldSelf.model.type}, now {self.model.type}): another model type is "
            "another deployment (engines, repository layout and serving pods all differ); create a new "
            "MultimodalDeployment instead",
            field_path=".model.type",
        ),
        cel_rule(
            f"!(self.model.type in {cel_list(WHISPER_TYPES)}) || has(self.model.variant)",
            f"model.variant is required for {whisper} (the Whisper checkpoint, e.g. large-v3)",
            field_path=".model.variant",
            reason=REQUIRED,
        ),
        _only_for("whisper_variants", "has(self.model.variant)", "model.variant", ".model.variant"),
        cel_rule(
            f"!(self.model.type in {cel_list(lora_types)}) || has(self.model.lora)",
            f"model.lora is required for {', '.join(lora_types)}",
            field_path=".model.lora",
            reason=REQUIRED,
        ),
        _only_for("lora", "has(self.model.lora)", "model.lora", ".model.lora"),
        _only_for(
            "multi_image",
            "self.engine.maxImagesPerRequest > 1",
            "maxImagesPerRequest above 1 (here {self.engine.maxImagesPerRequest})",
            ".engine.maxImagesPerRequest",
        ),
        # engine.vision is stored only when the user writes it (no empty defaults), hence has() first.
        _only_for(
            "video",
            "has(self.engine.vision) && has(self.engine.vision.maxPatchesPerRequest)",
            "engine.vision.maxPatchesPerRequest ({self.engine.vision.maxPatchesPerRequest})",
            ".engine.vision.maxPatchesPerRequest",
        ),
        _only_for(
            "has_vision_engine",
            "has(self.engine.vision) && has(self.engine.vision.maxBatchSize)",
            "engine.vision.maxBatchSize ({self.engine.vision.maxBatchSize})",
            ".engine.vision.maxBatchSize",
        ),
        _only_for(
            "uses_prompt_table",
            "has(self.engine.maxMultimodalLen)",
            "maxMultimodalLen ({self.engine.maxMultimodalLen})",
            ".engine.maxMultimodalLen",
        ),
        _only_for(
            "encoder_decoder",
            "has(self.engine.maxEncoderInputLen)",
            "maxEncoderInputLen ({self.engine.maxEncoderInputLen})",
            ".engine.maxEncoderInputLen",
        ),
        _only_for(
            "fp8_kv_cache", "self.engine.kvCacheDtype == 'fp8'", "kvCacheDtype fp8", ".engine.kvCacheDtype"
        ),
        _only_for(
            "image_urls",
            "self.serving.imageUrlInput",
            "imageUrlInput (the server fetching image URLs)",
            ".serving.imageUrlInput",
        ),
        _only_for("kv_cache_reuse", "self.serving.kvCacheReuse", "kvCacheReuse", ".serving.kvCacheReuse"),
        _only_for(
            "chunked_context", "self.serving.chunkedContext", "chunkedContext", ".serving.chunkedContext"
        ),
        cel_rule(
            f"!has(self.serving.crossKvCacheFraction) || self.model.type in {cel_list(encoder_decoder)}",
            "crossKvCacheFraction must not be set for decoder-only model types (TensorRT-LLM refuses it); "
            f"it applies to {', '.join(encoder_decoder)}; model.type is {{self.model.type}}",
            field_path=".serving.crossKvCacheFraction",
        ),
        cel_rule(
            f"!(self.model.type in {cel_list(WHISPER_TYPES)}) || !has(self.serving.batchSchedulerPolicy) || "
            "self.serving.batchSchedulerPolicy != 'max_utilization'",
            f"batchSchedulerPolicy max_utilization does not serve {whisper}: TensorRT-LLM refuses every "
            "request to a model with an encoder engine under it (Encoder or Encoder-Decoder model don't "
            "support max utilization scheduler yet); use guaranteed_no_evict, the default; model.type is "
            "{self.model.type}",
            field_path=".serving.batchSchedulerPolicy",
        ),
        _only_for(
            "bls",
            "has(self.serving.enableBls) && self.serving.enableBls",
            "enableBls (the tensorrt_llm_bls entry point)",
            ".serving.enableBls",
        ),
        cel_rule(
            "!self.serving.accumulateTokens || self.serving.streaming",
            "accumulateTokens needs streaming: set serving.streaming to true",
            field_path=".serving.accumulateTokens",
        ),
        cel_rule(
            "!has(self.serving.tritonMaxBatchSize) || !has(self.engine.maxBatchSize) || "
            "self.serving.tritonMaxBatchSize <= self.engine.maxBatchSize",
            "serving.tritonMaxBatchSize ({self.serving.tritonMaxBatchSize}) must not exceed "
            "engine.maxBatchSize ({self.engine.maxBatchSize})",
            field_path=".serving.tritonMaxBatchSize",
        ),
        cel_rule(
            "!has(self.serving.maxBeamWidth) || !has(self.engine.maxBeamWidth) || "
            "self.serving.maxBeamWidth <= self.engine.maxBeamWidth",
            "serving.maxBeamWidth ({self.serving.maxBeamWidth}) must not exceed engine.maxBeamWidth "
            "({self.engine.maxBeamWidth})",
            field_path=".serving.maxBeamWidth",
        ),
        _only_for("whisper_variants", "self.serving.zeroPad", "zeroPad", ".serving.zeroPad"),
    ]
    for model_type in WHISPER_TYPES:
        knowledge = KNOWLEDGE[ModelType(model_type)]
        supported = [v.name for v in knowledge.whisper_variants if not v.english_only]
        english = [v.name for v in knowledge.whisper_variants if v.english_only]
        rules.append(
            cel_rule(
                f"self.model.type != '{model_type}' || !has(self.model.variant) || "
                f"self.model.variant in {cel_list(supported)}",
                f"model.variant ({{self.model.variant}}) for {model_type} must be one of "
                f"{', '.join(supported)}"
                + (
                    f" (English-only {', '.join(english)} are not supported: whisper_bls decodes with the "
                    "multilingual tokenizer)"
                    if english
                    else ""
                ),
                field_path=".model.variant",
            )
        )
    rules += [
        cel_rule(
            f"!(self.model.type == '{knowledge.model_type.value}' && has(self.engine.tensorrtLlmVersion) && "
            f"self.engine.tensorrtLlmVersion == '{release}')",
            f"engine.tensorrtLlmVersion {release} is not offered for model.type "
            f"{knowledge.model_type.value}: {why}; the default release serves it (leave "
            "engine.tensorrtLlmVersion unset)",
            field_path=".engine.tensorrtLlmVersion",
        )
        for knowledge in KNOWLEDGE.values()
        for release, why in knowledge.refused_releases
    ]
    # The rules about fields whose meaning is the engine runtime's hold only there; on trtllm-serve its own
    # rules (below) say what these fields may be.
    return [_on_engine(rule) if rule.get("fieldPath") in _ENGINE_RULE_PATHS else rule for rule in rules]


# The runtime a spec names, in CEL (a spec that names none is served by triton-trtllm-engine).
SERVE_RUNTIME = f"has(self.runtime) && self.runtime == '{Runtime.TRTLLM_SERVE}'"
ENGINE_RUNTIME = f"!has(self.runtime) || self.runtime == '{Runtime.TRITON_TRTLLM_ENGINE}'"
_RUNTIME_OF_SELF = f"(has(self.runtime) ? self.runtime : '{Runtime.TRITON_TRTLLM_ENGINE}')"
_RUNTIME_OF_OLD = f"(has(oldSelf.runtime) ? oldSelf.runtime : '{Runtime.TRITON_TRTLLM_ENGINE}')"
_ENGINE_RULE_PATHS = frozenset(
    {
        ".engine.maxImagesPerRequest",
        ".engine.vision.maxPatchesPerRequest",
        ".engine.vision.maxBatchSize",
        ".engine.maxMultimodalLen",
        ".engine.maxEncoderInputLen",
        ".engine.kvCacheDtype",
        ".serving.imageUrlInput",
        ".serving.kvCacheReuse",
        ".serving.chunkedContext",
        ".serving.enableBls",
        ".serving.accumulateTokens",
        ".serving.tritonMaxBatchSize",
        ".serving.maxBeamWidth",
    }
)


def _on_engine(rule: JsonDict) -> JsonDict:
    """`rule`, holding only on the triton-trtllm-engine runtime."""
    return {**rule, "rule": f"({SERVE_RUNTIME}) || ({rule['rule']})"}


def _serve_only_for(attribute: str, condition: str, what: str, field_path: str) -> JsonDict:
    """On trtllm-serve, `condition` only for the model types whose serve knowledge flag `attribute` is set."""
    allowed = serve_types_where(attribute)
    return cel_rule(
        f"!({SERVE_RUNTIME}) || !({condition}) || self.model.type in {cel_list(allowed)}",
        f"{what} is supported on trtllm-serve only for model types {', '.join(allowed)} (TensorRT-LLM "
        "1.2.1's multimodal support matrix); model.type is {self.model.type}",
        field_path=field_path,
    )


# Fields with no meaning on trtllm-serve: (field path from the spec, the condition that it is set, its value
# in the message or None, what it belongs to). Fields the CRD defaults are compared with their default.
_BUILD = "a setting of the TensorRT engine build, and trtllm-serve builds nothing"
_TRITON = "a setting of Triton's TensorRT-LLM backend (runtime triton-trtllm-engine)"
_NOT_ON_SERVE: tuple[tuple[str, str, str | None, str], ...] = (
    ("engine.builderImage", "has(self.engine.builderImage)", "self.engine.builderImage", _BUILD),
    (
        "engine.tensorrtLlmVersion",
        "has(self.engine.tensorrtLlmVersion)",
        "self.engine.tensorrtLlmVersion",
        "the engine path's release (trtllm-serve's TensorRT-LLM is its image's)",
    ),
    ("engine.maxInputLen", "has(self.engine.maxInputLen)", "self.engine.maxInputLen", _BUILD),
    ("engine.maxMultimodalLen", "has(self.engine.maxMultimodalLen)", "self.engine.maxMultimodalLen", _BUILD),
    (
        "engine.maxEncoderInputLen",
        "has(self.engine.maxEncoderInputLen)",
        "self.engine.maxEncoderInputLen",
        _BUILD,
    ),
    ("engine.maxBeamWidth", "has(self.engine.maxBeamWidth)", "self.engine.maxBeamWidth", _BUILD),
    ("engine.vision", "has(self.engine.vision)", None, _BUILD),
    (
        "engine.weightOnlyPrecision",
        "self.engine.weightOnlyPrecision != 'none'",
        "self.engine.weightOnlyPrecision",
        _BUILD,
    ),
    ("engine.calibrationSize", "self.engine.calibrationSize != 512", "self.engine.calibrationSize", _BUILD),
    (
        "engine.maxImagesPerRequest",
        "self.engine.maxImagesPerRequest != 1",
        "self.engine.maxImagesPerRequest",
        _BUILD,
    ),
    (
        "model.hiddenSize",
        "has(self.model.hiddenSize)",
        "self.model.hiddenSize",
        "sizes Triton's CUDA memory pool",
    ),
    (
        "serving.tritonMaxBatchSize",
        "has(self.serving.tritonMaxBatchSize)",
        "self.serving.tritonMaxBatchSize",
        _TRITON,
    ),
    (
        "serving.streaming",
        "self.serving.streaming",
        "self.serving.streaming",
        _TRITON + "; OpenAI clients ask for streaming per request",
    ),
    ("serving.maxBeamWidth", "has(self.serving.maxBeamWidth)", "self.serving.maxBeamWidth", _TRITON),
    ("serving.enableBls", "has(self.serving.enableBls)", "self.serving.enableBls", _TRITON),
    ("serving.accumulateTokens", "self.serving.accumulateTokens", "self.serving.accumulateTokens", _TRITON),
    (
        "serving.imageUrlInput",
        "self.serving.imageUrlInput",
        "self.serving.imageUrlInput",
        "a Triton input; trtllm-serve always fetches the http(s) image URLs clients send, and "
        "serving.networkPolicy.egress decides where it may connect",
    ),
    (
        "serving.batchSchedulerPolicy",
        "has(self.serving.batchSchedulerPolicy)",
        "self.serving.batchSchedulerPolicy",
        _TRITON,
    ),
    (
        "serving.excludeInputInOutput",
        "has(self.serving.excludeInputInOutput)",
        "self.serving.excludeInputInOutput",
        _TRITON,
    ),
    (
        "serving.batchingStrategy",
        "self.serving.batchingStrategy != 'inflight_fused_batching'",
        "self.serving.batchingStrategy",
        _TRITON,
    ),
    (
        "serving.logitsDatatype",
        "self.serving.logitsDatatype != 'TYPE_FP32'",
        "self.serving.logitsDatatype",
        _TRITON,
    ),
    (
        "serving.queue",
        "self.serving.queue.maxQueueDelayMicroseconds != 0 || "
        "self.serving.queue.preprocessingMaxQueueDelayMicroseconds != 20000 || "
        "self.serving.queue.maxQueueSize != 0",
        None,
        "Triton's dynamic batching",
    ),
    (
        "serving.instances",
        "self.serving.instances.preprocessing != 1 || self.serving.instances.postprocessing != 1 || "
        "has(self.serving.instances.bls)",
        None,
        "Triton's Python model instances",
    ),
    ("serving.loraCache", "has(self.serving.loraCache)", None, _TRITON),
    ("serving.modelCodePath", "has(self.serving.modelCodePath)", "self.serving.modelCodePath", _TRITON),
    (
        "serving.cudaMemoryPoolBytes",
        "has(self.serving.cudaMemoryPoolBytes)",
        "self.serving.cudaMemoryPoolBytes",
        _TRITON,
    ),
)


def engine_only_fields() -> dict[str, str]:
    """The spec fields that mean nothing on trtllm-serve (dotted, from the spec), with what each belongs to.

    What `mmctl migrate` leaves out of an engine resource.
    """
    return {path: belongs for path, _, _, belongs in _NOT_ON_SERVE}


def _not_on_serve(path: str, present: str, value: str | None, belongs: str) -> JsonDict:
    shown = f" ({{{value}}})" if value is not None else ""
    return cel_rule(
        f"!({SERVE_RUNTIME}) || !({present})",
        f"{path}{shown} has no meaning on runtime trtllm-serve: it is {belongs}; leave it out",
        field_path=f".{path}",
    )


def _modality_rules() -> list[JsonDict]:
    """serving.modalities names only what the model type takes on its runtime: one rule per modality."""
    rules = []
    for modality in Modality:
        takers = {runtime: types_taking(runtime, modality) for runtime in Runtime}
        serve, engine = takers[Runtime.TRTLLM_SERVE], takers[Runtime.TRITON_TRTLLM_ENGINE]
        who = " and by ".join(
            f"{', '.join(types)} on {runtime}" for runtime, types in takers.items() if types
        )
        rules.append(
            cel_rule(
                f"!has(self.serving.modalities) || !('{modality}' in self.serving.modalities) || "
                f"(({SERVE_RUNTIME}) ? self.model.type in {cel_list(serve)} : "
                f"self.model.type in {cel_list(engine)})",
                f"serving.modalities names {modality}, which the model type does not take on its runtime "
                f"({modality} is taken by {who}; model.type is {{self.model.type}} on runtime "
                f"{{{_RUNTIME_OF_SELF}}})",
                field_path=".serving.modalities",
            )
        )
    return rules


def _sizes_in_words(sizes: list[int]) -> str:
    return f"{', '.join(map(str, sizes[:-1]))} or {sizes[-1]}" if len(sizes) > 1 else str(sizes[0])


def _heads_rules() -> list[JsonDict]:
    """On trtllm-serve, the tensor size must split a known checkpoint's heads, the pipeline size its layers.

    One rule per head count that some allowed size cannot split, naming the sizes that can; one per
    layer count.
    """
    by_heads: dict[tuple[int, int], list[str]] = {}
    by_layers: dict[int, list[str]] = {}
    shapes: dict[str, LanguageModelShape] = checkpoint_shapes()
    for repo, shape in shapes.items():
        by_heads.setdefault((shape.attention, shape.key_value), []).append(repo)
        by_layers.setdefault(shape.layers, []).append(repo)
    known = (
        f"!({SERVE_RUNTIME}) || !has(self.model.source.huggingface) || "
        "!(self.model.source.huggingface.repo in "
    )
    rules = []
    for (attention, key_value), repos in by_heads.items():
        shape = LanguageModelShape(attention, key_value, 1)
        sizes = [size for size in TENSOR_PARALLEL_SIZES if shape.split_by(size)]
        if len(sizes) == len(TENSOR_PARALLEL_SIZES):
            continue
        rules.append(
            cel_rule(
                f"{known}{cel_list(repos)}) || self.engine.tensorParallelSize in {sizes}",
                "engine.tensorParallelSize ({self.engine.tensorParallelSize}) cannot split the checkpoint's "
                "heads among its ranks: every rank needs whole attention heads, and key-value heads are "
                "split or, when fewer than the ranks, replicated; {self.model.source.huggingface.repo} has "
                f"{attention} attention heads and {key_value} key-value heads, so the size can be "
                f"{_sizes_in_words(sizes)}",
                field_path=".engine.tensorParallelSize",
            )
        )
    for layers, repos in sorted(by_layers.items()):
        stages = [size for size in range(2, 17) if layers % size == 0]
        rules.append(
            cel_rule(
                f"{known}{cel_list(repos)}) || {layers} % self.engine.pipelineParallelSize == 0",
                "engine.pipelineParallelSize ({self.engine.pipelineParallelSize}) cannot split the "
                "checkpoint's layers evenly among its stages, and every stage must hold the same number: "
                "the largest stage would set the pace of all; {self.model.source.huggingface.repo} has "
                f"{layers} layers, so the size can be 1, {_sizes_in_words(stages)}",
                field_path=".engine.pipelineParallelSize",
            )
        )
    return rules


def _parallelism_rules() -> list[JsonDict]:
    """The world of one replica against the model type's largest and its pipeline support, and the pods."""
    rules = []
    for runtime in Runtime:
        runtime_is = SERVE_RUNTIME if runtime is Runtime.TRTLLM_SERVE else ENGINE_RUNTIME
        for largest, types in types_by_largest_world(runtime).items():
            reason = (
                "its largest checkpoints fit one node of 8 GPUs"
                if largest <= NODE_WORLD
                else f"{largest} GPUs hold its largest checkpoints at 16 bits; a larger world was not tried"
            )
            rules.append(
                cel_rule(
                    f"!({runtime_is}) || !(self.model.type in {cel_list(types)}) || {WORLD} <= {largest}",
                    f"the world of one replica, {_WORLD_WORDS}, is larger than the largest offered for "
                    f"model.type ({{self.model.type}}) on runtime {runtime}, {largest}: {reason}",
                    field_path=".engine.tensorParallelSize",
                )
            )
    offered = [
        f"({SERVE_RUNTIME if runtime is Runtime.TRTLLM_SERVE else ENGINE_RUNTIME}) && "
        f"self.model.type in {cel_list(types)}"
        for runtime in Runtime
        if (types := pipeline_types(runtime))
    ]
    who = "; ".join(
        f"on runtime {runtime} for {', '.join(types)}"
        for runtime in Runtime
        if (types := pipeline_types(runtime))
    )
    rules += [
        cel_rule(
            f"self.engine.pipelineParallelSize == 1 || {' || '.join(f'({term})' for term in offered)}",
            "engine.pipelineParallelSize ({self.engine.pipelineParallelSize}) is not offered for model.type "
            f"({{self.model.type}}) on its runtime ({{{_RUNTIME_OF_SELF}}}): pipeline parallelism is "
            f"offered {who} only (the triton-trtllm-engine launch runs tensor-parallel ranks only); raise "
            "engine.tensorParallelSize instead",
            field_path=".engine.pipelineParallelSize",
        ),
        cel_rule(
            f"!has(self.serving.gpusPerPod) || {WORLD} % self.serving.gpusPerPod == 0",
            "serving.gpusPerPod ({self.serving.gpusPerPod}) must divide the world of one replica, "
            f"{_WORLD_WORDS}: every pod of a replica runs the same number of ranks",
            field_path=".serving.gpusPerPod",
        ),
        cel_rule(
            f"has(self.serving.gpusPerPod) || {WORLD} % {DEFAULT_GPUS_PER_POD} == 0",
            f"the world of one replica, {_WORLD_WORDS}, is more than one pod's default of {NODE_WORLD} GPUs "
            f"and not a multiple of it; set serving.gpusPerPod to a divisor of the world",
            field_path=".serving.gpusPerPod",
            reason=REQUIRED,
        ),
        cel_rule(
            "!has(self.engineCache.accessMode) || self.engineCache.accessMode == 'ReadWriteMany' || "
            f"{_ONE_POD}",
            "engineCache.accessMode ({self.engineCache.accessMode}) cannot serve a replica of more than one "
            "pod: every pod of a replica reads its ranks' engines from the claim, from its own node; use "
            f"ReadWriteMany (a world of {{{WORLD}}} ranks in "
            f"{{{GPUS_PER_POD}}} GPUs per pod)",
            field_path=".engineCache.accessMode",
        ),
    ]
    return rules


def _runtime_rules() -> list[JsonDict]:
    serve_types, engine_types = types_of(Runtime.TRTLLM_SERVE), types_of(Runtime.TRITON_TRTLLM_ENGINE)
    return [
        cel_rule(
            f"{_RUNTIME_OF_SELF} == {_RUNTIME_OF_OLD}",
            f"runtime is immutable ({{{_RUNTIME_OF_OLD}}}, now {{{_RUNTIME_OF_SELF}}}): the other runtime "
            "serves from other files in the engine cache with other pods and another API; create a new "
            "MultimodalDeployment instead",
            field_path=".runtime",
        ),
        cel_rule(
            f"!({SERVE_RUNTIME}) || self.model.type in {cel_list(serve_types)}",
            "model.type ({self.model.type}) is not served by runtime trtllm-serve: TensorRT-LLM 1.2.1's "
            f"PyTorch backend lists no multimodal support for it (it serves {', '.join(serve_types)}); leave "
            "runtime out to build engines for it with triton-trtllm-engine",
            field_path=".model.type",
        ),
        cel_rule(
            f"!({ENGINE_RUNTIME}) || self.model.type in {cel_list(engine_types)}",
            "model.type ({self.model.type}) is served only by runtime trtllm-serve: there is no TensorRT "
            f"engine recipe for it (triton-trtllm-engine serves {', '.join(engine_types)}); set spec.runtime "
            "to trtllm-serve",
            field_path=".model.type",
        ),
        *_modality_rules(),
        *_heads_rules(),
        *_parallelism_rules(),
        _serve_only_for(
            "fp8_kv_cache", "self.engine.kvCacheDtype == 'fp8'", "kvCacheDtype fp8", ".engine.kvCacheDtype"
        ),
        _serve_only_for(
            "kv_cache_reuse", "self.serving.kvCacheReuse", "kvCacheReuse", ".serving.kvCacheReuse"
        ),
        _serve_only_for(
            "chunked_prefill",
            "self.serving.chunkedContext",
            "chunkedContext (enable_chunked_prefill)",
            ".serving.chunkedContext",
        ),
        *(_not_on_serve(*entry) for entry in _NOT_ON_SERVE),
    ]


def _autoscaling_rules() -> list[JsonDict]:
    """`serving.autoscaling` against the rest of the spec: replicas, the runtime's metrics, the GPU budget."""
    autoscaling = "self.serving.autoscaling"
    rules = [
        # `replicas` is stored as 1 when left out (the scale subresource needs a value), so 1 reads as unset.
        cel_rule(
            f"!has({autoscaling}) || self.serving.replicas == 1",
            "serving.replicas ({self.serving.replicas}) cannot be set together with serving.autoscaling: "
            "the HorizontalPodAutoscaler sets the number of serving pods itself, between minReplicas "
            f"({{{autoscaling}.minReplicas}}) and maxReplicas ({{{autoscaling}.maxReplicas}}); leave "
            "replicas out (the default the API server stores, 1, is ignored while autoscaling is on), or "
            "remove serving.autoscaling to set a fixed number",
            field_path=".serving.replicas",
        ),
        cel_rule(
            f"!has({autoscaling}) || !has({autoscaling}.maxGpus) || "
            f"{autoscaling}.maxReplicas * {WORLD} <= {autoscaling}.maxGpus",
            f"serving.autoscaling.maxReplicas ({{{autoscaling}.maxReplicas}}) replicas of "
            "engine.tensorParallelSize x engine.pipelineParallelSize GPUs each "
            "({self.engine.tensorParallelSize} x {self.engine.pipelineParallelSize}) need more GPUs than "
            f"serving.autoscaling.maxGpus ({{{autoscaling}.maxGpus}}) allows; lower maxReplicas or raise "
            f"maxGpus ({{{autoscaling}.maxReplicas}} x {{{WORLD}}} = "
            f"{{{autoscaling}.maxReplicas * {WORLD}}} GPUs; maxReplicas may be at "
            f"most {{{autoscaling}.maxGpus / {WORLD}}})",
            field_path=".serving.autoscaling.maxReplicas",
        ),
    ]
    for facts in SCALING_METRICS.values():
        for runtime, why in facts.unavailable.items():
            others = metrics_of(runtime)
            rules.append(
                cel_rule(
                    f"!has({autoscaling}) || {autoscaling}.metric.name != '{facts.metric}' || "
                    f"{_RUNTIME_OF_SELF} != '{runtime}'",
                    f"serving.autoscaling.metric.name {facts.metric} is not available on runtime {runtime}: "
                    f"{why}; scale on {' or '.join(others)} instead",
                    field_path=".serving.autoscaling.metric.name",
                )
            )
    return rules


# The build pod's memory-backed /dev/shm (scratch for the conversion's MPI and tensor exchange): its pages
# are charged to the builder's memory.
BUILD_SHARED_MEMORY = "8Gi"


def _memory_limit_above(section: str, floor: str, floor_words: str, why: str) -> JsonDict:
    """A rule: `<section>.pod.resources.limits[memory]`, when set, must be above `floor`, a CEL string.

    (The API server's cost estimate takes `string()` of a string literal as unbounded: write it bare.)
    """
    resources = f"self.{section}.pod.resources"
    limit = f"string({resources}.limits['memory'])"
    return cel_rule(
        f"!has(self.{section}.pod) || !has({resources}) || !has({resources}.limits) || "
        f"!('memory' in {resources}.limits) || !isQuantity({limit}) || !isQuantity({floor}) || "
        f"quantity({limit}).isGreaterThan(quantity({floor}))",
        f"{section}.pod.resources.limits[memory] ({{{resources}.limits['memory']}}) must be above "
        f"{floor_words}: {why}",
        field_path=f".{section}.pod.resources.limits",
    )


def _resource_rules() -> list[JsonDict]:
    """The pods' memory limits against their memory-backed /dev/shm, whose pages count against them."""
    return [
        _memory_limit_above(
            "serving",
            "string(self.serving.sharedMemorySize)",
            "serving.sharedMemorySize ({self.serving.sharedMemorySize})",
            "the memory-backed /dev/shm is charged to the serving container's memory, so a limit at or "
            "below it leaves tritonserver or trtllm-serve nothing once the Python models or MPI fill it",
        ),
        _on_engine(
            _memory_limit_above(
                "build",
                f"'{BUILD_SHARED_MEMORY}'",
                f"the build pod's memory-backed /dev/shm of {BUILD_SHARED_MEMORY}",
                "its pages, written by the conversion's MPI and tensor exchange, are charged to the "
                "builder's memory, which also holds the checkpoint as it converts",
            )
        ),
    ]


def spec_rules() -> list[JsonValue]:
    """Every cross-field rule of the spec, as `MultimodalDeploymentSpec` carries them."""
    return [*_engine_and_common_rules(), *_runtime_rules(), *_autoscaling_rules(), *_resource_rules()]
