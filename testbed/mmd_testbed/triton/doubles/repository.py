"""Write a rendered model repository with Python-backend doubles for the GPU-only models.

The operator's rendered `config.pbtxt` files are used unmodified, except that `tensorrt_llm` runs as
`backend: "python"` (the TensorRT-LLM backend needs a GPU). Every model whose code would come from the
serving image or needs a GPU (preprocessing, multimodal_encoders, tensorrt_llm, postprocessing,
tensorrt_llm_bls, whisper_bls) gets a `model.py` that embeds the model's contract parsed from its config
with Triton's protobuf, and the doubles' behaviour (`RUNTIME_FILES`), copied beside it as the
package `triton_doubles`. The ensemble stays the real one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine_builder import versions
from mmd_operator.knowledge import ModelKnowledge, ModelType, RepositoryLayout
from mmd_operator.plan.repository_check import ModelConfig, check_repository, data_type_name

HERE = Path(__file__).parent
# The files of this package a double runs with, and the package name they get beside its model.py.
RUNTIME_FILES = (
    "__init__.py", "runtime.py", "base.py", "frontends.py", "engine.py", "executor.py", "bls.py",
    "codec.py", "world.py",
)  # fmt: skip
RUNTIME_PACKAGE = "triton_doubles"
GPU_BACKEND_LINE = 'backend: "tensorrtllm"'
DOUBLE_BACKEND_LINE = 'backend: "python"'
# Vision tensors the real preprocessing produces per model type, besides PIXEL_VALUES.
_PREPROCESSING_EXTRAS = {
    ModelType.MLLAMA: ("ASPECT_RATIO_IDS", "ASPECT_RATIO_MASK", "CROSS_ATTENTION_MASK"),
    ModelType.QWEN2_VL: ("IMAGE_GRID_THW", "ATTENTION_MASK", "VISION_INPUT_ID"),
    ModelType.LLAVA_ONEVISION: ("IMAGE_SIZES",),
}
# The engine-path release a serving image's doubles stand in for, when it is not the default.
RELEASE_ENV = "MMD_DOUBLE_TRTLLM_VERSION"
# The tokenizer's eos when the knowledge table leaves it to the tokenizer (the byte tokenizer has none).
_DEFAULT_END_ID = 2


def _tensors(config: ModelConfig, kind: str) -> dict[str, dict[str, Any]]:
    tensors = {}
    for tensor in getattr(config, kind):
        entry: dict[str, Any] = {
            "data_type": data_type_name(tensor.data_type),
            "dims": [int(d) for d in tensor.dims],
        }
        if kind == "input":
            entry["optional"] = bool(tensor.optional)
        tensors[tensor.name] = entry
    return tensors


def contract_of(config: ModelConfig) -> dict[str, Any]:
    """The tensor contract a double honours: names, types, dims, optional inputs, transaction policy."""
    return {
        "input": _tensors(config, "input"),
        "output": _tensors(config, "output"),
        "decoupled": bool(config.model_transaction_policy.decoupled),
        "max_batch_size": int(config.max_batch_size),
    }


def _knowledge(knowledge: ModelKnowledge, preprocessing: ModelConfig | None) -> dict[str, Any]:
    declared = {t.name for t in preprocessing.output} if preprocessing is not None else set()
    end_id = knowledge.end_id if knowledge.end_id is not None else _DEFAULT_END_ID
    return {
        "end_id": end_id,
        "pad_id": knowledge.pad_id if knowledge.pad_id is not None else end_id,
        "image_marker": knowledge.image_marker,
        "uses_prompt_table": knowledge.uses_prompt_table,
        "encoder_decoder": knowledge.encoder_decoder,
        "text_only_requests": knowledge.text_only_requests,
        "mrope": knowledge.model_type is ModelType.QWEN2_VL,
        # The real multimodal_encoders answers OUT_PROMPT_VOCAB_SIZE for every type but these two.
        "encoder_answers_vocab_size": knowledge.model_type
        not in (ModelType.LLAVA_ONEVISION, ModelType.QWEN2_VL),
        "whisper": knowledge.layout is RepositoryLayout.WHISPER,
        # preprocessing is v0.19.0's multimodal one (not the InternLM-XComposer2 fork's), with its checks.
        "multimodal_preprocessing": knowledge.layout is RepositoryLayout.MULTIMODAL,
        "preprocessing_extra_outputs": [
            name for name in _PREPROCESSING_EXTRAS.get(knowledge.model_type, ()) if name in declared
        ],
    }


def release_facts(release: versions.EngineRelease) -> dict[str, Any]:
    """What the doubles know of the release they stand in for (inside the stub they import no package)."""
    return {
        "tensorrt_llm": release.tensorrt_llm,
        "tensorrt": release.tensorrt,
        "renamed_inputs": dict(release.renamed_inputs),
        "tensorrt_of": {name: known.tensorrt for name, known in versions.ENGINE_RELEASES.items()},
    }


def double_specs(
    models: Mapping[str, ModelConfig],
    knowledge: ModelKnowledge,
    release: versions.EngineRelease = versions.DEFAULT_ENGINE_RELEASE,
) -> dict[str, dict[str, Any]]:
    """The spec of every double of a parsed repository, keyed by model name, for a `release` image."""
    ensemble = models.get("ensemble")
    steps = []
    if ensemble is not None:
        steps = [
            {"model": s.model_name, "inputs": dict(s.input_map), "outputs": dict(s.output_map)}
            for s in ensemble.ensemble_scheduling.step
        ]
    targets = {
        name: {**contract_of(config)} for name, config in models.items() if config.platform != "ensemble"
    }
    shared = {
        "model_type": knowledge.model_type.value,
        "knowledge": _knowledge(knowledge, models.get("preprocessing")),
        "release": release_facts(release),
    }
    specs = {}
    for name, config in models.items():
        if config.platform == "ensemble":
            continue
        spec: dict[str, Any] = {
            "model": name,
            "role": name,
            "contract": contract_of(config),
            "parameters": {key: value.string_value for key, value in config.parameters.items()},
            **shared,
        }
        if name in ("tensorrt_llm_bls", "whisper_bls"):
            spec["steps"] = steps
            spec["targets"] = targets
            spec["text_output"] = "text_output" if name == "tensorrt_llm_bls" else "TRANSCRIPTS"
        specs[name] = spec
    return specs


def _model_py(spec: dict[str, Any], stub_site: Path) -> str:
    return (
        f'"""Double of `{spec["model"]}` ({spec["model_type"]}), written by mmd_testbed.triton.doubles\n'
        'from the rendered config.pbtxt. The real model code is in the serving image."""\n\n'
        "import json\nimport sys\n\n"
        "# The stub's embedded interpreter ignores PYTHONPATH; numpy 1.x and Pillow are installed here.\n"
        f"sys.path.insert(0, {str(stub_site)!r})\n\n"
        f"from {RUNTIME_PACKAGE}.runtime import build  # noqa: E402\n\n"
        f"SPEC = json.loads({json.dumps(json.dumps(spec, sort_keys=True))})\n"
        "TritonPythonModel = build(SPEC)\n"
    )


def gpu_free_config(text: str) -> str:
    """`tensorrt_llm`'s config with the one change the doubles need: the Python backend."""
    if text.count(GPU_BACKEND_LINE) != 1:
        raise ValueError(f"expected exactly one {GPU_BACKEND_LINE!r} line in tensorrt_llm/config.pbtxt")
    return text.replace(GPU_BACKEND_LINE, DOUBLE_BACKEND_LINE)


def write_repository(
    target: Path,
    configs: Mapping[str, str],
    knowledge: ModelKnowledge,
    stub_site: Path,
    engine_dirs: Mapping[str, str] | None = None,
    release: versions.EngineRelease = versions.DEFAULT_ENGINE_RELEASE,
) -> dict[str, dict[str, Any]]:
    """Write the rendered `configs` under `target` with a double for every non-ensemble model.

    The rendered repository is checked first (Triton's protobuf, ensemble wiring); the configs are written
    byte for byte, except `tensorrt_llm`'s backend line. `engine_dirs` maps the engine cache entry the
    configs name onto a local directory holding the engines' `config.json` (`triton.engines`); `release`
    is the engine-path release of the serving image the doubles stand for. Returns the doubles' specs.
    """
    models = check_repository(configs)
    specs = double_specs(models, knowledge, release)
    for spec in specs.values():
        spec["engine_dirs"] = dict(engine_dirs or {})
    shutil.rmtree(target, ignore_errors=True)
    for name, text in configs.items():
        model_dir = target / name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(gpu_free_config(text) if name == "tensorrt_llm" else text)
        if name in specs:
            (model_dir / "1" / "model.py").write_text(_model_py(specs[name], stub_site))
            package = model_dir / "1" / RUNTIME_PACKAGE
            package.mkdir()
            for file in RUNTIME_FILES:
                shutil.copy(HERE / file, package / file)
    return specs
