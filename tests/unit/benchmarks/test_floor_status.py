"""The scale benchmark's floor writes the status the operator writes once a resource is Ready, built by
the operator's own status code: checked here without a cluster, so that a change of the status code shows
up before the cluster tier's short benchmark."""

from __future__ import annotations

from benchmarks.operator_scale import ready_status
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import decision
from tests.support.examples import plan_example


def test_the_floor_writes_a_ready_status_with_every_condition_the_operator_writes() -> None:
    resource, plan = plan_example("llava")
    resource = resource.model_copy(update={"metadata": {**resource.metadata, "namespace": "bench"}})
    objects = decision.manifests(resource, plan, config=OperatorConfig())[:5]
    status = ready_status(resource, plan, objects)
    assert status["phase"] == "Ready"
    kinds = [condition["type"] for condition in status["conditions"]]
    assert kinds == [
        "Validated", "EngineReady", "ModelRepositoryReady", "Available", "ServingThroughChanges", "Ready",
        "Reconciling", "Stalled",
    ]  # fmt: skip
