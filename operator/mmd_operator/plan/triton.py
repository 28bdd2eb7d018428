"""The triton-trtllm-engine runtime's plan: derived limits, cacheKey, build plan, checked repository, argv.

`plan_triton` derives everything the operator needs from a spec of this runtime, after the rendered
repository passed the same check Triton does at load time (its protobuf parse and the ensemble wiring),
so a repository `mmctl render` would refuse never reaches a cluster. Pure: imports the api models, the
knowledge, the builder's plan format and this package's modules of the runtime.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from engine_builder import versions
from engine_builder.plan_format import BuildPlan
from mmd_operator.api.v1alpha1 import DerivedLimits, MultimodalDeploymentSpec, Parallelism
from mmd_operator.knowledge import Runtime
from mmd_operator.plan.build_plan import build_plan
from mmd_operator.plan.cache_key import cache_key, cache_key_inputs
from mmd_operator.plan.launch import LaunchPlan, launch_plan
from mmd_operator.plan.model_repository import ModelRepository, render_repository
from mmd_operator.plan.repository_check import check_repository
from mmd_operator.plan.settings import Settings, resolve


@dataclass(frozen=True)
class TritonPlan:
    """The derived limits, cacheKey, build plan, checked model repository and launch command of a spec."""

    runtime: ClassVar[Runtime] = Runtime.TRITON_TRTLLM_ENGINE

    settings: Settings
    cache_key: str
    build: BuildPlan
    repository: ModelRepository
    launch: LaunchPlan

    @property
    def spec(self) -> MultimodalDeploymentSpec:
        """The spec planned."""
        return self.settings.spec

    @property
    def parallelism(self) -> Parallelism:
        """The world of one replica and its shape."""
        return self.settings.parallelism

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
                "trtllm": versions.TRTLLM_VERSION,
                "serving_image": settings.serving_image,
                "builder_image": settings.builder_image,
                "templates": versions.TEMPLATE_REVISION,
            },
            "cache_key_inputs": cache_key_inputs(settings),
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


def plan_triton(spec: MultimodalDeploymentSpec) -> TritonPlan:
    """The plan of a valid triton-trtllm-engine spec.

    Raises:
        InvalidSpecError: when the spec's values contradict derived limits.
        RenderError: when a template leaves a placeholder (a bug, never a user error).
        RepositoryError: when the rendered repository would not load in Triton (a bug, never a user error).
    """
    settings = resolve(spec)
    key = cache_key(settings)
    repository = render_repository(settings, cache_key=key)
    check_repository(repository.configs)
    return TritonPlan(
        settings=settings,
        cache_key=key,
        build=build_plan(settings, cache_key=key),
        repository=repository,
        launch=launch_plan(settings),
    )
