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

Pure: imports the facts (`GpuKind` reads a node's labels), placement's matching rule and the plan's
`KindOffer` (a kind with its memory, what `plan.fit` weighs a model against).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from mmd_operator.api.quantities import Quantity, is_quantity, parse
from mmd_operator.api.validation import SemVer, cel_program
from mmd_operator.facts import (
    DEFAULT_DEVICE_CLASS,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    NVIDIA_DRA_DOMAIN,
    DeviceFacts,
    Devices,
    GpuKind,
    NodeFacts,
    Nodes,
    PodPlacement,
    VersionText,
)
from mmd_operator.judgement.placement import match
from mmd_operator.plan.fit import KindOffer
from mmd_operator.plan.resource_plan import kind_bound


def memory_mib(node: NodeFacts) -> int | None:
    """The memory of one of `node`'s GPUs in MiB, when its labels say."""
    value = dict(node.labels).get(GPU_MEMORY_LABEL, "")
    return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class KindsInReach:
    """The GPU kinds a pod may land on, each with its nodes, and the GPU nodes in reach of no known kind."""

    nodes_by_kind: tuple[tuple[GpuKind, tuple[str, ...]], ...] = ()
    unlabelled: tuple[str, ...] = ()
    # The least memory of one GPU (MiB) the nodes of each kind state, where they do.
    memory_by_kind: tuple[tuple[GpuKind, int], ...] = ()

    @property
    def kinds(self) -> tuple[GpuKind, ...]:
        """The kinds, in order."""
        return tuple(kind for kind, _ in self.nodes_by_kind)

    def nodes_of(self, kind: GpuKind) -> tuple[str, ...]:
        """The names of the nodes of `kind` in reach."""
        return dict(self.nodes_by_kind).get(kind, ())

    def offers(self, only: GpuKind | None = None) -> tuple[KindOffer, ...]:
        """Each kind in reach (or `only` that one) with the memory of one of its GPUs."""
        memory = dict(self.memory_by_kind)
        return tuple(KindOffer(kind, memory.get(kind)) for kind in self.kinds if only in (None, kind))


def kinds_in_reach(pod: PodPlacement, nodes: Nodes) -> KindsInReach:
    """The kinds of the nodes `pod`'s selector, node affinity and tolerations admit."""
    by_kind: dict[GpuKind, list[str]] = {}
    memory: dict[GpuKind, int] = {}
    unlabelled: list[str] = []
    for node in match(pod, nodes).matching:
        kind = GpuKind.of_labels(dict(node.labels))
        if kind is None:
            unlabelled.append(node.name)
            continue
        by_kind.setdefault(kind, []).append(node.name)
        mib = memory_mib(node)
        if mib is not None:
            memory[kind] = min(mib, memory.get(kind, mib))
    return KindsInReach(
        tuple((kind, tuple(names)) for kind, names in sorted(by_kind.items())),
        tuple(unlabelled),
        tuple(sorted(memory.items())),
    )


@dataclass(frozen=True)
class KindChoice:
    """The kind an engine is built for, or why the spec must say which; and what the status should add."""

    kind: GpuKind | None = None
    # The spec field to change and why, when the placement reaches several kinds and none is chosen.
    refusal: tuple[str, str] | None = None
    # Said in the status beside a choice: kinds in reach that will not serve, nodes of no known kind.
    notice: str = ""
    # The kinds the pods will run on, with their memory: what the model must fit (`plan.fit`).
    offers: tuple[KindOffer, ...] = ()
    # True when the placement reached no node (or the claim no device) the listing knows, or several
    # kinds: a pool may have just joined or left, so the resource is looked at again soon.
    unseen: bool = False


def _kinds_and_nodes(reach: KindsInReach, kinds: tuple[GpuKind, ...]) -> str:
    return "; ".join(
        f"{kind.describe()} on {len(reach.nodes_of(kind))} node(s): {', '.join(reach.nodes_of(kind)[:3])}"
        + (", ..." if len(reach.nodes_of(kind)) > 3 else "")
        for kind in kinds
    )


@dataclass(frozen=True)
class ReachWords:
    """How the messages name what reaches GPUs: a node placement, or a claim's selector."""

    field: str
    # What is in reach: "node(s)" or "device(s)", and what they lack without a kind.
    things: str
    unnamed: str
    # The fix of a reach of several kinds, given their products.
    narrow: Callable[[str], str]
    # What to do when no kind is known at all.
    name_them: str


BY_NODES = ReachWords(
    field="spec.serving.pod.nodeSelector",
    things="GPU node(s) in reach",
    unnamed=f"carry no {GPU_PRODUCT_LABEL} label",
    narrow=lambda products: f"add {GPU_PRODUCT_LABEL}: <one of {products}> to spec.serving.pod.nodeSelector",
    name_them="install GPU feature discovery, or select nodes by their product",
)
BY_CLAIM = ReachWords(
    field="spec.gpus.resourceClaim.selector",
    things="GPU device(s) the claim admits",
    unnamed="carry no productName attribute",
    narrow=lambda products: (
        "narrow spec.gpus.resourceClaim.selector to one of them (its productName, e.g. "
        f'device.attributes["{NVIDIA_DRA_DOMAIN}"].productName; products: {products})'
    ),
    name_them="narrow spec.gpus.resourceClaim.selector to devices of one product",
)


def choose_kind(
    reach: KindsInReach | None, recorded: GpuKind | None, words: ReachWords = BY_NODES
) -> KindChoice:
    """The kind to build the engine for, from the kinds in reach and the one its engine was built for.

    One kind in reach: that one. Several: the recorded kind if it is among them (a pool of another kind
    joining the placement never moves a serving resource), else a refusal that names the kinds and the
    fix. None known (no feature discovery, nodes not readable, no GPU node yet): the recorded kind, else
    none (the engine is keyed as before kinds were read and built wherever its pod lands).
    """
    if reach is None:
        return KindChoice(recorded)
    unlabelled = ""
    if reach.unlabelled:
        unlabelled = (
            f"{len(reach.unlabelled)} {words.things} {words.unnamed} "
            f"({', '.join(reach.unlabelled[:3])}{', ...' if len(reach.unlabelled) > 3 else ''}): "
            "what GPU they hold is not known, so "
            + ("no pod of this engine runs there" if reach.kinds else "the engine is built for whichever one "
               f"its build pod lands on; {words.name_them}")
        )  # fmt: skip
    if len(reach.kinds) == 1:
        return KindChoice(reach.kinds[0], notice=unlabelled, offers=reach.offers())
    if not reach.kinds:
        return KindChoice(recorded, notice=unlabelled)
    others = tuple(kind for kind in reach.kinds if kind != recorded)
    if recorded is not None and recorded in reach.kinds:
        notice = (
            f"the placement also reaches {_kinds_and_nodes(reach, others)}; this resource's engine is built "
            f"for {recorded.describe()} and its pods run only there"
        )
        return KindChoice(
            recorded, notice="; ".join(filter(None, (notice, unlabelled))), offers=reach.offers(recorded)
        )
    products = ", ".join(kind.product for kind in reach.kinds)
    message = (
        f"reaches {len(reach.kinds)} kinds of GPU: {_kinds_and_nodes(reach, reach.kinds)}. An engine runs "
        "only on the kind it was built for, and one resource serves one kind (one latency profile for its "
        f"Service, autoscaler and canary): {words.narrow(products)}, and make one resource per kind to "
        "serve on several"
    )
    return KindChoice(refusal=(words.field, message))


def kinds_for(
    spec: object, reach: KindsInReach | None, recorded: GpuKind | None, words: ReachWords = BY_NODES
) -> KindChoice:
    """The kind a spec document's artifact is built for, and the kinds its pods run on.

    An engine: `choose_kind`. An artifact that serves on any kind: no kind, but every kind in reach to
    weigh the model against.
    """
    if kind_bound(spec):
        return choose_kind(reach, recorded, words)
    return KindChoice(offers=reach.offers() if reach is not None else ())


def _cel_value(value: str | int | bool) -> celtypes.Value:
    if isinstance(value, VersionText):
        return cast(celtypes.Value, SemVer.parse(str(value)))
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    return celtypes.IntType(value) if isinstance(value, int) else celtypes.StringType(value)


def _by_domain(
    pairs: tuple[tuple[str, Any], ...], convert: Callable[[Any], celtypes.Value]
) -> celtypes.MapType:
    domains: dict[str, dict[str, celtypes.Value]] = {}
    for qualified, value in pairs:
        domain, _, name = qualified.rpartition("/")
        domains.setdefault(domain, {})[name] = convert(value)
    return celtypes.MapType(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(k): v for k, v in names.items()}
            )
            for domain, names in domains.items()
        }
    )


def _device(device: DeviceFacts) -> celtypes.Value:
    """`device` as a DRA selector sees it: its driver, attributes and capacity by domain."""
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(device.driver),
            celtypes.StringType("attributes"): _by_domain(device.attributes, _cel_value),
            celtypes.StringType("capacity"): _by_domain(
                device.capacity, lambda quantity: cast(celtypes.Value, Quantity(parse(str(quantity))))
            ),
        }
    )


def _selected(device: DeviceFacts, expressions: tuple[str, ...]) -> bool:
    """Whether every selector admits `device`.

    Raises:
        ValueError: naming the expression, when one cannot be evaluated here.
    """
    activation = {"device": _device(device)}
    for expression in expressions:
        try:
            result = cel_program(expression).evaluate(activation)
        except (CELEvalError, CELParseError, ValueError, TypeError) as error:
            raise ValueError(f"{expression!r}: {error}") from None
        if not isinstance(result, bool | celtypes.BoolType) or not result:
            return False
    return True


def _device_memory_mib(device: DeviceFacts) -> int | None:
    value = dict(device.capacity).get(f"{device.driver}/memory")
    return int(parse(value) // (1 << 20)) if value and is_quantity(value) else None


def kinds_of_devices(devices: Devices, device_class: str, selector: str | None) -> tuple[KindsInReach, str]:
    """The kinds of GPU a claim of `device_class` narrowed by `selector` can be given.

    And what stops the operator from knowing: a class not found, a selector it cannot evaluate ("" when
    nothing). A device of no known kind (no `productName`) is counted apart, as a node without the
    product label.
    """
    found = next((c for c in devices.classes if c.name == device_class), None)
    if found is None:
        return KindsInReach(), f"DeviceClass {device_class} not found"
    expressions = (*found.selectors, *((selector,) if selector else ()))
    by_kind: dict[GpuKind, set[str]] = {}
    memory: dict[GpuKind, int] = {}
    unknown: list[str] = []
    for device in devices.devices:
        try:
            if not _selected(device, expressions):
                continue
        except ValueError as error:
            return KindsInReach(), f"the operator cannot evaluate the selector {error}"
        kind = device.kind()
        if kind is None:
            unknown.append(f"{device.node}/{device.name}")
            continue
        by_kind.setdefault(kind, set()).add(device.node)
        mib = _device_memory_mib(device)
        if mib is not None:
            memory[kind] = min(mib, memory.get(kind, mib))
    return (
        KindsInReach(
            tuple((kind, tuple(sorted(nodes))) for kind, nodes in sorted(by_kind.items())),
            tuple(unknown),
            tuple(sorted(memory.items())),
        ),
        "",
    )


def claim_of(spec: object) -> tuple[str, str | None] | None:
    """The device class and selector of a spec document that asks for GPUs by claim, or None."""
    gpus = spec.get("gpus") if isinstance(spec, Mapping) else None
    claim = gpus.get("resourceClaim") if isinstance(gpus, Mapping) else None
    if not isinstance(claim, Mapping):
        return None
    selector = claim.get("selector")
    return str(claim.get("deviceClassName") or DEFAULT_DEVICE_CLASS), str(selector) if selector else None


def kinds_by_claim(
    spec: object, claim: tuple[str, str | None], devices: Devices | None, recorded: GpuKind | None
) -> KindChoice:
    """`kinds_for` a spec whose GPUs come by `claim`: the kinds of the devices it admits.

    What the operator cannot know (slices not readable, a class not found, a selector it cannot
    evaluate) leaves the recorded kind, or none, with a notice.
    """
    if devices is None:
        return kinds_for(spec, None, recorded, BY_CLAIM)
    reach, unknown = kinds_of_devices(devices, *claim)
    if unknown:
        chosen = kinds_for(spec, None, recorded, BY_CLAIM)
        return dataclasses.replace(chosen, notice=f"the kind of GPU is not known: {unknown}")
    return kinds_for(spec, reach, recorded, BY_CLAIM)
