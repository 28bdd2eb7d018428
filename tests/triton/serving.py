"""The triton tier's examples: each one's checked plan, optionally with serving and engine overrides."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from mmd_operator.plan.resource_plan import plan_resource
from mmd_operator.plan.triton import TritonPlan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(
    name: str, overrides: Mapping[str, Any] | None = None, engine: Mapping[str, Any] | None = None
) -> TritonPlan:
    """The plan of examples/<name>.yaml, with `overrides` merged into `spec.serving`, `engine` into
    `spec.engine`."""
    document = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    if overrides or engine:
        document = copy.deepcopy(document)
        document["spec"].setdefault("serving", {}).update(overrides or {})
        document["spec"].setdefault("engine", {}).update(engine or {})
    _, plan = plan_resource(document)
    assert isinstance(plan, TritonPlan), f"{name} is a trtllm-serve example: no Triton repository"
    return plan


def load_example_with_urls(name: str) -> TritonPlan:
    """The plan of examples/<name>.yaml with `serving.imageUrlInput` on where the type can load URLs
    (the examples keep it off, the safe default), so every input the type can take is served."""
    plan = load_example(name)
    if not plan.settings.knowledge.image_urls:
        return plan
    return load_example(name, {"imageUrlInput": True})
