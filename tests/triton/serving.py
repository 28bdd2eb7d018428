"""The triton tier's examples: each one's checked plan, optionally with serving and engine overrides;
raw request tensors for what no client sends."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mmctl.triton.requests import Tensor
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


def with_parameter(plan: TritonPlan, model: str, key: str, value: str) -> TritonPlan:
    """`plan` with parameter `key` of `model`'s rendered config set to `value`: a configuration the
    operator does not render, to show what a double does with it."""
    configs = dict(plan.repository.configs)
    pattern = rf'(key: "{re.escape(key)}"\n\s+value {{ string_value: ")[^"]*(" }})'
    configs[model], count = re.subn(pattern, rf"\g<1>{value}\g<2>", configs[model])
    assert count == 1, f"{model} has no parameter {key}"
    return dataclasses.replace(plan, repository=dataclasses.replace(plan.repository, configs=configs))


def without_parameter(plan: TritonPlan, model: str, key: str) -> TritonPlan:
    """`plan` with parameter `key` taken out of `model`'s rendered config (which the operator renders)."""
    configs = dict(plan.repository.configs)
    pattern = rf'parameters {{\n\s+key: "{re.escape(key)}"\n\s+value {{ string_value: "[^"]*" }}\n}}\n'
    configs[model], count = re.subn(pattern, "", configs[model])
    assert count == 1, f"{model} has no parameter {key}"
    return dataclasses.replace(plan, repository=dataclasses.replace(plan.repository, configs=configs))


_NUMPY = {"INT32": np.int32, "UINT64": np.uint64, "FP32": np.float32, "FP16": np.float16, "BOOL": np.bool_}


def scalar(name: str, value: object, datatype: str) -> Tensor:
    """A [1, 1] input; `BYTES` values are encoded as UTF-8."""
    if datatype == "BYTES":
        return Tensor(name, np.array([[str(value).encode()]], dtype=object), datatype)
    return Tensor(name, np.array([[value]], dtype=_NUMPY[datatype]), datatype)


def replaced(tensors: Sequence[Tensor], *extra: Tensor, drop: Sequence[str] = ()) -> list[Tensor]:
    """`tensors` without those named in `drop` or by `extra`, then `extra`."""
    names = {t.name for t in extra} | set(drop)
    return [t for t in tensors if t.name not in names] + list(extra)
