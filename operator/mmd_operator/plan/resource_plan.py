"""Everything the operator derives from one MultimodalDeployment, computed and checked in one call.

A runtime is a plan type: `plan_spec` picks the runtime's planner once, from the spec's `runtime`
(`PLANNERS`), and returns its plan: a `TritonPlan` (`triton`: derived limits, cacheKey, build plan,
checked model repository, launch argv) or a `TrtllmServePlan` (`trtllm_serve`: the weights download, the
`--config` YAML, the argv). After this module nothing asks which runtime again: each layer looks its
part up by `plan.runtime` in one small table. `mmctl render` writes `plan.files()` and the operator
applies the same plan. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from mmd_operator.api.v1alpha1 import MultimodalDeployment, MultimodalDeploymentSpec
from mmd_operator.api.validation import InvalidSpecError, Problem, check_resource, check_spec, spec_runtime
from mmd_operator.facts import GpuKind
from mmd_operator.knowledge import KNOWLEDGE, Runtime
from mmd_operator.plan.limits import derive_limits
from mmd_operator.plan.triton import TritonPlan, plan_triton
from mmd_operator.plan.trtllm_serve import TrtllmServePlan, plan_trtllm_serve

# The plan of either runtime.
AnyPlan = TritonPlan | TrtllmServePlan

# Each runtime's planner (the spec, the kind of GPU its pods land on): a third runtime is one plan
# module and one row here.
PLANNERS: Mapping[Runtime, Callable[[MultimodalDeploymentSpec, GpuKind | None], AnyPlan]] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: plan_triton, Runtime.TRTLLM_SERVE: plan_trtllm_serve}
)


# The runtimes whose artifact runs only on the kind of GPU it was made on: a TensorRT engine. A
# snapshot of weights serves on any.
_KIND_BOUND = frozenset({Runtime.TRITON_TRTLLM_ENGINE})


def kind_bound(spec: object) -> bool:
    """Whether the artifact of a spec document's runtime belongs to one kind of GPU."""
    return spec_runtime(spec) in _KIND_BOUND


def plan_spec(spec: MultimodalDeploymentSpec, gpu_kind: GpuKind | None = None) -> AnyPlan:
    """Derive and check everything the operator needs from `spec`, with its runtime's planner.

    `gpu_kind` is the kind of GPU an engine is built for (None: not known).

    Raises:
        InvalidSpecError: when the spec's values contradict derived limits.
        RenderError: when a template leaves a placeholder (a bug, never a user error).
        RepositoryError: when the rendered repository would not load in Triton (a bug, never a user error).
    """
    return PLANNERS[spec.serving_runtime](spec, gpu_kind)


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


def plan_resource(
    document: Mapping[str, Any], gpu_kind: GpuKind | None = None
) -> tuple[MultimodalDeployment, AnyPlan]:
    """Validate a MultimodalDeployment document and derive its plan (for `gpu_kind`), every problem at once.

    Schema, CEL and derivation problems are collected together, so one run lists everything to fix.

    Raises:
        InvalidSpecError: with one problem per broken rule, each naming its field path.
    """
    resource, problems = check_resource(document)
    problems = _with_derivation_problems(resource.spec if resource is not None else None, problems)
    if resource is None or problems:
        raise InvalidSpecError(problems)
    return resource, plan_spec(resource.spec, gpu_kind)


def plan_spec_document(document: object, gpu_kind: GpuKind | None = None) -> AnyPlan:
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
    return plan_spec(spec, gpu_kind)
