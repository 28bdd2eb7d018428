"""The build plan: the ordered steps, with exact argv, that turn a checkpoint into engines.

The steps follow the reference workflow for each model type: fetch, convert (or quantize and calibrate
for an fp8 KV cache), `trtllm-build` the LLM (encoder and decoder for Whisper), build the multimodal
engine, convert the LoRA adapter, keep the tokenizer files serving needs and stage Whisper's assets.
The engine's own `config.json` must then show the limits the plan asked for. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from engine_builder import versions
from engine_builder.plan_format import WORK_DIR, BuildPlan, BuildStep, EngineExpectation
from mmd_operator.api.v1alpha1 import ModelSource, Parallelism, ReplicaShape
from mmd_operator.knowledge import VisionEngineRecipe
from mmd_operator.plan.settings import LAYOUT, Settings

# Where the build Job mounts PersistentVolumeClaim sources, read-only: `<mount>/model`, `<mount>/lora`.
SOURCES_MOUNT = "/sources"
HF_TOKEN_ENV = "HF_TOKEN"
# Steps of our own, run by the engine builder package inside the build image.
_OUR_STEPS = ("python3", "-m", "engine_builder.steps")


def _work(*parts: str) -> str:
    return "/".join((WORK_DIR, *parts))


def _fetch(source: ModelSource, role: str) -> tuple[list[BuildStep], str]:
    """Steps that make `source` available, and the directory it ends up in."""
    if source.pvc is not None:
        relative = source.pvc.path.strip("/")
        return [], f"{SOURCES_MOUNT}/{role}" + (f"/{relative}" if relative else "")
    hub = source.huggingface
    assert hub is not None
    # Keep the repository's own name in the path, as the reference workflow does (`hf_models/<name>`):
    # TensorRT-LLM's converters recognise some model families (VILA among them) by that name.
    name = hub.repo.rsplit("/", 1)[-1]
    target = _work(f"{role}-source", name)
    step = BuildStep(
        name=f"fetch-{role}",
        description=f"Download {hub.repo}@{hub.revision} from the Hugging Face Hub",
        argv=("huggingface-cli", "download", hub.repo, "--revision", hub.revision, "--local-dir", target),
        produces=(f"{role}-source/{name}",),
        env_from_job=(HF_TOKEN_ENV,) if hub.token_secret_ref is not None else (),
    )
    return [step], target


def _python(settings: Settings, script: str, *args: str) -> tuple[str, ...]:
    """Run the example `script` (its 0.19.0 path) where the settings' release keeps it."""
    return ("python3", settings.release.example(script), *args)


def _flags(**values: object) -> tuple[str, ...]:
    """`--name value` pairs in the given order, the way TensorRT-LLM's scripts spell their options."""
    return tuple(part for name, value in values.items() for part in (f"--{name}", str(value)))


def _limit_args(settings: Settings) -> tuple[str, ...]:
    limits = settings.limits
    optional = {
        "max_num_tokens": limits.max_num_tokens,
        "max_multimodal_len": limits.max_multimodal_len,
        "max_encoder_input_len": limits.max_encoder_input_len,
    }
    return _flags(
        max_batch_size=limits.max_batch_size,
        max_input_len=limits.max_input_len,
        max_seq_len=limits.max_seq_len,
        max_beam_width=limits.max_beam_width,
        **{name: value for name, value in optional.items() if value is not None},
    )


def _plugin_args(template: tuple[str, ...], settings: Settings) -> tuple[str, ...]:
    gemm = "auto" if settings.spec.engine.kv_cache_dtype == "fp8" else settings.dtype
    return tuple(arg.format(dtype=settings.dtype, gemm=gemm) for arg in template)


def _reuse_args(settings: Settings) -> tuple[str, ...]:
    """What KV-cache reuse needs of the engine: paged context FMHA, said explicitly.

    TensorRT-LLM 0.19's trtllm-build enables it by default, and the runtime turns reuse off (with only a
    log line) on an engine built without it: the plan pins it so that no default of a later builder can
    take reuse away unseen, and the cacheKey (`cache_key`) holds it.
    """
    return ("--use_paged_context_fmha", "enable") if settings.spec.serving.kv_cache_reuse else ()


# What each replica shape's build adds to trtllm-build. A group's world is built in one pod of one serving
# pod's GPUs, that many ranks at a time: trtllm-build builds rank by rank on the GPU it has (its tactics are
# timed there, so the serving GPUs' kind must match); `--workers` runs one rank per GPU of the pod at once.
_WORKERS: Mapping[ReplicaShape, Callable[[Parallelism], tuple[str, ...]]] = MappingProxyType(
    {
        ReplicaShape.ONE_POD: lambda _parallelism: (),
        ReplicaShape.GROUP: lambda parallelism: ("--workers", str(parallelism.gpus_per_pod)),
    }
)


def _workers_args(settings: Settings) -> tuple[str, ...]:
    parallelism = settings.parallelism
    return _WORKERS[parallelism.shape](parallelism)


def _checkpoint_steps(settings: Settings, model_dir: str) -> list[BuildStep]:
    knowledge, engine, spec = settings.knowledge, settings.spec.engine, settings.spec
    tp = settings.tensor_parallel_size
    tp_args = _flags(tp_size=tp) if tp > 1 else ()
    checkpoint = _work("checkpoint")
    if engine.kv_cache_dtype == "fp8":
        return [
            BuildStep(
                name="quantize-checkpoint",
                description="Quantize to FP8 (weights and KV cache) and calibrate",
                argv=_python(
                    settings,
                    "quantization/quantize.py",
                    *_flags(
                        model_dir=model_dir,
                        dtype=settings.dtype,
                        qformat="fp8",
                        kv_cache_dtype="fp8",
                        output_dir=checkpoint,
                        calib_size=engine.calibration_size,
                    ),
                    *tp_args,
                ),
                produces=("checkpoint/config.json",),
            )
        ]
    steps = []
    weight_only = (
        ("--use_weight_only", "--weight_only_precision", engine.weight_only_precision)
        if engine.weight_only_precision != "none"
        else ()
    )
    if settings.variant is not None:
        # TensorRT-LLM converts Whisper from OpenAI's checkpoint format; Hugging Face layouts go through
        # the distil-whisper converter first (it handles any Hugging Face Whisper checkpoint).
        if settings.variant.distilled or spec.model.source.huggingface is not None:
            steps.append(
                BuildStep(
                    name="convert-to-openai-format",
                    description="Convert the Hugging Face Whisper checkpoint to OpenAI's format",
                    argv=_python(
                        settings,
                        "whisper/distil_whisper/convert_from_distil_whisper.py",
                        *_flags(
                            model_name=model_dir,
                            output_dir=_work("openai"),
                            output_name=settings.variant.name,
                        ),
                    ),
                    produces=(f"openai/{settings.variant.name}.pt",),
                )
            )
            model_dir = _work("openai")
        converter_args: tuple[str, ...] = ("--model_name", settings.variant.name)
        produces: tuple[str, ...] = ("checkpoint/encoder/config.json", "checkpoint/decoder/config.json")
    else:
        converter_args = knowledge.converter_args
        produces = ("checkpoint/config.json",)
    steps.append(
        BuildStep(
            name="convert-checkpoint",
            description=f"Convert the checkpoint with {knowledge.converter}",
            argv=_python(
                settings,
                knowledge.converter,
                *converter_args,
                *_flags(model_dir=model_dir, output_dir=checkpoint, dtype=settings.dtype),
                *tp_args,
                *weight_only,
            ),
            produces=produces,
        )
    )
    return steps


def _engine_steps(settings: Settings, *, model_dir: str, lora_dir: str | None) -> list[BuildStep]:
    knowledge, limits = settings.knowledge, settings.limits
    steps = []
    if settings.variant is not None:
        steps.append(
            BuildStep(
                name="build-encoder",
                description="Build the audio encoder engine (3000 mel frames)",
                argv=(
                    "trtllm-build",
                    *_flags(checkpoint_dir=_work("checkpoint", "encoder"), output_dir=_work(LAYOUT.encoder)),
                    *_plugin_args(knowledge.encoder_build_plugin_args, settings),
                    *_flags(
                        max_batch_size=limits.max_batch_size,
                        max_input_len=limits.max_encoder_input_len,
                        max_seq_len=limits.max_encoder_input_len,
                    ),
                ),
                produces=(f"{LAYOUT.encoder}/config.json",),
            )
        )
        checkpoint, what = _work("checkpoint", "decoder"), "decoder"
    else:
        checkpoint, what = _work("checkpoint"), "LLM"
    lora_args: tuple[str, ...] = ()
    if lora_dir is not None and settings.spec.model.lora is not None:
        lora_args = _flags(lora_dir=lora_dir, max_lora_rank=settings.spec.model.lora.max_rank)
    steps.append(
        BuildStep(
            name="build-decoder" if settings.variant is not None else "build-llm",
            description=f"Build the {what} engine",
            argv=(
                "trtllm-build",
                *_flags(checkpoint_dir=checkpoint, output_dir=_work(LAYOUT.llm)),
                *_plugin_args(knowledge.build_plugin_args, settings),
                *_reuse_args(settings),
                *_limit_args(settings),
                *lora_args,
                *_workers_args(settings),
            ),
            produces=(f"{LAYOUT.llm}/config.json",),
        )
    )
    if knowledge.vision_model_type is not None:
        steps.append(_vision_step(settings, model_dir))
    return steps


def _vision_step(settings: Settings, model_dir: str) -> BuildStep:
    knowledge, limits = settings.knowledge, settings.limits
    produces = (f"{LAYOUT.encoder}/{knowledge.vision_engine_file}", f"{LAYOUT.encoder}/config.json")
    if knowledge.vision_recipe is VisionEngineRecipe.XCOMPOSER2_FORK:
        return BuildStep(
            name="build-vision-engine",
            description="Build the InternLM-XComposer2 ViT plan with the fork's pinned recipe",
            argv=(
                *_OUR_STEPS,
                "xcomposer2-vision-engine",
                *("--recipe", versions.XCOMPOSER2_VISION_BUILDER),
                *("--model-type", str(knowledge.vision_model_type)),
                *("--model-dir", model_dir),
                *("--output-dir", _work(LAYOUT.encoder)),
                *("--max-batch-size", str(limits.vision_max_batch_size)),
            ),
            produces=produces,
        )
    return BuildStep(
        name="build-vision-engine",
        description=f"Build the {knowledge.vision_model_type} multimodal engine",
        argv=_python(
            settings,
            "multimodal/build_multimodal_engine.py",
            *_flags(
                model_type=knowledge.vision_model_type,
                model_path=model_dir,
                output_dir=_work(LAYOUT.encoder),
                max_batch_size=limits.vision_max_batch_size,
            ),
            *knowledge.vision_extra_args,
        ),
        produces=produces,
    )


def _expectations(settings: Settings) -> tuple[EngineExpectation, ...]:
    limits, knowledge = settings.limits, settings.knowledge
    llm: dict[str, bool | int | str] = {
        "version": settings.release.tensorrt_llm,
        "pretrained_config.dtype": settings.dtype,
        "pretrained_config.mapping.tp_size": settings.tensor_parallel_size,
        "build_config.max_batch_size": limits.max_batch_size,
        "build_config.max_input_len": limits.max_input_len,
        "build_config.max_seq_len": limits.max_seq_len,
        "build_config.max_beam_width": limits.max_beam_width,
    }
    if limits.max_multimodal_len is not None:
        # TensorRT-LLM stores max_multimodal_len under its prompt-tuning name.
        llm["build_config.max_prompt_embedding_table_size"] = limits.max_multimodal_len
    if limits.max_encoder_input_len is not None:
        llm["build_config.max_encoder_input_len"] = limits.max_encoder_input_len
    if settings.spec.serving.kv_cache_reuse:
        # `_reuse_args` asks for it, and trtllm-build still turns it off by itself with some KV caches
        # (int8; FP8 without FP8 weights, or before compute capability 8.9) with only a log line.
        llm["build_config.plugin_config.use_paged_context_fmha"] = True
    expectations = [EngineExpectation(config_path=f"{LAYOUT.llm}/config.json", values=llm)]
    if knowledge.vision_engine_model_type is not None and limits.vision_max_batch_size is not None:
        vision: dict[str, bool | int | str] = {
            "builder_config.model_type": knowledge.vision_engine_model_type
        }
        # The fork's recipe records no batch size in config.json (its engine profile still has it).
        if knowledge.vision_recipe is VisionEngineRecipe.TRTLLM:
            vision["builder_config.max_batch_size"] = limits.vision_max_batch_size
        expectations.append(EngineExpectation(config_path=f"{LAYOUT.encoder}/config.json", values=vision))
    if settings.variant is not None and limits.max_encoder_input_len is not None:
        expectations.append(
            EngineExpectation(
                config_path=f"{LAYOUT.encoder}/config.json",
                values={
                    "build_config.max_batch_size": limits.max_batch_size,
                    "build_config.max_input_len": limits.max_encoder_input_len,
                },
            )
        )
    return tuple(expectations)


def build_plan(settings: Settings, *, cache_key: str) -> BuildPlan:
    """Return the build plan of `settings`, whose engines land in the cache entry `cache_key`."""
    spec, knowledge = settings.spec, settings.knowledge
    steps, model_dir = _fetch(spec.model.source, "model")
    lora_dir = None
    if spec.model.lora is not None:
        lora_steps, lora_dir = _fetch(spec.model.lora.source, "lora")
        steps += lora_steps
    if settings.variant is None:
        steps.append(
            BuildStep(
                name="check-context",
                description="Refuse a maxSeqLen beyond the checkpoint's max_position_embeddings",
                argv=(
                    *_OUR_STEPS,
                    "check-context",
                    *_flags(
                        config=f"{model_dir}/config.json", **{"max-seq-len": settings.limits.max_seq_len}
                    ),
                ),
            )
        )
    steps += _checkpoint_steps(settings, model_dir)
    steps += _engine_steps(settings, model_dir=model_dir, lora_dir=lora_dir)
    keep = [LAYOUT.llm]
    if knowledge.has_vision_engine or settings.variant is not None:
        keep.append(LAYOUT.encoder)
    if lora_dir is not None:
        steps.append(
            BuildStep(
                name="convert-lora",
                description="Convert the LoRA adapter to TensorRT-LLM's weights and config arrays",
                argv=_python(
                    settings,
                    "hf_lora_convert.py",
                    "-i",
                    lora_dir,
                    "-o",
                    _work(LAYOUT.lora),
                    "--storage-type",
                    settings.dtype,
                ),
                produces=(f"{LAYOUT.lora}/model.lora_weights.npy", f"{LAYOUT.lora}/model.lora_config.npy"),
            )
        )
        keep.append(LAYOUT.lora)
    if settings.variant is not None:
        steps.append(
            BuildStep(
                name="stage-whisper-assets",
                description="Stage the multilingual tokenizer and mel filters for whisper_bls",
                argv=(*_OUR_STEPS, "whisper-assets", *_flags(dest=_work(LAYOUT.assets))),
                produces=(f"{LAYOUT.assets}/multilingual.tiktoken", f"{LAYOUT.assets}/mel_filters.npz"),
            )
        )
        keep.append(LAYOUT.assets)
    else:
        steps.append(
            BuildStep(
                name="keep-tokenizer",
                description="Keep the tokenizer, processor and config files that serving reads",
                argv=(
                    *_OUR_STEPS,
                    "keep-tokenizer",
                    *_flags(source=model_dir, dest=_work(LAYOUT.tokenizer)),
                ),
                produces=(f"{LAYOUT.tokenizer}/config.json",),
            )
        )
        keep.append(LAYOUT.tokenizer)
    return BuildPlan(
        cache_key=cache_key,
        model_type=knowledge.model_type.value,
        trtllm_version=settings.release.tensorrt_llm,
        builder_image=settings.builder_image,
        steps=tuple(steps),
        keep=tuple(keep),
        expectations=_expectations(settings),
    )
