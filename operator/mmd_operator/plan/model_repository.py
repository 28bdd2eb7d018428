"""Render the Triton model repository (one `config.pbtxt` per model directory) from effective settings.

The templates live in `templates/` beside this module and are our own; they follow the model-repository
contract of the pinned tensorrtllm_backend release (see `engine_builder.versions`). Rendering uses
StrictUndefined, so a missing value is an error instead of a silent `${...}` left in the file, and the
result is checked once more for leftover placeholders. Which directories exist, which inputs the
ensemble accepts and every parameter value come from `Settings`; templates only lay them out; where each
model's Python code sits in the serving image, `model_code`. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2

from mmd_operator.knowledge import ImageInput, RepositoryLayout
from mmd_operator.plan.launch import TRITONSERVER
from mmd_operator.plan.model_code import model_code
from mmd_operator.plan.settings import LAYOUT, Settings

# Version directory every model needs; Triton loads `<model>/1/`.
MODEL_VERSION = "1"
EXECUTOR_WORKER = TRITONSERVER.rsplit("/bin/", 1)[0] + "/backends/tensorrtllm/trtllmExecutorWorker"
# The reference workflow runs whisper_bls with eight Python instances (one request each).
WHISPER_BLS_INSTANCES = 8

_LEFTOVER_MARKERS = ("${", "{{", "{%", "}}")
_BLANK_LINES = re.compile(r"\n{3,}")

_MODELS_BY_LAYOUT: Mapping[RepositoryLayout, tuple[str, ...]] = {
    RepositoryLayout.MULTIMODAL: (
        "ensemble",
        "preprocessing",
        "multimodal_encoders",
        "tensorrt_llm",
        "postprocessing",
        "tensorrt_llm_bls",
    ),
    RepositoryLayout.XCOMPOSER2: (
        "ensemble",
        "preprocessing",
        "tensorrt_llm",
        "postprocessing",
        "tensorrt_llm_bls",
    ),
    RepositoryLayout.WHISPER: ("whisper_bls", "tensorrt_llm"),
}

# Templates whose content differs for a layout; all others are shared.
_LAYOUT_TEMPLATES: Mapping[tuple[RepositoryLayout, str], str] = {
    (RepositoryLayout.XCOMPOSER2, "ensemble"): "xcomposer2_ensemble.pbtxt.j2",
    (RepositoryLayout.XCOMPOSER2, "preprocessing"): "xcomposer2_preprocessing.pbtxt.j2",
}


# Files of the engine cache entry a model loads from its own version directory.
_ENTRY_FILES: Mapping[str, tuple[str, ...]] = {
    "whisper_bls": (f"{LAYOUT.assets}/multilingual.tiktoken", f"{LAYOUT.assets}/mel_filters.npz"),
}


@dataclass(frozen=True)
class ModelAssembly:
    """How a serving pod assembles one model directory besides its rendered config."""

    model: str
    # Directory (relative to the model code directory) whose `1/` holds the model's code, if any.
    code: str | None
    # Files of the cache entry (relative to it) copied into `<model>/1/`.
    entry_files: tuple[str, ...] = ()


class RenderError(Exception):
    """A rendered file still contains a placeholder; it would fail to load or load wrongly."""


def _parameter_value(value: object) -> str:
    """Format a parameter the way both the C++ backend and the Python models parse it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("mmd_operator.plan", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    environment.filters["param"] = _parameter_value
    return environment


_ENVIRONMENT = _environment()


def compile_templates() -> int:
    """Compile every template now rather than at its first render; returns how many there are.

    A long-running process calls this once at start, so that compiling (a tenth of a second each on
    a busy core, and repeated by each worker thread that meets a template first) is not paid by the
    first resources it plans.
    """
    names = _ENVIRONMENT.list_templates()
    for name in names:
        _ENVIRONMENT.get_template(name)
    return len(names)


@dataclass(frozen=True)
class ModelRepository:
    """The rendered repository: model directory name to `config.pbtxt` text, and how to assemble it."""

    configs: Mapping[str, str]
    assembly: tuple[ModelAssembly, ...] = ()

    def files(self) -> dict[str, str]:
        """Relative file paths to contents, with an empty version directory marker per model."""
        files = {}
        for model, text in sorted(self.configs.items()):
            files[f"{model}/config.pbtxt"] = text
            files[f"{model}/{MODEL_VERSION}/.keep"] = ""
        return files


def model_names(settings: Settings) -> tuple[str, ...]:
    """The model directories of `settings`, in dependency order."""
    names = _MODELS_BY_LAYOUT[settings.knowledge.layout]
    return tuple(name for name in names if name != "tensorrt_llm_bls" or settings.enable_bls)


def render_context(settings: Settings, *, cache_key: str) -> dict[str, Any]:
    """Every value the templates read."""
    spec, knowledge, limits = settings.spec, settings.knowledge, settings.limits
    serving, queue = spec.serving, spec.serving.queue
    accepts = knowledge.image_inputs
    if not serving.image_url_input:
        # Undeclared, the input is refused by Triton itself, before any model code could fetch a URL.
        accepts = accepts - {ImageInput.URL}
    lora_cache = settings.lora_cache
    variant = settings.variant
    tokenizer_dir = settings.engine_dir(cache_key, LAYOUT.tokenizer)
    bls_default = WHISPER_BLS_INSTANCES if variant is not None else 1
    return {
        "model_type": knowledge.model_type.value,
        # The release's names of request tensors that were renamed after 0.19.0 (min_length, random_seed).
        "input_name": settings.release.input_name,
        "preprocessing_reads_hf_model_path": settings.release.preprocessing_reads_hf_model_path,
        "triton_max_batch_size": limits.triton_max_batch_size,
        "decoupled": serving.streaming,
        "max_queue_delay_microseconds": queue.max_queue_delay_microseconds,
        "preprocessing_max_queue_delay_microseconds": queue.preprocessing_max_queue_delay_microseconds,
        "max_queue_size": queue.max_queue_size,
        "logits_datatype": serving.logits_datatype,
        "prompt_table_datatype": serving.prompt_table_datatype,
        "encoder_input_datatype": knowledge.encoder_input_dtype,
        "accepts_image_tensor": ImageInput.TENSOR in accepts,
        "accepts_image_bytes": ImageInput.BYTES in accepts,
        "accepts_image_url": ImageInput.URL in accepts,
        "accepts_video": knowledge.video,
        "accepts_prompt_table_extra_id": knowledge.prompt_table_extra_id,
        "engine_dir": settings.engine_dir(cache_key, LAYOUT.llm),
        "encoder_engine_dir": settings.engine_dir(cache_key, LAYOUT.encoder),
        "vit_plan_path": f"{settings.engine_dir(cache_key, LAYOUT.encoder)}/{knowledge.vision_engine_file}",
        "tokenizer_dir": tokenizer_dir,
        "hf_model_path": tokenizer_dir,
        "max_num_images": limits.max_num_images,
        "preprocessing_instances": serving.instances.preprocessing,
        "postprocessing_instances": serving.instances.postprocessing,
        "bls_instances": serving.instances.bls or bls_default,
        "accumulate_tokens": serving.accumulate_tokens,
        "max_beam_width": limits.triton_max_beam_width,
        "batching_strategy": serving.batching_strategy,
        "batch_scheduler_policy": settings.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": settings.kv_cache_free_gpu_mem_fraction,
        "cross_kv_cache_fraction": settings.cross_kv_cache_fraction,
        "max_tokens_in_paged_kv_cache": settings.max_tokens_in_paged_kv_cache,
        "enable_kv_cache_reuse": serving.kv_cache_reuse,
        "enable_chunked_context": serving.chunked_context,
        "exclude_input_in_output": settings.exclude_input_in_output,
        # Whisper's audio encoder is a TensorRT-LLM engine that tensorrt_llm runs itself.
        "llm_has_encoder_engine": variant is not None,
        "executor_worker_path": EXECUTOR_WORKER,
        "lora_cache": None
        if lora_cache is None
        else {
            "optimal_adapter_size": lora_cache.optimal_adapter_size,
            "max_adapter_size": lora_cache.max_adapter_size,
            "gpu_memory_fraction": lora_cache.gpu_memory_fraction,
            "host_memory_bytes": lora_cache.host_memory_bytes,
        },
        "n_mels": variant.n_mels if variant is not None else None,
        "zero_pad": serving.zero_pad,
    }


def _check_no_placeholders(model: str, text: str) -> None:
    for marker in _LEFTOVER_MARKERS:
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            raise RenderError(f"{model}/config.pbtxt still contains {marker!r}: {line.strip()}")


def render_repository(settings: Settings, *, cache_key: str) -> ModelRepository:
    """Render every model directory of `settings`.

    Raises:
        RenderError: if a rendered file still contains a template placeholder.
    """
    context = render_context(settings, cache_key=cache_key)
    layout = settings.knowledge.layout
    configs = {}
    for model in model_names(settings):
        template_name = _LAYOUT_TEMPLATES.get((layout, model), f"{model}.pbtxt.j2")
        # Optional blocks that render empty leave blank lines behind; keep at most one.
        text = _BLANK_LINES.sub("\n\n", _ENVIRONMENT.get_template(template_name).render(context))
        _check_no_placeholders(model, text)
        configs[model] = text
    assembly = tuple(
        ModelAssembly(
            model=model,
            code=model_code(layout, model),
            entry_files=_ENTRY_FILES.get(model, ()),
        )
        for model in configs
    )
    return ModelRepository(configs=configs, assembly=assembly)
