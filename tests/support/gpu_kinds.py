"""GPU nodes of several kinds on the in-memory API server, labelled as GPU feature discovery labels them.

Imports the local cluster's node objects and the in-memory cluster.
"""

from __future__ import annotations

from typing import Any

from mmd_testbed.localcluster.objects import NodePool, gpu_node
from tests.support.in_memory_cluster import InMemoryCluster

PRODUCT = "nvidia.com/gpu.product"
A100 = NodePool(count=2, gpu_model="a100-80gb", name_prefix="a100")
H100 = NodePool(count=1, gpu_model="h100-80gb", name_prefix="h100")


def add_pools(cluster: InMemoryCluster, *pools: NodePool) -> None:
    """The nodes of `pools`, as the local cluster registers them."""
    for pool in pools:
        for name in pool.node_names():
            add_node(cluster, gpu_node(name, pool))


def add_node(cluster: InMemoryCluster, node: dict[str, Any]) -> None:
    """`node`, its status (the allocatable GPUs) written as the kubelet writes it."""
    cluster.create({key: value for key, value in node.items() if key != "status"})
    identity = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node["metadata"]["name"]}}
    cluster.server.client("kubelet").apply({**identity, "status": node["status"]}, subresource="status")


def node_of_kind(name: str, product: str, memory_mib: int, capability: tuple[int, int]) -> dict[str, Any]:
    """A node of a kind the local cluster's pools do not have, labelled as feature discovery would."""
    node = gpu_node(name, NodePool(count=1, gpu_model="l40s", name_prefix=name))
    node["metadata"]["labels"].update(
        {
            PRODUCT: product,
            "nvidia.com/gpu.memory": str(memory_mib),
            "nvidia.com/gpu.compute.major": str(capability[0]),
            "nvidia.com/gpu.compute.minor": str(capability[1]),
        }
    )
    return node
