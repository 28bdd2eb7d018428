"""How each group of a replica across pods is doing: its pods ready, and which rank is missing and why.

A LeaderWorkerSet labels every pod of a group with the group's index and its own (the leader is worker
0). Worker `w` of a group runs ranks `w x gpusPerPod` to `(w + 1) x gpusPerPod - 1`, so a pod that is not
ready is said with the ranks the world lacks: not created yet, not schedulable, crash-looping, on a node
that stopped reporting (named), stopping, or starting. A replica of one pod has no groups to judge
(`REPLICA_GROUPS`, by the replica's shape). Pure: imports the api models, the facts and the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from mmd_operator.api.v1alpha1 import Parallelism, ReplicaShape
from mmd_operator.facts import PodFacts
from mmd_operator.vocabulary import labels


@dataclass(frozen=True)
class GroupState:
    """One group: its pods ready of its size, and a few words on each pod that is not."""

    index: int
    size: int
    ready: int
    missing: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        """Every pod of the group is ready: its world serves."""
        return self.ready == self.size

    def describe(self) -> str:
        """`group 0: 1 of 2 pods ready; worker 1 (ranks 8-15) ...`."""
        said = f"group {self.index}: {self.ready} of {self.size} pods ready"
        return "; ".join([said, *self.missing])


def _index(pod: PodFacts, key: str) -> int | None:
    value = pod.meta.label(key)
    return int(value) if value is not None and value.isdigit() else None


def _who(worker: int, gpus_per_pod: int) -> str:
    first = worker * gpus_per_pod
    ranks = f"rank {first}" if gpus_per_pod == 1 else f"ranks {first}-{first + gpus_per_pod - 1}"
    return f"{'leader' if worker == 0 else f'worker {worker}'} ({ranks})"


def _why(pod: PodFacts | None) -> str:
    if pod is None:
        return "no pod yet"
    if pod.node_lost:
        # Its deletion waits for the node: the place of the rank is what the user must look after.
        lost = f"pod {pod.meta.name} is on node {pod.node}, which stopped reporting"
        return f"{lost}; it goes once the node returns or is deleted" if pod.meta.deleting else lost
    if pod.meta.deleting:
        return f"pod {pod.meta.name} is stopping: the group is recreated whole"
    if pod.unschedulable:
        return f"pod {pod.meta.name} cannot be scheduled"
    if pod.crash_loop:
        return f"pod {pod.meta.name} keeps failing: {pod.crash_loop}"
    return f"pod {pod.meta.name} is starting"


def group_states(
    pods: Iterable[PodFacts], *, size: int, gpus_per_pod: int, wanted: int
) -> tuple[GroupState, ...]:
    """Every group of `size` pods `pods` make up, and the `wanted` ones that have none yet, by index."""
    members: dict[int, dict[int, PodFacts]] = {index: {} for index in range(wanted)}
    for pod in pods:
        group, worker = _index(pod, labels.GROUP_INDEX), _index(pod, labels.WORKER_INDEX)
        if group is None or worker is None:
            continue
        held = members.setdefault(group, {}).get(worker)
        # A pod that is leaving gives way to its successor.
        if held is None or held.meta.deleting:
            members[group][worker] = pod
    states = []
    for index, workers in sorted(members.items()):
        ready = sum(1 for pod in workers.values() if pod.ready and not pod.meta.deleting)
        missing = tuple(
            f"{_who(worker, gpus_per_pod)}: {_why(workers.get(worker))}"
            for worker in range(size)
            if (member := workers.get(worker)) is None or not member.ready or member.meta.deleting
        )
        states.append(GroupState(index=index, size=size, ready=ready, missing=missing))
    return tuple(states)


def _groups(pods: Iterable[PodFacts], parallelism: Parallelism, wanted: int) -> tuple[GroupState, ...]:
    return group_states(
        pods, size=parallelism.pods_per_replica, gpus_per_pod=parallelism.gpus_per_pod, wanted=wanted
    )


def _no_groups(_pods: Iterable[PodFacts], _parallelism: Parallelism, _wanted: int) -> tuple[GroupState, ...]:
    return ()


# How the `wanted` replicas of each shape are judged one by one, from the serving pods.
REPLICA_GROUPS: Mapping[
    ReplicaShape, Callable[[Iterable[PodFacts], Parallelism, int], tuple[GroupState, ...]]
] = MappingProxyType({ReplicaShape.ONE_POD: _no_groups, ReplicaShape.GROUP: _groups})
