"""The objects every local cluster starts with: fake GPU nodes and the local StorageClass.

Nodes are created with their status (the API server keeps status on Node create), so the scheduler
sees GPU capacity from the start; kwok's node-initialize stage keeps that capacity and adds the
Ready condition. Labels follow NVIDIA GPU feature discovery (`nvidia.com/gpu.product`, ...), so the
operator's node selection can be tested as it would run on a real GPU cluster. A pool's nodes share one
GPU model unless `NodePool.gpu_models` names one per node; the real nodes' device plugin double
(`fakegpu`) gives their containers the identity of the same model.

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
    """One GPU model: its name as nvidia-smi prints it, and what GPU feature discovery reports of it."""

    name: str
    memory_mib: int
    family: str
    compute_major: int
    compute_minor: int

    @property
    def product(self) -> str:
        """`nvidia.com/gpu.product`: GPU feature discovery writes the name with dashes for spaces."""
        return self.name.replace(" ", "-")

    @property
    def compute_capability(self) -> str:
        """`<major>.<minor>`, as nvidia-smi's `compute_cap` prints it."""
        return f"{self.compute_major}.{self.compute_minor}"

    @property
    def architecture(self) -> str:
        """The architecture's name as NVIDIA's drivers report it (Ampere, Hopper, Ada Lovelace)."""
        return self.family.replace("-", " ").title()


GPU_MODELS = {
    "a100-80gb": GpuModel("NVIDIA A100-SXM4-80GB", 81920, "ampere", 8, 0),
    "h100-80gb": GpuModel("NVIDIA H100 80GB HBM3", 81559, "hopper", 9, 0),
    "l40s": GpuModel("NVIDIA L40S", 46068, "ada-lovelace", 8, 9),
}


@dataclass(frozen=True)
class NodePool:
    """A set of fake GPU nodes, alike but for their GPU model when `gpu_models` names one per node."""

    count: int = 4
    gpus_per_node: int = 8
    gpu_model: str = "a100-80gb"
    cpu: str = "96"
    memory: str = "1Ti"
    pods: str = "110"
    name_prefix: str = "gpu-node"
    # One GPU_MODELS key per node, in the nodes' order; empty: every node has `gpu_model`.
    gpu_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse per-node models that do not match the nodes; take a list (read back from JSON)."""
        object.__setattr__(self, "gpu_models", tuple(self.gpu_models))
        if self.gpu_models and len(self.gpu_models) != self.count:
            raise ValueError(
                f"gpu_models names {len(self.gpu_models)} model(s) for {self.count} node(s): one per node"
            )
        unknown = sorted(set(self.gpu_models) - set(GPU_MODELS))
        if unknown:
            raise ValueError(f"unknown GPU model(s) {', '.join(unknown)}; known: {', '.join(GPU_MODELS)}")

    def node_names(self) -> list[str]:
        """Return the names of the nodes in the pool."""
        return [f"{self.name_prefix}-{index}" for index in range(self.count)]

    def model_key(self, ordinal: int) -> str:
        """The GPU_MODELS key of node `ordinal` (0-based, in `node_names` order)."""
        return self.gpu_models[ordinal] if self.gpu_models else self.gpu_model

    def model_of(self, ordinal: int) -> GpuModel:
        """The GPU model of node `ordinal`."""
        return GPU_MODELS[self.model_key(ordinal)]


def gpu_labels(pool: NodePool, ordinal: int = 0) -> dict[str, str]:
    """The labels NVIDIA's GPU feature discovery puts on node `ordinal` of `pool` (and topology labels)."""
    model = pool.model_of(ordinal)
    return {
        "node.kubernetes.io/instance-type": f"fake-{pool.gpus_per_node}x{pool.model_key(ordinal)}",
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


def gpu_node(name: str, pool: NodePool, ordinal: int = 0) -> dict[str, Any]:
    """Return the manifest (with status) of fake GPU node `ordinal` of `pool`, managed by kwok."""
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
        **gpu_labels(pool, ordinal),
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
