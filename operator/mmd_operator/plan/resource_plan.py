"""Everything the operator derives from one MultimodalDeployment, computed and checked in one call.

`plan_spec` returns the derived limits, cacheKey, build plan, rendered model repository and launch argv of
a spec, after the repository passed the same check Triton does at load time (its protobuf parse and the
ensemble wiring). `mmctl render` writes `ResourcePlan.files()` and the operator applies the same plan, so
a repository `render` would refuse never reaches a cluster. A trtllm-serve spec gets a `ServePlan`
instead (`serve_plan`): no build, no repository. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from engine_builder import versions
from engine_builder.plan_format import BuildPlan
from mmd_operator.api.v1alpha1 import DerivedLimits, MultimodalDeployment, MultimodalDeploymentSpec
from mmd_operator.api.validation import InvalidSpecError, Problem, check_resource, check_spec
from mmd_operator.knowledge import KNOWLEDGE, Runtime
from mmd_operator.plan.build_plan import build_plan
from mmd_operator.plan.cache_key import cache_key, cache_key_inputs
from mmd_operator.plan.launch import LaunchPlan, launch_plan
from mmd_operator.plan.limits import derive_limits
from mmd_operator.plan.model_repository import ModelRepository, render_repository
from mmd_operator.plan.repository_check import check_repository
from mmd_operator.plan.serve_plan import ServePlan, plan_serve
from mmd_operator.plan.settings import Settings, resolve


@dataclass(frozen=True)
class ResourcePlan:
    """The derived limits, cacheKey, build plan, checked model repository and launch command of a spec."""

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


# The plan of either runtime.
AnyPlan = ResourcePlan | ServePlan


def plan_spec(spec: MultimodalDeploymentSpec) -> AnyPlan:
    """Derive and check everything the operator needs from `spec` (a `ServePlan` on trtllm-serve).

    Raises:
        InvalidSpecError: when the spec's values contradict derived limits.
        RenderError: when a template leaves a placeholder (a bug, never a user error).
        RepositoryError: when the rendered repository would not load in Triton (a bug, never a user error).
    """
    if spec.serving_runtime is Runtime.TRTLLM_SERVE:
        return plan_serve(spec)
    settings = resolve(spec)
    key = cache_key(settings)
    repository = render_repository(settings, cache_key=key)
    check_repository(repository.configs)
    return ResourcePlan(
        settings=settings,
        cache_key=key,
        build=build_plan(settings, cache_key=key),
        repository=repository,
        launch=launch_plan(settings),
    )


def _derives_limits(spec: MultimodalDeploymentSpec) -> bool:
    """Whether the spec has engine limits to derive: a type the engine runtime serves, on that runtime."""
    return spec.serving_runtime is Runtime.TRITON_TRTLLM_ENGINE and spec.model.type in KNOWLEDGE


def _with_derivation_problems(
    spec: MultimodalDeploymentSpec | None, problems: list[Problem]
) -> list[Problem]:
    """`problems` plus the derivation's, leaving out a field a CEL rule already reported (one per field)."""
    if spec is None or not problems or not _derives_limits(spec):
        return problems
    reported = {problem.path for problem in problems}
    try:
        derive_limits(spec)
    except InvalidSpecError as invalid:
        return problems + [problem for problem in invalid.problems if problem.path not in reported]
    return problems


def plan_resource(document: Mapping[str, Any]) -> tuple[MultimodalDeployment, AnyPlan]:
    """Validate a MultimodalDeployment document and derive its plan, reporting every problem at once.

    Schema, CEL and derivation problems are collected together, so one run lists everything to fix.

    Raises:
        InvalidSpecError: with one problem per broken rule, each naming its field path.
    """
    resource, problems = check_resource(document)
    problems = _with_derivation_problems(resource.spec if resource is not None else None, problems)
    if resource is None or problems:
        raise InvalidSpecError(problems)
    return resource, plan_spec(resource.spec)


def plan_spec_document(document: object) -> AnyPlan:
    """Validate a `spec` alone (as the API server holds it) and derive its plan, every problem at once.

    Nothing in a plan depends on the resource's name or namespace.

    Raises:
        InvalidSpecError: with one problem per broken rule, each naming its field path.
    """
    if not isinstance(document, Mapping):
        raise InvalidSpecError([Problem("spec", "required field is missing")])
    spec, problems = check_spec(document)
    problems = _with_derivation_problems(spec, problems)
    if spec is None or problems:
        raise InvalidSpecError(problems)
    return plan_spec(spec)
