"""Common kinds of GPU, by the product name NVIDIA's GPU feature discovery gives them: capability and memory.

What a node of each would carry as `nvidia.com/gpu.product`, `nvidia.com/gpu.compute.major` and `.minor`,
and `nvidia.com/gpu.memory` (MiB), so that `mmctl validate --gpu` can weigh a resource against a kind
without a cluster. The operator itself reads the labels of the cluster's nodes. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class GpuProduct:
    """One kind of GPU as feature discovery labels its nodes."""

    product: str
    compute_capability: str
    memory_mib: int


GPU_PRODUCTS = MappingProxyType(
    {
        gpu.product: gpu
        for gpu in (
            GpuProduct("Tesla-T4", "7.5", 15360),
            GpuProduct("NVIDIA-A10G", "8.6", 23028),
            GpuProduct("NVIDIA-L4", "8.9", 23034),
            GpuProduct("NVIDIA-L40S", "8.9", 46068),
            GpuProduct("NVIDIA-A100-SXM4-40GB", "8.0", 40960),
            GpuProduct("NVIDIA-A100-SXM4-80GB", "8.0", 81920),
            GpuProduct("NVIDIA-H100-80GB-HBM3", "9.0", 81559),
            GpuProduct("NVIDIA-H200", "9.0", 143771),
        )
    }
)
