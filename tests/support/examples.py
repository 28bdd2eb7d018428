"""The resources under `examples/` and their checked plans, as the operator derives them (no CLI).

`EXAMPLE_PATHS` are the triton-trtllm-engine runtime's examples (build plans, repositories, Triton);
`SERVE_EXAMPLE_PATHS` the trtllm-serve runtime's; `ALL_EXAMPLE_PATHS` both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifest_files
from mmd_operator.plan.resource_plan import AnyPlan, plan_resource
from mmd_operator.plan.triton import TritonPlan

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
ALL_EXAMPLE_PATHS = sorted(EXAMPLES_DIR.glob("*.yaml"))


def _serves(path: Path) -> bool:
    return (yaml.safe_load(path.read_text()).get("spec") or {}).get("runtime") == "trtllm-serve"


SERVE_EXAMPLE_PATHS = [path for path in ALL_EXAMPLE_PATHS if _serves(path)]
EXAMPLE_PATHS = [path for path in ALL_EXAMPLE_PATHS if not _serves(path)]


def plan_any_example(example: str | Path) -> tuple[MultimodalDeployment, AnyPlan]:
    """The resource and plan of `examples/<example>.yaml` (a stem or a path), of either runtime."""
    path = example if isinstance(example, Path) else EXAMPLES_DIR / f"{example}.yaml"
    return plan_resource(yaml.safe_load(path.read_text()))


def plan_example(example: str | Path) -> tuple[MultimodalDeployment, TritonPlan]:
    """The resource and engine plan of a triton-trtllm-engine example."""
    resource, plan = plan_any_example(example)
    assert isinstance(plan, TritonPlan), f"{example} is a trtllm-serve example"
    return resource, plan


def serving_deployment(example: str) -> dict[str, Any]:
    """The serving Deployment the operator renders for `examples/<example>.yaml` (either runtime)."""
    resource, plan = plan_any_example(example)
    manifests = manifest_files(resource, plan, config=OperatorConfig())
    (deployment,) = (
        yaml.safe_load(text) for name, text in manifests.items() if name.startswith("deployment-")
    )
    return deployment  # type: ignore[no-any-return]
