"""The objects every local cluster starts with: fake GPU nodes and the local StorageClass.

Nodes are created with their status (the API server keeps status on Node create), so the scheduler
sees GPU capacity from the start; kwok's node-initialize stage keeps that capacity and adds the
Ready condition. Labels follow NVIDIA GPU feature discovery (`nvidia.com/gpu.product`, ...), so the
operator's node selection can be tested as it would run on a real GPU cluster.

Imports: the standard library and `stages` (for the StorageClass's name and provisioner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmd_operator.vocabulary.kinds import GPU_RESOURCE
from mmd_testbed.localcluster.stages import PROVISIONER, STORAGE_CLASS

NODE_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class GpuModel:
    """What GPU feature discovery reports for one GPU model."""

    product: str
    memory_mib: int
    family: str
    compute_major: int
    compute_minor: int


GPU_MODELS = {
    "a100-80gb": GpuModel("NVIDIA-A100-SXM4-80GB", 81920, "ampere", 8, 0),
    "h100-80gb": GpuModel("NVIDIA-H100-80GB-HBM3", 81559, "hopper", 9, 0),
    "l40s": GpuModel("NVIDIA-L40S", 46068, "ada-lovelace", 8, 9),
}


@dataclass(frozen=True)
class NodePool:
    """A set of identical fake GPU nodes."""

    count: int = 4
    gpus_per_node: int = 8
    gpu_model: str = "a100-80gb"
    cpu: str = "96"
    memory: str = "1Ti"
    pods: str = "110"
    name_prefix: str = "gpu-node"

    def node_names(self) -> list[str]:
        """Return the names of the nodes in the pool."""
        return [f"{self.name_prefix}-{index}" for index in range(self.count)]


def gpu_labels(pool: NodePool) -> dict[str, str]:
    """The labels NVIDIA's GPU feature discovery puts on a node of `pool` (and the usual topology labels)."""
    model = GPU_MODELS[pool.gpu_model]
    return {
        "node.kubernetes.io/instance-type": f"fake-{pool.gpus_per_node}x{pool.gpu_model}",
        "topology.kubernetes.io/zone": "local-a",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": model.product,
        "nvidia.com/gpu.count": str(pool.gpus_per_node),
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.family": model.family,
        "nvidia.com/gpu.compute.major": str(model.compute_major),
        "nvidia.com/gpu.compute.minor": str(model.compute_minor),
        "nvidia.com/gpu.machine": "kwok-fake-gpu-server",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "127",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/mig.capable": "false",
    }


def gpu_node(name: str, pool: NodePool) -> dict[str, Any]:
    """Return the manifest (with status) of one fake GPU node managed by kwok."""
    resources = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": pool.pods,
        "ephemeral-storage": "1Ti",
        GPU_RESOURCE: str(pool.gpus_per_node),
    }
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        **gpu_labels(pool),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {NODE_ANNOTATION: "fake"}},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            # nodeInfo (architecture, OS, kubelet version) is filled in by kwok's node-initialize stage.
        },
    }


def storage_class(*, default: bool = True) -> dict[str, Any]:
    """Return the StorageClass whose claims kwok provisions (see `stages`), the default one unless told."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": str(default).lower()},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": True,
    }
