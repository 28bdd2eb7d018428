"""The world of one replica, its GPUs per pod and its shape: one rule, said in Python and in CEL alike.

The models fill `serving.gpusPerPod`'s default with `Parallelism.of`; the CRD's CEL rules with
`GPUS_PER_POD` (and `DEFAULT_GPUS_PER_POD`), both written from the same constant. These evaluate the CEL
text with the offline validator's own CEL (cel-python, as the API server would) against the Python.
"""

from __future__ import annotations

from typing import Any

import pytest
from celpy.adapter import json_to_cel

from mmd_operator.api.v1alpha1 import Parallelism, ReplicaShape
from mmd_operator.api.v1alpha1.parallelism import DEFAULT_GPUS_PER_POD, GPUS_PER_POD, WORLD
from mmd_operator.api.validation import cel_program
from mmd_operator.knowledge import NODE_WORLD


def _spec(tensor: int, pipeline: int, gpus_per_pod: int | None) -> dict[str, Any]:
    serving = {} if gpus_per_pod is None else {"gpusPerPod": gpus_per_pod}
    return {"engine": {"tensorParallelSize": tensor, "pipelineParallelSize": pipeline}, "serving": serving}


def _cel(expression: str, spec: dict[str, Any]) -> int:
    return int(cel_program(expression).evaluate({"self": json_to_cel(spec)}))


@pytest.mark.parametrize("tensor", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("pipeline", [1, 2, 3, 4, 16])
@pytest.mark.parametrize("gpus_per_pod", [None, 1, 4, 8])
def test_cel_and_the_models_fill_in_the_same_gpus_per_pod(
    tensor: int, pipeline: int, gpus_per_pod: int | None
) -> None:
    spec = _spec(tensor, pipeline, gpus_per_pod)
    parallelism = Parallelism.of(tensor, pipeline, gpus_per_pod)
    assert _cel(WORLD, spec) == parallelism.world == tensor * pipeline
    assert _cel(GPUS_PER_POD, spec) == parallelism.gpus_per_pod
    assert _cel(DEFAULT_GPUS_PER_POD, spec) == Parallelism.of(tensor, pipeline, None).gpus_per_pod


def test_the_default_is_the_world_up_to_one_node() -> None:
    assert Parallelism.of(4, 1, None) == Parallelism(4, 1, 4)
    assert Parallelism.of(16, 2, None) == Parallelism(16, 2, NODE_WORLD)


@pytest.mark.parametrize(
    ("parallelism", "shape", "words"),
    [
        (Parallelism.of(8, 1, None), ReplicaShape.ONE_POD, "8 ranks (tensor 8) in 1 pod of 8 GPUs"),
        (Parallelism.of(2, 1, 1), ReplicaShape.GROUP, "2 ranks (tensor 2) in 2 pods of 1 GPUs"),
        (
            Parallelism.of(16, 2, None),
            ReplicaShape.GROUP,
            "32 ranks (tensor 16 x pipeline 2) in 4 pods of 8 GPUs",
        ),
    ],
)
def test_a_replica_of_more_than_one_pod_is_a_group(
    parallelism: Parallelism, shape: ReplicaShape, words: str
) -> None:
    assert parallelism.shape is shape
    assert parallelism.describe() == words
