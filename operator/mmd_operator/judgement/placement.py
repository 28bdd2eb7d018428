"""Where a GPU pod may run, and, when it cannot, what keeps it off, said in the spec's fields and numbers.

`match` is the one matching rule, used by the operator (to explain a pod the scheduler cannot place) and
by `mmctl validate --cluster` (to check before anything runs). It follows the scheduler's own filters
for nodes: the pod's nodeSelector, its required node affinity, its tolerations against the nodes'
NoSchedule and NoExecute taints, and the nodes' allocatable nvidia.com/gpu, memory and CPU against what
the pod requests. What it does not judge (pod affinity, topology spread, other resources, what other pods
hold) the scheduler's own words, which every operator message quotes after ours, still say. `obstacle`
names the first thing that keeps the pods off, and `unschedulable` writes the condition message and the
one sentence for Ready.

Pure: imports the api models and quantities, the facts and the GPU resource name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from types import MappingProxyType
from typing import Literal

from mmd_operator.api import quantities
from mmd_operator.api.v1alpha1 import GPU_RESOURCE, MultimodalDeploymentSpec, ReplicaShape
from mmd_operator.facts import NodeFacts, NodeRequirement, Nodes, PodFacts, PodPlacement, Taint, Toleration

INSUFFICIENT_GPUS = "InsufficientGPUs"
INSUFFICIENT_MEMORY = "InsufficientMemory"
INSUFFICIENT_CPU = "InsufficientCPU"
UNSCHEDULABLE = "Unschedulable"
# Nodes a message names one by one before it counts the rest.
LISTED_NODES = 4
# Values of a label that a message lists before it counts the rest.
LISTED_VALUES = 4


def scheduling_reason(message: str) -> str:
    """InsufficientGPUs, InsufficientMemory or InsufficientCPU when the scheduler says so, else Unschedulable.

    The first of them in that order: a pod short of GPUs is short of the scarcest.
    """
    for resource, reason in (
        (GPU_RESOURCE, INSUFFICIENT_GPUS),
        ("memory", INSUFFICIENT_MEMORY),
        ("cpu", INSUFFICIENT_CPU),
    ):
        if f"Insufficient {resource}" in message:
            return reason
    return UNSCHEDULABLE


@dataclass(frozen=True)
class ShapeWords:
    """How the judgement's messages speak of one replica shape's pods."""

    # The spec field that says how many GPUs one pod takes.
    gpus_field: str
    # A replica's pods, after the count of replicas in the sum (`{size}`: the pods of one replica).
    replica: str
    # The room the nodes have for the pods (`{room}` pods of `{gpus}` GPUs, `{fits}` of the `{replicas}`
    # replicas of `{size}` pods, `{pods}` in all).
    room: str
    # The one replica a surge adds.
    surge: str


# Each replica shape's words.
SHAPE_WORDS: Mapping[ReplicaShape, ShapeWords] = MappingProxyType(
    {
        ReplicaShape.ONE_POD: ShapeWords(
            gpus_field="spec.engine.tensorParallelSize",
            replica="",
            room="room for {room} of the {pods} pods",
            surge="1 surge pod",
        ),
        ReplicaShape.GROUP: ShapeWords(
            gpus_field="spec.serving.gpusPerPod",
            replica=" x {size} pods",
            room="room for {room} pods of {gpus} GPUs, {fits} of the {replicas} replicas of {size} pods",
            surge="1 surge group",
        ),
    }
)


@dataclass(frozen=True)
class GpuDemand:
    """What the spec asks of the scheduler for one kind of pod, and the fields that say it."""

    role: Literal["build", "serving"]
    # Replicas: pods, or groups of `pods_per_replica` pods.
    replicas: int
    gpus_per_pod: int
    # The spec field that says how many replicas (the autoscaler's maximum, with autoscaling).
    pods_field: str = "spec.serving.replicas"
    pods_per_replica: int = 1
    # The spec field that says how many GPUs one pod takes.
    gpus_field: str = "spec.engine.tensorParallelSize"
    # One pod or a group of `pods_per_replica` pods: how the messages speak of a replica.
    shape: ReplicaShape = ReplicaShape.ONE_POD

    @property
    def pods(self) -> int:
        """Pods of every replica."""
        return self.replicas * self.pods_per_replica

    @property
    def pod_field(self) -> str:
        """The spec section whose selector, affinity and tolerations the pods carry."""
        return f"spec.{self.role}.pod"

    @property
    def condition(self) -> str:
        """The condition that carries the details of this kind of pod."""
        return "EngineReady" if self.role == "build" else "Available"

    @property
    def total(self) -> int:
        """GPUs for every pod."""
        return self.pods * self.gpus_per_pod

    def arithmetic(self) -> str:
        """The spec's side of the sum, naming the fields."""
        if self.role == "build":
            size = self.gpus_per_pod
            return f"{self.gpus_field} {size} = {size} {GPU_RESOURCE} for one build pod"
        group = SHAPE_WORDS[self.shape].replica.format(size=self.pods_per_replica)
        return (
            f"{self.pods_field} {self.replicas}{group} x {self.gpus_field} {self.gpus_per_pod} = "
            f"{self.total} {GPU_RESOURCE}"
        )

    def replicas_room(self, pods_room: int) -> int:
        """How many replicas `pods_room` pods of this demand make."""
        return pods_room // self.pods_per_replica


def build_demand(spec: MultimodalDeploymentSpec) -> GpuDemand:
    """The one build pod of `spec`: a world across pods is built in one pod of one serving pod's GPUs."""
    parallelism = spec.parallelism
    return GpuDemand(
        "build", 1, parallelism.gpus_per_pod, gpus_field=SHAPE_WORDS[parallelism.shape].gpus_field
    )


def serving_demand(spec: MultimodalDeploymentSpec) -> GpuDemand:
    """The serving pods of `spec`: with autoscaling, as many replicas as the autoscaler may ask for."""
    autoscaling = spec.serving.autoscaling
    parallelism = spec.parallelism
    replicas, field = spec.serving.replicas, "spec.serving.replicas"
    if autoscaling is not None:
        replicas, field = autoscaling.max_replicas, "spec.serving.autoscaling.maxReplicas"
    return GpuDemand(
        "serving",
        replicas,
        parallelism.gpus_per_pod,
        field,
        pods_per_replica=parallelism.pods_per_replica,
        gpus_field=SHAPE_WORDS[parallelism.shape].gpus_field,
        shape=parallelism.shape,
    )


# -- the matching rule -----------------------------------------------------------------------------


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Whether `toleration` tolerates `taint` (the scheduler's rule: an empty key or effect matches any)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    return toleration.operator == "Exists" or toleration.value == taint.value


def untolerated(pod: PodPlacement, node: NodeFacts) -> tuple[Taint, ...]:
    """The taints of `node` that keep `pod` off it."""
    return tuple(t for t in node.taints if not any(tolerates(tol, t) for tol in pod.tolerations))


def _requirement_met(requirement: NodeRequirement, node: NodeFacts) -> bool:
    labels = {"metadata.name": node.name} if requirement.field else dict(node.labels)
    value = labels.get(requirement.key)
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(requirement.values) == 1:
        try:
            have, bound = int(value), int(requirement.values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _selector_met(pod: PodPlacement, node: NodeFacts) -> bool:
    labels = dict(node.labels)
    return all(labels.get(key) == value for key, value in pod.node_selector)


def _pods_on(node: NodeFacts, pod: PodPlacement, gpus_per_pod: int) -> int:
    """How many pods like `pod` (of `gpus_per_pod` GPUs) the node's allocatable GPUs, memory and CPU hold."""
    counts = [node.gpus // gpus_per_pod if gpus_per_pod else 0]
    for have, need in ((node.memory_bytes, pod.memory_bytes), (node.cpu_millis, pod.cpu_millis)):
        if have is not None and need:
            counts.append(have // need)
    return min(counts)


def _has_memory(pod: PodPlacement, node: NodeFacts) -> bool:
    return node.memory_bytes is None or node.memory_bytes >= pod.memory_bytes


def _has_cpu(pod: PodPlacement, node: NodeFacts) -> bool:
    return node.cpu_millis is None or node.cpu_millis >= pod.cpu_millis


def _affinity_met(pod: PodPlacement, node: NodeFacts) -> bool:
    if not pod.affinity_terms:
        return True
    # Any term, all of its requirements; a term without requirements matches no node.
    return any(term and all(_requirement_met(r, node) for r in term) for term in pod.affinity_terms)


@dataclass(frozen=True)
class NodeMatch:
    """Which of the nodes with GPUs a pod may run on, filter by filter."""

    pod: PodPlacement
    total_nodes: int
    # Every node with allocatable GPUs.
    with_gpus: tuple[NodeFacts, ...]
    # ... that the pod's nodeSelector selects,
    by_selector: tuple[NodeFacts, ...]
    # ... and its required node affinity too,
    selected: tuple[NodeFacts, ...]
    # ... whose every taint the pod tolerates: "the nodes matching the pod's selector and tolerations",
    matching: tuple[NodeFacts, ...]
    # ... with allocatable GPUs for one pod,
    fitting: tuple[NodeFacts, ...]
    # ... and allocatable memory and CPU for it.
    roomy: tuple[NodeFacts, ...] = ()

    @property
    def offered(self) -> int:
        """Allocatable GPUs of the matching nodes."""
        return sum(node.gpus for node in self.matching)

    def room(self, gpus_per_pod: int) -> int:
        """How many pods of `gpus_per_pod` the matching nodes hold at the most (GPUs, memory and CPU)."""
        return sum(_pods_on(node, self.pod, gpus_per_pod) for node in self.matching)

    def gpu_room(self, gpus_per_pod: int) -> int:
        """How many pods of `gpus_per_pod` the matching nodes' GPUs alone hold."""
        return sum(node.gpus // gpus_per_pod for node in self.matching) if gpus_per_pod else 0


def match(pod: PodPlacement, nodes: Nodes) -> NodeMatch:
    """The nodes `pod` may run on: the one matching rule of the operator and of the preflight."""
    with_gpus = tuple(sorted((node for node in nodes.with_gpus if node.gpus > 0), key=lambda n: n.name))
    by_selector = tuple(node for node in with_gpus if _selector_met(pod, node))
    selected = tuple(node for node in by_selector if _affinity_met(pod, node))
    matching = tuple(node for node in selected if not untolerated(pod, node))
    fitting = tuple(node for node in matching if node.gpus >= pod.gpus)
    roomy = tuple(node for node in fitting if _has_memory(pod, node) and _has_cpu(pod, node))
    return NodeMatch(pod, nodes.total, with_gpus, by_selector, selected, matching, fitting, roomy)


# -- what keeps the pods off -----------------------------------------------------------------------


class ObstacleKind(StrEnum):
    """What keeps a pod off every node, in the order the filters run."""

    NO_GPU_NODES = "no node has GPUs"
    SELECTOR = "nodeSelector"
    AFFINITY = "node affinity"
    TAINTS = "taints"
    POD_TOO_LARGE = "no node holds one pod"
    MEMORY = "no node with the GPUs has the memory for one pod"
    CPU = "no node with the GPUs has the CPU for one pod"
    TOO_FEW = "too few GPUs for every pod"


@dataclass(frozen=True)
class Obstacle:
    """What keeps pods off, the field to change, and how."""

    kind: ObstacleKind
    # The spec field to change.
    field: str
    # What is wrong, with the values: a clause.
    what: str
    # What to do: a clause.
    fix: str

    @property
    def gpus(self) -> bool:
        """A shortage of GPUs (rather than nodes the pod may not use)."""
        return self.kind in (ObstacleKind.NO_GPU_NODES, ObstacleKind.POD_TOO_LARGE, ObstacleKind.TOO_FEW)


def _listed(items: Sequence[str], limit: int) -> str:
    shown = ", ".join(items[:limit])
    return f"{shown} and {len(items) - limit} more" if len(items) > limit else shown


def nodes_offered(found: NodeMatch) -> str:
    """The nodes' side of the sum: what the nodes matching the pod's selector and tolerations offer."""
    listed = _listed([f"{node.name} {node.gpus}" for node in found.matching], LISTED_NODES)
    return f"nodes matching the pod's selector and tolerations offer {found.offered} ({listed})"


def _selector_obstacle(found: NodeMatch, demand: GpuDemand) -> Obstacle:
    field = f"{demand.pod_field}.nodeSelector"
    failing = []
    for key, value in found.pod.node_selector:
        carried = sorted({dict(node.labels)[key] for node in found.with_gpus if key in dict(node.labels)})
        if value in carried:
            continue
        them = f"they carry {_listed(carried, LISTED_VALUES)}" if carried else f"none carries {key}"
        failing.append(f'{field}["{key}"]={value} matches no node with {GPU_RESOURCE} ({them})')
    if failing:
        return Obstacle(
            ObstacleKind.SELECTOR,
            field,
            "; ".join(failing),
            "set it to a value the nodes carry, or remove it",
        )
    pairs = ", ".join(f"{key}={value}" for key, value in found.pod.node_selector)
    return Obstacle(
        ObstacleKind.SELECTOR,
        field,
        f"{field} ({pairs}) matches no node with {GPU_RESOURCE}: no node carries all of these labels",
        "drop the labels no node carries together with the others",
    )


def obstacle(found: NodeMatch, demand: GpuDemand) -> Obstacle | None:
    """The first thing that keeps the pods of `demand` off the nodes, or None when the nodes hold them all."""
    pod_field = demand.pod_field
    if not found.with_gpus:
        return Obstacle(
            ObstacleKind.NO_GPU_NODES,
            pod_field,
            f"none of the {found.total_nodes} nodes has allocatable {GPU_RESOURCE}",
            f"add GPU nodes (NVIDIA's device plugin makes them report {GPU_RESOURCE})",
        )
    if not found.by_selector:
        return _selector_obstacle(found, demand)
    if not found.selected:
        field = f"{pod_field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        among = "that its nodeSelector selects" if found.pod.node_selector else f"with {GPU_RESOURCE}"
        return Obstacle(
            ObstacleKind.AFFINITY,
            field,
            f"{field} matches none of the {len(found.by_selector)} nodes {among}",
            "loosen its terms",
        )
    if not found.matching:
        taints = sorted({str(t) for node in found.selected for t in untolerated(found.pod, node)})
        keys = sorted({t.key for node in found.selected for t in untolerated(found.pod, node)})
        field = f"{pod_field}.tolerations"
        one = len(found.selected) == 1
        nodes = f"the {len(found.selected)} node{'' if one else 's'} with {GPU_RESOURCE}"
        if found.pod.node_selector or found.pod.affinity_terms:
            nodes += f" that {pod_field} selects"
        carry = (
            "carries a taint" if one and len(taints) == 1 else "carry taints" if not one else "carries taints"
        )
        return Obstacle(
            ObstacleKind.TAINTS,
            field,
            f"{nodes} {carry} the pod does not tolerate: {_listed(taints, LISTED_VALUES)}",
            f"add a toleration for {_listed(keys, LISTED_VALUES)} to {field}",
        )
    if not found.fitting:
        most = max(found.matching, key=lambda node: (node.gpus, node.name))
        spread = (
            ", set spec.serving.gpusPerPod to spread a replica over pods" if demand.role == "serving" else ""
        )
        return Obstacle(
            ObstacleKind.POD_TOO_LARGE,
            demand.gpus_field,
            f"nodes matching the pod's selector and tolerations offer at most {most.gpus} on one node "
            f"({most.name})",
            f"lower {demand.gpus_field}{spread}, or let {pod_field} reach nodes with more GPUs",
        )
    if not found.roomy:
        return _memory_or_cpu_obstacle(found, demand)
    room = found.room(demand.gpus_per_pod)
    if room < demand.pods:
        what = SHAPE_WORDS[demand.shape].room.format(
            room=room,
            gpus=demand.gpus_per_pod,
            fits=demand.replicas_room(room),
            replicas=demand.replicas,
            size=demand.pods_per_replica,
            pods=demand.pods,
        )
        if room < found.gpu_room(demand.gpus_per_pod):
            what += " (their memory or CPU holds fewer pods than their GPUs)"
        return Obstacle(
            ObstacleKind.TOO_FEW,
            demand.pods_field,
            f"{nodes_offered(found)}: {what}",
            f"lower {demand.pods_field}, or add GPU nodes",
        )
    return None


def _memory_or_cpu_obstacle(found: NodeMatch, demand: GpuDemand) -> Obstacle:
    """No node with GPUs enough has the memory (else the CPU) the pod requests."""
    pod, fitting = found.pod, found.fitting
    memory = not any(_has_memory(pod, node) for node in fitting)
    kind, name, asked = (
        (ObstacleKind.MEMORY, "memory", quantities.memory(pod.memory_bytes))
        if memory
        else (ObstacleKind.CPU, "cpu", quantities.cpu(Fraction(pod.cpu_millis, 1000)))
    )
    most = max(fitting, key=lambda node: ((node.memory_bytes if memory else node.cpu_millis) or 0, node.name))
    has = (
        quantities.memory(most.memory_bytes or 0)
        if memory
        else quantities.cpu(Fraction(most.cpu_millis or 0, 1000))
    )
    field = f"{demand.pod_field}.resources.requests.{name}"
    held = "the pod is OOMKilled if it then holds more than its limit" if memory else "it then gets less CPU"
    return Obstacle(
        kind,
        field,
        f"the pod requests {asked} of {name} (status.podResources; {field} sets it), but the nodes matching "
        f"its selector and tolerations with {pod.gpus} {GPU_RESOURCE} offer at most {has} allocatable on one "
        f"node ({most.name})",
        f"lower {field} ({held}), or let {demand.pod_field} reach nodes with more {name}",
    )


def explain(blocked: Obstacle, demand: GpuDemand) -> str:
    """What keeps the pods off and what to do, in one clause (the Ready sentence and the preflight)."""
    if blocked.gpus:
        return f"{demand.arithmetic()}, but {blocked.what}; {blocked.fix}"
    return f"{blocked.what}; {blocked.fix}"


# -- the operator's message ------------------------------------------------------------------------


@dataclass(frozen=True)
class Unplaced:
    """A pod the scheduler cannot place, as the status says it."""

    reason: str
    # The condition's message: our figures, then the scheduler's own words.
    message: str
    # One sentence for Ready: what is wrong and what to do.
    summary: str


def _requested(nodes: Nodes, found: NodeMatch) -> int:
    matching = {node.name for node in found.matching}
    return sum(gpus for name, gpus in nodes.requested if name in matching)


def _short_of(reason: str, pod: PodPlacement, demand: GpuDemand) -> str | None:
    """What the pod requests of the memory or CPU the scheduler finds too little of, with the field."""
    if reason == INSUFFICIENT_MEMORY:
        asked, name = quantities.memory(pod.memory_bytes), "memory"
    elif reason == INSUFFICIENT_CPU:
        asked, name = quantities.cpu(Fraction(pod.cpu_millis, 1000)), "cpu"
    else:
        return None
    field = f"{demand.pod_field}.resources.requests.{name}"
    return f"the pod requests {asked} of {name} (status.podResources; {field} sets it)"


def unschedulable(pod: PodFacts, demand: GpuDemand, nodes: Nodes | None) -> Unplaced:
    """What to say of `pod`, which the scheduler cannot place, given the nodes (None: not known)."""
    words = pod.unschedulable or "Unschedulable"
    reason = scheduling_reason(words)
    who = f"{'build pod' if demand.role == 'build' else 'pod'} {pod.meta.name}"
    quoted = f"(the {demand.condition} condition quotes the scheduler)"
    figures = f"(the {demand.condition} condition has the figures and the scheduler's words)"
    placement = pod.placement or PodPlacement(gpus=pod.gpus or demand.gpus_per_pod)
    short = _short_of(reason, placement, demand)
    if nodes is None:
        message = f"{who} cannot be scheduled: {demand.arithmetic()}"
        if reason == INSUFFICIENT_GPUS:
            lower = "spec.engine.tensorParallelSize" + (f" or {demand.pods_field}" if demand.pods > 1 else "")
            summary = (
                f"{demand.arithmetic()} and the scheduler finds too few free for {who}: free or add GPUs, "
                f"or lower {lower} {quoted}."
            )
        elif short is not None:
            summary = f"{short} and the scheduler finds too little free for {who} {quoted}."
        else:
            summary = (
                f"the scheduler cannot place {who}: change what it names in {demand.pod_field} {quoted}."
            )
        return Unplaced(reason, f"{message}. Scheduler: {words}", summary)
    found = match(placement, nodes)
    blocked = obstacle(found, demand)
    requested = _requested(nodes, found)
    held = f"; this operator's pods already request {requested} of these GPUs" if requested else ""
    if blocked is None:
        room = f", room for {found.room(demand.gpus_per_pod)} pods" if demand.role == "serving" else ""
        message = f"{who} cannot be scheduled: {demand.arithmetic()}; {nodes_offered(found)}{room}{held}"
        if reason == INSUFFICIENT_GPUS:
            summary = (
                f"{demand.arithmetic()} and the nodes {who} may use have room for it, but the scheduler "
                f"finds too few free: free GPUs or add nodes {figures}."
            )
        elif short is not None:
            summary = (
                f"{short}; the nodes {who} may use have that much allocatable, but the scheduler finds too "
                f"little free beside the pods they run: free some or add nodes {figures}."
            )
        else:
            summary = (
                f"the scheduler cannot place {who} for a reason other than GPUs, node selectors and taints: "
                f"see the {demand.condition} condition, which quotes it."
            )
    else:
        message = f"{who} cannot be scheduled: {demand.arithmetic()}; {blocked.what}"
        message += held if blocked.gpus else ""
        summary = f"{explain(blocked, demand)} {figures}."
    return Unplaced(reason, f"{message}. Scheduler: {words}", summary)
