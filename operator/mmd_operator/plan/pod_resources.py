"""The CPU and memory of every pod the operator creates: derived from what runs in it, or the spec's.

Each runtime's planner says what runs in each kind of its pods as `Share`s: a process (or one instance of a
Python model) and the host memory it holds, and the memory-backed /dev/shm, whose pages the kernel charges
to the container that writes them. `Figures` adds them up: the processes with a margin (`MARGIN`), the
/dev/shm at its full size, rounded up to a whole GiB; the request is that figure and so is the memory
limit (a container that holds more than it asked for is the first the kubelet evicts under memory
pressure, and a ResourceQuota on `limits.memory` refuses a container without a limit). No CPU limit: the
CFS quota would throttle a server's scheduling loop and its tokenizers at a busy moment, and CPU a pod
does not use goes to others anyway.

`effective` lays a spec's `pod.resources` over the figures: a value the spec sets wins, a limit it sets
without the request lowers the request to it, a request it sets above the derived limit raises the
limit with it; other resources the spec names pass through. What a figure rests on (the checkpoint's
size, and where that comes from) is said in `basis`, which the status, `mmctl validate` and `mmctl
render` show. Which serving pods a replica has (one that serves; a group's leader and its workers) is
its shape's row of `SERVING_PODS`. Pure: imports the api models and the quantities.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Literal

from mmd_operator.api import quantities
from mmd_operator.api.v1alpha1 import (
    GPU_RESOURCE,
    MultimodalDeploymentSpec,
    Parallelism,
    ReplicaShape,
    ResourceRequirements,
)
from mmd_operator.api.v1alpha1.status import PodResources as PodResourcesStatus

MIB = quantities.MIB
# Added to what the processes are estimated to hold: the estimates are of what each loads, not measured.
MARGIN = Fraction(6, 5)
# The init container that copies the model repository (sh and cp of a few files) and such helpers.
HELPER_CPU_MILLIS, HELPER_MEMORY_MIB = 100, 256
# Bytes one parameter takes at 16 bits: how checkpoints are published (a type whose are not says so in
# its `HostMemory`), and what engines and the PyTorch backend hold them at.
BYTES_16_BITS = 2
# A size stated in a checkpoint's name (`7b`, `2.7B`), unless it is a mixture of experts' active share
# (`17B-16E`).
_SIZE_IN_NAME = re.compile(r"(?<![0-9A-Za-z.])([0-9]+(?:\.[0-9]+)?)[bB](?![0-9A-Za-z])(?!-[0-9]+[eE]\b)")

PodKind = Literal["Build", "Download", "Serving", "Leader", "Worker"]


@dataclass(frozen=True)
class Share:
    """One part of a pod's memory: `count` processes (or instances) of `what`, `mib` each."""

    what: str
    mib: int
    count: int = 1

    @property
    def total_mib(self) -> int:
        """What all of them hold."""
        return self.mib * self.count

    def describe(self) -> str:
        """`2 x preprocessing instance 1Gi`, or `its engine, read whole 13.2Gi` (to a tenth of a Gi)."""
        size = f"{self.mib // 1024}Gi" if self.mib % 1024 == 0 else f"{self.mib / 1024:.1f}Gi"
        return f"{self.count} x {self.what} {size}" if self.count > 1 else f"{self.what} {size}"


@dataclass(frozen=True)
class Figures:
    """What one kind of pod's main container is derived to need."""

    cpu_millis: int
    # The processes: estimates, with the margin on top.
    processes: tuple[Share, ...]
    # Memory-backed volumes the container writes: counted at their full size, no margin.
    volumes: tuple[Share, ...] = ()
    # What the sizes rest on: the checkpoint's size and where it comes from.
    rests_on: str = ""

    @property
    def memory_mib(self) -> int:
        """The request and the limit: the processes with the margin, the volumes, up to a whole GiB.

        A helper's fixed figure (no processes estimated) is taken as it is.
        """
        volumes = sum(share.total_mib for share in self.volumes)
        if not self.processes:
            return volumes
        whole = sum(share.total_mib for share in self.processes) * MARGIN + volumes
        return math.ceil(whole / 1024) * 1024

    def basis(self) -> str:
        """The figure in words: what makes it up, and what it rests on."""
        total = quantities.memory(self.memory_mib * MIB)
        rests = f"; {self.rests_on}" if self.rests_on else ""
        volumes = " + ".join(share.describe() for share in self.volumes)
        if not self.processes:
            return f"{total}: {volumes}{rests}"
        parts = " + ".join(share.describe() for share in self.processes)
        volumes = f" + {volumes}" if volumes else ""
        return f"{total}: ({parts}) x {float(MARGIN):g}{volumes}, up to a whole Gi{rests}"


def fixed(cpu_millis: int, memory_mib: int, what: str) -> Figures:
    """Figures of a small helper whose needs do not depend on the model (already whole)."""
    return Figures(cpu_millis, (), (Share(what, memory_mib),))


@dataclass(frozen=True)
class PodResources:
    """What one kind of pod's main container asks for: the spec's values over the derived figures."""

    pod: PodKind
    container: str
    requests: Mapping[str, str]
    limits: Mapping[str, str]
    from_spec: tuple[str, ...]
    figures: Figures
    # The GPUs it asks for (derived from the parallelism: never the spec's).
    gpus: int = 0

    def manifest(self) -> dict[str, Any]:
        """The container's `resources`, with its GPUs (requests equal limits for extended resources)."""
        limits = {**self.limits, **({GPU_RESOURCE: str(self.gpus)} if self.gpus else {})}
        return {"requests": dict(self.requests), "limits": limits}

    def status(self) -> PodResourcesStatus:
        """As the status names it."""
        derived = self.figures.basis()
        set_by_spec = f"; the spec sets {', '.join(self.from_spec)}" if self.from_spec else ""
        below = self._below_derived()
        return PodResourcesStatus(
            pod=self.pod,
            container=self.container,
            requests=dict(self.requests),
            limits=dict(self.limits),
            from_spec=list(self.from_spec),
            basis=f"derived {derived}{set_by_spec}{below}",
        )

    def _below_derived(self) -> str:
        limit = self.limits.get("memory")
        if limit is None or quantities.parse(limit) >= self.figures.memory_mib * MIB:
            return ""
        return (
            f"; the memory limit is below the derived {quantities.memory(self.figures.memory_mib * MIB)}: "
            "the container is OOMKilled if it holds more"
        )

    def describe(self) -> str:
        """One line: `serving pod (tritonserver): requests cpu 3500m, memory 28Gi; limits memory 28Gi`."""
        requests = ", ".join(f"{name} {value}" for name, value in sorted(self.requests.items()))
        limits = ", ".join(f"{name} {value}" for name, value in sorted(self.limits.items()))
        spec = f" ({', '.join(self.from_spec)} from the spec)" if self.from_spec else ""
        return f"{self.pod.lower()} pod ({self.container}): requests {requests}; limits {limits}{spec}"


def _quantity(value: str | int) -> Fraction:
    return quantities.parse(value)


def effective(
    figures: Figures, given: ResourceRequirements, pod: PodKind, container: str, gpus: int = 0
) -> PodResources:
    """The resources of `container` with `gpus` GPUs: the spec's `given` over the derived `figures`."""
    requests = {name: str(value) for name, value in given.requests.items()}
    limits = {name: str(value) for name, value in given.limits.items()}
    from_spec = tuple(
        path
        for path, values, name in (
            ("requests.cpu", requests, "cpu"),
            ("requests.memory", requests, "memory"),
            ("limits.memory", limits, "memory"),
        )
        if name in values
    )
    derived_cpu = Fraction(figures.cpu_millis, 1000)
    if "cpu" not in requests:
        cap = _quantity(limits["cpu"]) if "cpu" in limits else derived_cpu
        requests["cpu"] = quantities.cpu(min(derived_cpu, cap))
    derived_memory = figures.memory_mib * MIB
    if "memory" not in requests:
        cap = _quantity(limits["memory"]) if "memory" in limits else Fraction(derived_memory)
        requests["memory"] = quantities.memory(min(Fraction(derived_memory), cap))
    if "memory" not in limits:
        limits["memory"] = quantities.memory(max(Fraction(derived_memory), _quantity(requests["memory"])))
    return PodResources(pod, container, requests, limits, from_spec, figures, gpus)


@dataclass(frozen=True)
class PlannedResources:
    """The resources of every kind of pod one plan makes."""

    # The Job's pod (a build or a download); None when nothing is made.
    job: PodResources | None
    # A serving pod, or a group's leader.
    serving: PodResources
    # A group's worker, when a replica spans pods.
    worker: PodResources | None = None
    # An init container of the serving pods (the model repository's assembly), if the runtime has one.
    helper: PodResources | None = None

    def status(self) -> list[PodResourcesStatus]:
        """Each kind of pod, as the status names it."""
        return [pod.status() for pod in (self.job, self.serving, self.worker) if pod is not None]

    def lines(self) -> list[str]:
        """Each kind of pod in one line, for `mmctl`."""
        return [pod.describe() for pod in (self.job, self.serving, self.worker) if pod is not None]


@dataclass(frozen=True)
class ServingPods:
    """The serving pods of one replica shape, as the status names them."""

    # The pod that serves: a replica's only pod, or a group's leader.
    serving: PodKind
    # A group's other pods, which run ranks only (None: the shape has none).
    worker: PodKind | None


# Each replica shape's serving pods.
SERVING_PODS: Mapping[ReplicaShape, ServingPods] = MappingProxyType(
    {
        ReplicaShape.ONE_POD: ServingPods(serving="Serving", worker=None),
        ReplicaShape.GROUP: ServingPods(serving="Leader", worker="Worker"),
    }
)


def serving_pods(
    parallelism: Parallelism,
    given: ResourceRequirements,
    container: str,
    figures: Callable[[bool], Figures],
) -> tuple[PodResources, PodResources | None]:
    """The resources of the pod that serves and of a group's worker (None: the shape has no workers).

    `figures(serves)` derives the figures of the pod that serves (True) or of a worker (False); the
    spec's `given` lies over both.
    """
    pods, gpus = SERVING_PODS[parallelism.shape], parallelism.gpus_per_pod
    serving = effective(figures(True), given, pods.serving, container, gpus)
    if pods.worker is None:
        return serving, None
    return serving, effective(figures(False), given, pods.worker, container, gpus)


def helper_resources(container: str) -> PodResources:
    """The fixed resources of a small helper container (an init container)."""
    figures = fixed(HELPER_CPU_MILLIS, HELPER_MEMORY_MIB, f"{container} (sh and cp)")
    return effective(figures, ResourceRequirements(), "Serving", container)


# -- what the sizes rest on ------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """How many parameters the served checkpoint has, and how that is known (for the status)."""

    parameters_b: float
    known_by: str

    def mib(self, bytes_per_parameter: float, share: Fraction = Fraction(1)) -> int:
        """MiB its weights take at `bytes_per_parameter`, or `share` of them."""
        return math.ceil(Fraction(self.parameters_b) * 10**9 * Fraction(bytes_per_parameter) * share / MIB)


def size_in_name(name: str) -> float | None:
    """The size a checkpoint's name states, in billions (`llava-1.5-13b-hf`: 13), if it states one."""
    found = _SIZE_IN_NAME.findall(name.rsplit("/", 1)[-1])
    return float(found[-1]) if found else None


def checkpoint_of(
    spec: MultimodalDeploymentSpec,
    *,
    reference: str,
    reference_b: float,
    known: Mapping[str, float | None] | None = None,
) -> Checkpoint:
    """The size of the checkpoint `spec` serves: known, stated in its name, or the reference's."""
    known = known or {}
    hub, pvc = spec.model.source.huggingface, spec.model.source.pvc
    name = hub.repo if hub is not None else f"{pvc.path} on claim {pvc.claim_name}" if pvc is not None else ""
    where = hub.repo if hub is not None else pvc.path if pvc is not None else ""
    last = where.rstrip("/").rsplit("/", 1)[-1]
    if last == reference.rsplit("/", 1)[-1]:
        return Checkpoint(reference_b, f"{name}, the reference checkpoint, has {reference_b:g} B parameters")
    if hub is not None and known.get(hub.repo):
        size = float(known[hub.repo] or 0)
        return Checkpoint(size, f"{hub.repo} has {size:g} B parameters")
    stated = size_in_name(last)
    if stated is not None:
        return Checkpoint(
            stated,
            f"{name} states {stated:g} B parameters in its name (a vision tower may add up to a billion, "
            "within the margin)",
        )
    return Checkpoint(
        reference_b,
        f"the size of {name} is not known: the figures rest on the reference checkpoint {reference}'s "
        f"{reference_b:g} B parameters; set the pod's resources for a larger checkpoint",
    )


def counted(shares: Sequence[Share]) -> tuple[Share, ...]:
    """`shares` with equal ones merged into one with a count, in their first order."""
    merged: dict[tuple[str, int], int] = {}
    for share in shares:
        key = (share.what, share.mib)
        merged[key] = merged.get(key, 0) + share.count
    return tuple(Share(what, mib, count) for (what, mib), count in merged.items())


def shared_memory_mib(size: str | int) -> int:
    """A memory-backed volume's size limit, in MiB (rounded up)."""
    return math.ceil(quantities.parse(size) / MIB)
