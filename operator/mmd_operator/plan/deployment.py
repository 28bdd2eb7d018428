"""Everything the operator derives from one spec, computed in one call.

`plan_deployment` is what both `mmctl render` and the operator's reconcile use, so `render` shows exactly
what the operator would create. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine_builder import versions
from engine_builder.plan_format import BuildPlan
from mmd_operator.api.v1alpha1 import DerivedLimits, MultimodalDeployment, MultimodalDeploymentSpec
from mmd_operator.api.validation import InvalidSpecError, check_resource
from mmd_operator.plan.build import build_plan
from mmd_operator.plan.cache_key import cache_key, cache_key_inputs
from mmd_operator.plan.launch import LaunchPlan, launch_plan
from mmd_operator.plan.limits import derive_limits
from mmd_operator.plan.render import ModelRepository, render_repository
from mmd_operator.plan.settings import Settings, resolve


@dataclass(frozen=True)
class DeploymentPlan:
    """The derived limits, cacheKey, build plan, model repository and launch command of one spec."""

    settings: Settings
    cache_key: str
    build: BuildPlan
    repository: ModelRepository
    launch: LaunchPlan

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


def plan_deployment(spec: MultimodalDeploymentSpec) -> DeploymentPlan:
    """Derive everything the operator needs from `spec`.

    Raises:
        InvalidSpecError: when the spec's values contradict derived limits.
        RenderError: when a template leaves a placeholder (a bug, never a user error).
    """
    settings = resolve(spec)
    key = cache_key(settings)
    return DeploymentPlan(
        settings=settings,
        cache_key=key,
        build=build_plan(settings, cache_key=key),
        repository=render_repository(settings, cache_key=key),
        launch=launch_plan(settings),
    )


def plan_resource(document: Mapping[str, Any]) -> tuple[MultimodalDeployment, DeploymentPlan]:
    """Validate a MultimodalDeployment document and derive its plan, reporting every problem at once.

    Schema, CEL and derivation problems are collected together, so one run lists everything to fix.

    Raises:
        InvalidSpecError: with one problem per broken rule, each naming its field path.
    """
    resource, problems = check_resource(document)
    if resource is not None and problems:
        try:
            derive_limits(resource.spec)
        except InvalidSpecError as invalid:
            problems += invalid.problems
    if resource is None or problems:
        raise InvalidSpecError(problems)
    return resource, plan_deployment(resource.spec)
