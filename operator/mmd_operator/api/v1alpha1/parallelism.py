"""`parallelism`: the world of one replica, its pods, and its shape, decided here once.

The world is tensor x pipeline ranks (one GPU each); `serving.gpusPerPod` says how many of them one pod
holds, by default the whole world up to one node's GPUs (`NODE_WORLD`). That default is written once, as
`default_gpus_per_pod` and as its CEL twin `DEFAULT_GPUS_PER_POD` (`GPUS_PER_POD` with the field's value),
from the same constant; the CEL rules (`rules`) take them and `WORLD` from here, the models take
`Parallelism.of`.

The shape of a replica (`ReplicaShape`) follows: one pod, or a group of pods. `Parallelism.shape` is the
one place that decides it; every layer that differs by shape looks its part up by `shape` in a small
table of its own (docs/architecture.md, "A replica across pods"). Pure: imports `mmd_operator.knowledge`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mmd_operator.knowledge import NODE_WORLD


class ReplicaShape(StrEnum):
    """How one replica's world is laid out on pods."""

    # One pod holds the whole world: a Deployment's pod.
    ONE_POD = "one-pod"
    # The world spans pods: a LeaderWorkerSet group, whose leader runs it over its workers.
    GROUP = "group"


def default_gpus_per_pod(world: int) -> int:
    """`serving.gpusPerPod` when the spec leaves it out: the world, up to one node's GPUs."""
    return min(world, NODE_WORLD)


# The same, in CEL over the spec (`self`): the world, the default, and the GPUs of one pod with the default
# filled in.
WORLD = "(self.engine.tensorParallelSize * self.engine.pipelineParallelSize)"
DEFAULT_GPUS_PER_POD = f"({WORLD} < {NODE_WORLD} ? {WORLD} : {NODE_WORLD})"
GPUS_PER_POD = f"(has(self.serving.gpusPerPod) ? self.serving.gpusPerPod : {DEFAULT_GPUS_PER_POD})"


@dataclass(frozen=True)
class Parallelism:
    """The parallel world of one replica and how its ranks are spread over pods."""

    tensor: int
    pipeline: int
    gpus_per_pod: int

    @classmethod
    def of(cls, tensor: int, pipeline: int, gpus_per_pod: int | None) -> Parallelism:
        """The world of `tensor` x `pipeline` ranks, `gpus_per_pod` to a pod (None: the default)."""
        return cls(tensor, pipeline, gpus_per_pod or default_gpus_per_pod(tensor * pipeline))

    @property
    def world(self) -> int:
        """MPI ranks (and GPUs) of one replica."""
        return self.tensor * self.pipeline

    @property
    def pods_per_replica(self) -> int:
        """Pods of one replica: one leader, and the rest its workers."""
        return self.world // self.gpus_per_pod

    @property
    def shape(self) -> ReplicaShape:
        """One pod, or a group of pods (a LeaderWorkerSet group, not a Deployment's pod)."""
        return ReplicaShape.GROUP if self.pods_per_replica > 1 else ReplicaShape.ONE_POD

    def describe(self) -> str:
        """How the world is made, in words: `16 ranks (tensor 16) in 2 pods of 8 GPUs`."""
        made = f"tensor {self.tensor}" + (f" x pipeline {self.pipeline}" if self.pipeline > 1 else "")
        pods = self.pods_per_replica
        return (
            f"{self.world} ranks ({made}) in {pods} pod{'s' if pods != 1 else ''} of {self.gpus_per_pod} GPUs"
        )
