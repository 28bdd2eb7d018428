"""The kinds of GPU a resource's pods may land on, read from the labels GPU feature discovery puts on nodes.

A TensorRT engine belongs to the kind of GPU it was built on: TensorRT refuses to deserialize an engine
built for another compute capability ("The engine plan file is generated on an incompatible device,
expecting compute X got compute Y") and, by default (`HardwareCompatibilityLevel.kNONE`, which
`trtllm-build` keeps), promises an engine only to the type of device it was built on; across device
models of one capability it warns that performance may suffer or errors occur. So a kind is a GPU product
as NVIDIA's GPU feature discovery names it (`nvidia.com/gpu.product`), with its compute capability
(`nvidia.com/gpu.compute.major` and `.minor`) and memory (`nvidia.com/gpu.memory`, MiB) beside it.

The kinds in reach of a pod are those of the nodes its selector, required node affinity and tolerations
admit (`placement.match`), whatever their free GPUs: a full node is still where the pod may land later.
Nodes with GPUs but without the product label (a device plugin without feature discovery) are counted
apart, since nothing says what they hold.

Pure: imports the facts (`GpuKind` reads a node's labels) and placement's matching rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmd_operator.facts import GPU_MEMORY_LABEL, GpuKind, NodeFacts, Nodes, PodPlacement
from mmd_operator.judgement.placement import match


def memory_mib(node: NodeFacts) -> int | None:
    """The memory of one of `node`'s GPUs in MiB, when its labels say."""
    value = dict(node.labels).get(GPU_MEMORY_LABEL, "")
    return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class KindsInReach:
    """The GPU kinds a pod may land on, each with its nodes, and the GPU nodes in reach of no known kind."""

    nodes_by_kind: tuple[tuple[GpuKind, tuple[str, ...]], ...] = ()
    unlabelled: tuple[str, ...] = ()

    @property
    def kinds(self) -> tuple[GpuKind, ...]:
        """The kinds, in order."""
        return tuple(kind for kind, _ in self.nodes_by_kind)

    def nodes_of(self, kind: GpuKind) -> tuple[str, ...]:
        """The names of the nodes of `kind` in reach."""
        return dict(self.nodes_by_kind).get(kind, ())


def kinds_in_reach(pod: PodPlacement, nodes: Nodes) -> KindsInReach:
    """The kinds of the nodes `pod`'s selector, node affinity and tolerations admit."""
    by_kind: dict[GpuKind, list[str]] = {}
    unlabelled: list[str] = []
    for node in match(pod, nodes).matching:
        kind = GpuKind.of_labels(dict(node.labels))
        if kind is None:
            unlabelled.append(node.name)
        else:
            by_kind.setdefault(kind, []).append(node.name)
    return KindsInReach(
        tuple((kind, tuple(names)) for kind, names in sorted(by_kind.items())), tuple(unlabelled)
    )
