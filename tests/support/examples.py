"""The resources under `examples/` and their checked plans, as the operator derives them (no CLI)."""

from __future__ import annotations

from pathlib import Path

import yaml

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.plan.resource_plan import ResourcePlan, plan_resource

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_PATHS = sorted(EXAMPLES_DIR.glob("*.yaml"))


def plan_example(example: str | Path) -> tuple[MultimodalDeployment, ResourcePlan]:
    """The resource and plan of `examples/<example>.yaml` (a stem or a path)."""
    path = example if isinstance(example, Path) else EXAMPLES_DIR / f"{example}.yaml"
    return plan_resource(yaml.safe_load(path.read_text()))
