"""`mmctl validate --cluster` judges the kinds of GPU as the operator does, in the operator's words.

On the in-memory API server (pinned to the real one by the contract test), with nodes labelled as GPU
feature discovery labels them: the same refusal for a placement that reaches two kinds, the same
refusal for a model too large for the only kind in reach, the kind the engine is built for when it fits.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from mmctl.preflight import Severity, preflight
from mmd_operator.config import OperatorConfig
from mmd_operator.plan.resource_plan import plan_resource
from mmd_operator.reconcile import Reconciler
from mmd_operator.vocabulary import kinds
from mmd_testbed.localcluster.objects import NodePool
from tests.support.examples import EXAMPLES_DIR
from tests.support.gpu_kinds import A100, H100, add_dra_gpus, add_node, add_pools, node_of_kind
from tests.support.in_memory_cluster import InMemoryCluster

NS = "ml"


@pytest.fixture
def cluster() -> InMemoryCluster:
    cluster = InMemoryCluster()
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return cluster


def _llava() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["metadata"]["namespace"] = NS
    return document


def _errors(cluster: InMemoryCluster, document: dict[str, Any]) -> dict[str, str]:
    findings = preflight(*plan_resource(document), NS, cluster.client)
    return {f.field: " ".join(f.message.split()) for f in findings if f.severity is Severity.ERROR}


def _operator_says(cluster: InMemoryCluster, document: dict[str, Any]) -> str:
    cluster.create(document)
    cluster.feed()
    reconciler = Reconciler(cluster.client, cluster.store, OperatorConfig())
    try:
        reconciler.reconcile(NS, document["metadata"]["name"])
    finally:
        reconciler.events.close()
    cluster.feed()
    resource = cluster.server.get(kinds.MULTIMODAL_DEPLOYMENT, NS, document["metadata"]["name"])
    assert resource is not None
    ready = next(c for c in resource["status"]["conditions"] if c["type"] == "Ready")
    return " ".join(ready["message"].split())


def test_a_placement_reaching_two_kinds_is_refused_in_the_operator_s_words(cluster: InMemoryCluster) -> None:
    add_pools(cluster, A100, H100)
    errors = _errors(cluster, _llava())
    said = errors["spec.serving.pod.nodeSelector"]
    assert said.startswith("reaches 2 kinds of GPU: NVIDIA-A100-SXM4-80GB (compute capability 8.0)")
    assert f"spec.serving.pod.nodeSelector: {said}" in _operator_says(cluster, _llava())


def test_a_model_too_large_for_the_kind_in_reach_is_refused_in_the_operator_s_words(
    cluster: InMemoryCluster,
) -> None:
    add_node(cluster, node_of_kind("t4-0", "Tesla-T4", 15360, (7, 5)))
    said = _errors(cluster, _llava())["spec.engine"]
    assert said.startswith(
        "no kind of GPU in reach can run it: Tesla-T4 (compute capability 7.5) has 15.0 GiB"
    )
    assert f"spec.engine: {said}" in _operator_says(cluster, _llava())


def test_the_kind_the_engine_is_built_for_is_said_when_it_fits(cluster: InMemoryCluster) -> None:
    add_pools(cluster, NodePool(count=1, gpu_model="h100-80gb", name_prefix="h100"))
    findings = preflight(*plan_resource(_llava()), NS, cluster.client)
    kinds_said = [
        f.message
        for f in findings
        if f.field == "spec.serving.pod.nodeSelector" and f.severity is Severity.INFO
    ]
    assert "the engine is built for NVIDIA-H100-80GB-HBM3 (compute capability 9.0)" in kinds_said


def test_a_claim_admitting_two_kinds_is_refused_in_the_operator_s_words(cluster: InMemoryCluster) -> None:
    add_dra_gpus(cluster, "node-a", "NVIDIA A100-SXM4-80GB", "8.0")
    add_dra_gpus(cluster, "node-h", "NVIDIA H100 80GB HBM3", "9.0")
    document = _llava()
    document["spec"]["gpus"] = {"resourceClaim": {}}
    said = _errors(cluster, document)["spec.gpus.resourceClaim.selector"]
    assert said.startswith(
        "reaches 2 kinds of GPU: NVIDIA-A100-SXM4-80GB (compute capability 8.0) on 1 node(s)"
    )
    assert f"spec.gpus.resourceClaim.selector: {said}" in _operator_says(cluster, document)
    document["spec"]["gpus"] = {
        "resourceClaim": {
            "selector": 'device.attributes["gpu.nvidia.com"].brand == "Nvidia" && '
            'device.attributes["gpu.nvidia.com"].cudaComputeCapability == semver("8.0.0")'
        }
    }
    document["metadata"]["name"] = "llava-a100"
    findings = preflight(*plan_resource(document), NS, cluster.client)
    assert "the engine is built for NVIDIA-A100-SXM4-80GB (compute capability 8.0)" in [
        f.message for f in findings
    ]
