"""GPU nodes of several kinds on the in-memory API server, labelled as GPU feature discovery labels them.

Imports the local cluster's node objects and the in-memory cluster.
"""

from __future__ import annotations

from typing import Any

from mmd_operator.vocabulary import kinds
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


def add_dra_gpus(cluster: InMemoryCluster, node: str, product: str, capability: str, count: int = 2) -> None:
    """A ResourceSlice of `node` with `count` GPUs as NVIDIA's DRA driver publishes them (once: the class)."""
    if cluster.server.get(kinds.DEVICE_CLASS, "", "gpu.nvidia.com") is None:
        cluster.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
            }
        )
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {
                "productName": {"string": product},
                "architecture": {"string": "Hopper" if capability.startswith("9") else "Ampere"},
                "brand": {"string": "Nvidia"},
                "cudaComputeCapability": {"version": f"{capability}.0"},
                "driverVersion": {"version": "570.124.6"},
                "uuid": {"string": f"GPU-{node}-{index}"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for index in range(count)
    ]
    cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    )
