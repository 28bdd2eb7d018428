"""The kind of GPU an engine is built for, through whole reconciles on the in-memory API server.

The nodes are the local cluster's fake GPU nodes (feature discovery's labels): one kind in reach builds
and serves there; two kinds and no choice refuse the spec with the kinds and the fix, creating nothing; a
kind that joins the placement later never moves a resource off the kind its engine was built for. And
whether the model fits the kind: too large, or a precision it cannot run, refuse; a batch it cannot hold
whole warns; trtllm-serve, bound to no kind, is weighed against every kind in reach.
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
from mmd_operator.reconcile import KIND_RECHECK_SECONDS, Reconciler
from mmd_operator.vocabulary import kinds
from mmd_testbed.localcluster.objects import NodePool, gpu_node
from tests.support.examples import EXAMPLES_DIR
from tests.support.gpu_kinds import A100, H100, PRODUCT, add_node, add_pools, node_of_kind
from tests.support.in_memory_cluster import InMemoryCluster

NS = "ml"
H100_KIND = GpuKind("NVIDIA-H100-80GB-HBM3", "9.0")


@pytest.fixture
def cluster() -> InMemoryCluster:
    return InMemoryCluster()


@pytest.fixture
def reconciler(cluster: InMemoryCluster) -> Any:
    running = Reconciler(cluster.client, cluster.store, OperatorConfig())
    yield running
    running.events.close()


def _llava(cluster: InMemoryCluster, example: str = "llava.yaml", **serving_pod: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / example).read_text())
    document["metadata"]["namespace"] = NS
    if serving_pod:
        document["spec"].setdefault("serving", {})["pod"] = serving_pod
    created = cluster.create(document)
    cluster.feed()
    return created


def _reconciled(cluster: InMemoryCluster, reconciler: Reconciler, name: str = "llava") -> dict[str, Any]:
    reconciler.reconcile(NS, name)
    cluster.feed()
    resource = cluster.server.get(kinds.MULTIMODAL_DEPLOYMENT, NS, name)
    assert resource is not None
    return resource


def _build_pod(cluster: InMemoryCluster) -> dict[str, Any]:
    (job,) = cluster.server.all(kinds.JOB, NS)
    return dict(job["spec"]["template"]["spec"])


def test_one_kind_in_reach_is_built_for_and_served_on(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    add_pools(cluster, A100, H100)
    resource = _llava(cluster, nodeSelector={PRODUCT: H100_KIND.product})
    status = _reconciled(cluster, reconciler)["status"]
    assert status["engine"]["gpu"] == {"product": H100_KIND.product, "computeCapability": "9.0"}
    assert status["engine"]["cacheKey"] == plan_spec(parse_spec(resource["spec"]), H100_KIND).cache_key
    assert _build_pod(cluster)["nodeSelector"] == {PRODUCT: H100_KIND.product}
    reconciler.events.close()  # posts what is queued
    (event,) = [e for e in cluster.server.all(kinds.EVENT, NS) if e["reason"] == "GpuKindChosen"]
    assert event["type"] == "Normal"
    assert event["message"] == (
        f"engine {status['engine']['cacheKey']} is built for NVIDIA-H100-80GB-HBM3 (compute capability 9.0): "
        "its build and serving pods run only on nodes of that kind"
    )


def test_two_kinds_in_reach_refuse_the_spec_naming_both_and_the_fix(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    add_pools(cluster, A100, H100)
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
    add_pools(cluster, A100)
    _llava(cluster)
    first = _reconciled(cluster, reconciler)["status"]
    assert first["engine"]["gpu"]["product"] == "NVIDIA-A100-SXM4-80GB"
    add_pools(cluster, H100)
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
    add_node(cluster, bare)
    resource = _llava(cluster)
    status = _reconciled(cluster, reconciler)["status"]
    assert "gpu" not in status["engine"]
    assert status["engine"]["cacheKey"] == plan_spec(parse_spec(resource["spec"])).cache_key
    assert "nodeSelector" not in _build_pod(cluster)
    (warning,) = [w for w in status.get("warnings", []) if w.startswith("spec.serving.pod:")]
    assert "1 GPU node(s) in reach carry no nvidia.com/gpu.product label (bare-0)" in warning


def _ready(status: dict[str, Any]) -> tuple[str, str, str]:
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    return status["phase"], ready["reason"], " ".join(ready["message"].split())


def test_a_model_too_large_for_the_only_kind_in_reach_is_refused_with_its_figures(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    add_node(cluster, node_of_kind("t4-0", "Tesla-T4", 15360, (7, 5)))
    _llava(cluster)
    phase, reason, message = _ready(_reconciled(cluster, reconciler)["status"])
    assert (phase, reason) == ("Failed", "InvalidSpec")
    assert (
        "spec.engine: no kind of GPU in reach can run it: Tesla-T4 (compute capability 7.5) has 15.0 GiB"
        in message
    )
    assert "the model needs 16.2 GiB per GPU at the least" in message
    assert cluster.server.all(kinds.JOB, NS) == [] and cluster.server.all(kinds.CLAIM, NS) == []


def test_a_precision_the_only_kind_cannot_run_is_refused(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    add_pools(cluster, A100)
    _llava(cluster, example="llava-tp2-fp8.yaml", nodeSelector={})  # its H100 pin left out
    phase, reason, message = _ready(_reconciled(cluster, reconciler, name="llava-tp2-fp8")["status"])
    assert (phase, reason) == ("Failed", "InvalidSpec")
    assert (
        "spec.engine.kvCacheDtype: no kind of GPU in reach can run it: kvCacheDtype fp8 needs compute "
        in message
    )
    assert "capability 8.9 or later; NVIDIA-A100-SXM4-80GB (compute capability 8.0) has not" in message


def test_a_batch_the_kind_cannot_hold_whole_is_served_with_a_warning(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    add_node(cluster, node_of_kind("l4-0", "NVIDIA-L4", 23034, (8, 9)))
    _llava(cluster)
    status = _reconciled(cluster, reconciler)["status"]
    assert status["engine"]["gpu"]["product"] == "NVIDIA-L4"
    (warning,) = [w for w in status.get("warnings", []) if w.startswith("spec.engine.maxBatchSize:")]
    assert "the KV cache holds 5 of 8 sequences of 2560 tokens" in warning
    assert cluster.server.all(kinds.JOB, NS) != []


def test_trtllm_serve_is_weighed_against_every_kind_in_reach(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    add_pools(cluster, H100)
    add_node(cluster, node_of_kind("t4-0", "Tesla-T4", 15360, (7, 5)))
    _llava(cluster, example="qwen2_vl-trtllm-serve.yaml")
    status = _reconciled(cluster, reconciler, name="qwen2-vl-serve")["status"]
    assert status["phase"] != "Failed"
    (warning,) = [w for w in status.get("warnings", []) if w.startswith("spec.engine:")]
    assert "Tesla-T4 (compute capability 7.5) has 15.0 GiB per GPU and the model needs" in warning


def test_a_pool_that_joins_after_the_last_listing_is_seen_by_a_placement_that_reaches_nothing(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    now = [0.0]
    reconciler.nodes = NodeDirectory(cluster.client, clock=lambda: now[0])
    add_pools(cluster, A100)
    assert reconciler.nodes.nodes() is not None  # listed before the H100 pool joins
    add_pools(cluster, H100)
    now[0] = 10.0  # within the listing's minute, past its retry pause
    _llava(cluster, nodeSelector={PRODUCT: H100_KIND.product})
    status = _reconciled(cluster, reconciler)["status"]
    assert status["engine"]["gpu"] == {"product": H100_KIND.product, "computeCapability": "9.0"}


def test_without_a_kind_the_build_pod_goes_where_the_serving_pods_are_placed(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    bare = gpu_node("bare-0", NodePool(count=1))
    bare["metadata"]["labels"] = {"kubernetes.io/hostname": "bare-0", "pool": "inference"}
    add_node(cluster, bare)
    _llava(cluster, nodeSelector={"pool": "inference"})
    status = _reconciled(cluster, reconciler)["status"]
    assert "gpu" not in status["engine"]
    assert _build_pod(cluster)["nodeSelector"] == {"pool": "inference"}


def test_a_placement_that_reaches_no_node_is_looked_at_again_soon(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    add_pools(cluster, A100)
    _llava(cluster, nodeSelector={PRODUCT: H100_KIND.product})
    outcome = reconciler.reconcile(NS, "llava")
    assert outcome.requeue_after is not None and outcome.requeue_after <= KIND_RECHECK_SECONDS
