"""The GPU kinds a pod may land on (`judgement.gpu_kinds`), from nodes as the local cluster makes them."""

from __future__ import annotations

from typing import Any

from mmd_operator.facts import GpuKind, NodeRequirement, PodPlacement, Toleration
from mmd_operator.judgement.gpu_kinds import KindChoice, KindsInReach, choose_kind, kinds_in_reach, memory_mib
from mmd_operator.kube.nodes import nodes_of
from mmd_testbed.localcluster.objects import NodePool, gpu_node

A100 = GpuKind("NVIDIA-A100-SXM4-80GB", "8.0")
H100 = GpuKind("NVIDIA-H100-80GB-HBM3", "9.0")
L40S = GpuKind("NVIDIA-L40S", "8.9")


def _nodes(*pools: NodePool, tainted: str = "") -> list[dict[str, Any]]:
    items = [gpu_node(name, pool) for pool in pools for name in pool.node_names()]
    for item in items:
        if item["metadata"]["name"].startswith(tainted or "-"):
            item["spec"]["taints"] = [{"key": "dedicated", "value": "h100", "effect": "NoSchedule"}]
    return items


MIXED = (
    NodePool(count=2, gpu_model="a100-80gb", name_prefix="a100"),
    NodePool(count=1, gpu_model="h100-80gb", name_prefix="h100"),
    NodePool(count=1, gpu_model="l40s", name_prefix="l40s"),
)


def test_a_node_s_kind_is_its_product_and_compute_capability_from_feature_discovery() -> None:
    (a100, *_) = nodes_of(_nodes(*MIXED)).with_gpus
    assert GpuKind.of_labels(dict(a100.labels)) == A100
    assert memory_mib(a100) == 81920
    assert A100.describe() == "NVIDIA-A100-SXM4-80GB (compute capability 8.0)"
    assert GpuKind.of_labels({"nvidia.com/gpu.product": "X", "nvidia.com/gpu.compute.major": "9"}) == GpuKind(
        "X"
    )
    assert GpuKind("X").describe() == "X (compute capability unknown)"
    assert GpuKind.of_labels({"nvidia.com/gpu.count": "8"}) is None


def test_a_pod_without_placement_reaches_every_kind_each_with_its_nodes() -> None:
    reach = kinds_in_reach(PodPlacement(gpus=1), nodes_of(_nodes(*MIXED)))
    assert reach.kinds == (A100, H100, L40S)
    assert reach.nodes_of(A100) == ("a100-0", "a100-1")
    assert reach.unlabelled == ()


def test_selector_affinity_and_taints_narrow_the_kinds_but_free_gpus_do_not() -> None:
    nodes = nodes_of(_nodes(*MIXED, tainted="h100"))
    by_product = PodPlacement(gpus=8, node_selector=(("nvidia.com/gpu.product", H100.product),))
    # The H100 node is tainted: the selector alone reaches no node.
    assert kinds_in_reach(by_product, nodes).kinds == ()
    tolerating = PodPlacement(
        gpus=8,
        node_selector=by_product.node_selector,
        tolerations=(Toleration(key="dedicated", operator="Equal", value="h100", effect="NoSchedule"),),
    )
    assert kinds_in_reach(tolerating, nodes).kinds == (H100,)
    # Capability 8.x by affinity: the A100s and the L40S; 16 GPUs a pod fit on no node, yet they are in reach.
    ampere_on = PodPlacement(
        gpus=16, affinity_terms=((NodeRequirement("nvidia.com/gpu.compute.major", "In", ("8",)),),)
    )
    assert kinds_in_reach(ampere_on, nodes).kinds == (A100, L40S)


def test_gpu_nodes_without_feature_discovery_labels_are_counted_apart() -> None:
    items = _nodes(NodePool(count=2, gpu_model="h100-80gb", name_prefix="h100"))
    bare = gpu_node("bare-0", NodePool(count=1))
    bare["metadata"]["labels"] = {"kubernetes.io/hostname": "bare-0"}
    reach = kinds_in_reach(PodPlacement(gpus=1), nodes_of([*items, bare]))
    assert reach.kinds == (H100,)
    assert reach.unlabelled == ("bare-0",)


def test_the_choice_keeps_the_recorded_kind_when_nothing_or_more_is_known() -> None:
    mixed = kinds_in_reach(PodPlacement(gpus=1), nodes_of(_nodes(*MIXED)))
    assert choose_kind(None, H100) == KindChoice(H100)  # nodes not readable
    assert choose_kind(KindsInReach(), H100) == KindChoice(H100)  # no GPU node in reach now
    assert choose_kind(KindsInReach(), None) == KindChoice()
    kept = choose_kind(mixed, L40S)
    assert kept.kind == L40S and kept.refusal is None
    assert "also reaches NVIDIA-A100-SXM4-80GB (compute capability 8.0) on 2 node(s)" in kept.notice
    refused = choose_kind(mixed, GpuKind("NVIDIA-A30", "8.0"))  # its kind left the placement
    assert refused.kind is None and refused.refusal is not None
    assert refused.refusal[0] == "spec.serving.pod.nodeSelector"
    assert refused.refusal[1].startswith("reaches 3 kinds of GPU: NVIDIA-A100-SXM4-80GB")
