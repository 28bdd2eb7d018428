"""The kind of GPU an engine is built for, through whole reconciles on the in-memory API server.

The nodes are the local cluster's fake GPU nodes (feature discovery's labels): one kind in reach builds
and serves there; two kinds and no choice refuse the spec with the kinds and the fix, creating nothing; a
kind that joins the placement later never moves a resource off the kind its engine was built for.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from mmd_operator.api.validation import parse_spec
from mmd_operator.config import OperatorConfig
from mmd_operator.facts import GpuKind
from mmd_operator.kube.nodes import NodeDirectory
from mmd_operator.plan.resource_plan import plan_spec
from mmd_operator.reconcile import Reconciler
from mmd_operator.vocabulary import kinds
from mmd_testbed.localcluster.objects import NodePool, gpu_node
from tests.support.examples import EXAMPLES_DIR
from tests.support.in_memory_cluster import InMemoryCluster

NS = "ml"
PRODUCT = "nvidia.com/gpu.product"
A100 = NodePool(count=2, gpu_model="a100-80gb", name_prefix="a100")
H100 = NodePool(count=1, gpu_model="h100-80gb", name_prefix="h100")
H100_KIND = GpuKind("NVIDIA-H100-80GB-HBM3", "9.0")


@pytest.fixture
def cluster() -> InMemoryCluster:
    return InMemoryCluster()


@pytest.fixture
def reconciler(cluster: InMemoryCluster) -> Any:
    running = Reconciler(cluster.client, cluster.store, OperatorConfig())
    yield running
    running.events.close()


def _nodes(cluster: InMemoryCluster, *pools: NodePool) -> None:
    """Nodes as the local cluster registers them; their allocatable GPUs are status, the kubelet's to say."""
    for pool in pools:
        for name in pool.node_names():
            _node(cluster, gpu_node(name, pool))


def _node(cluster: InMemoryCluster, node: dict[str, Any]) -> None:
    cluster.create({key: value for key, value in node.items() if key != "status"})
    identity = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node["metadata"]["name"]}}
    cluster.server.client("kubelet").apply({**identity, "status": node["status"]}, subresource="status")


def _llava(cluster: InMemoryCluster, **serving_pod: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["metadata"]["namespace"] = NS
    if serving_pod:
        document["spec"].setdefault("serving", {})["pod"] = serving_pod
    created = cluster.create(document)
    cluster.feed()
    return created


def _reconciled(cluster: InMemoryCluster, reconciler: Reconciler) -> dict[str, Any]:
    reconciler.reconcile(NS, "llava")
    cluster.feed()
    resource = cluster.server.get(kinds.MULTIMODAL_DEPLOYMENT, NS, "llava")
    assert resource is not None
    return resource


def _build_pod(cluster: InMemoryCluster) -> dict[str, Any]:
    (job,) = cluster.server.all(kinds.JOB, NS)
    return dict(job["spec"]["template"]["spec"])


def test_one_kind_in_reach_is_built_for_and_served_on(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    _nodes(cluster, A100, H100)
    resource = _llava(cluster, nodeSelector={PRODUCT: H100_KIND.product})
    status = _reconciled(cluster, reconciler)["status"]
    assert status["engine"]["gpu"] == {"product": H100_KIND.product, "computeCapability": "9.0"}
    assert status["engine"]["cacheKey"] == plan_spec(parse_spec(resource["spec"]), H100_KIND).cache_key
    assert _build_pod(cluster)["nodeSelector"] == {PRODUCT: H100_KIND.product}


def test_two_kinds_in_reach_refuse_the_spec_naming_both_and_the_fix(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    _nodes(cluster, A100, H100)
    _llava(cluster)
    status = _reconciled(cluster, reconciler)["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (status["phase"], ready["reason"]) == ("Failed", "InvalidSpec")
    message = " ".join(ready["message"].split())
    assert "spec.serving.pod.nodeSelector: reaches 2 kinds of GPU" in message
    assert "NVIDIA-A100-SXM4-80GB (compute capability 8.0) on 2 node(s): a100-0, a100-1" in message
    assert "NVIDIA-H100-80GB-HBM3 (compute capability 9.0) on 1 node(s): h100-0" in message
    assert f"add {PRODUCT}: <one of NVIDIA-A100-SXM4-80GB, NVIDIA-H100-80GB-HBM3>" in message
    assert cluster.server.all(kinds.JOB, NS) == [] and cluster.server.all(kinds.CLAIM, NS) == []


def test_a_kind_that_joins_later_never_moves_a_resource_off_its_engine_s_kind(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    _nodes(cluster, A100)
    _llava(cluster)
    first = _reconciled(cluster, reconciler)["status"]
    assert first["engine"]["gpu"]["product"] == "NVIDIA-A100-SXM4-80GB"
    _nodes(cluster, H100)
    reconciler.nodes = NodeDirectory(cluster.client)  # a listing made after the H100 node came
    then = _reconciled(cluster, reconciler)["status"]
    assert then["engine"] == first["engine"]
    (warning,) = [w for w in then.get("warnings", []) if w.startswith("spec.serving.pod:")]
    assert "also reaches NVIDIA-H100-80GB-HBM3 (compute capability 9.0) on 1 node(s): h100-0" in warning
    assert "built for NVIDIA-A100-SXM4-80GB (compute capability 8.0) and its pods run only there" in warning


def test_without_feature_discovery_the_key_is_the_one_made_before_kinds_were_read(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    bare = gpu_node("bare-0", NodePool(count=1))
    bare["metadata"]["labels"] = {"kubernetes.io/hostname": "bare-0"}
    _node(cluster, bare)
    resource = _llava(cluster)
    status = _reconciled(cluster, reconciler)["status"]
    assert "gpu" not in status["engine"]
    assert status["engine"]["cacheKey"] == plan_spec(parse_spec(resource["spec"])).cache_key
    assert "nodeSelector" not in _build_pod(cluster)
    (warning,) = [w for w in status.get("warnings", []) if w.startswith("spec.serving.pod:")]
    assert "1 GPU node(s) in reach carry no nvidia.com/gpu.product label (bare-0)" in warning
