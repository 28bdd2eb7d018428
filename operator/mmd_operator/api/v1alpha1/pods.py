"""The Kubernetes shapes the spec borrows: Secret and object references, tolerations, resources, pods.

`PodSettings` is where and how the build pods and the serving pods run. Pure: imports pydantic and the
package's `cel` and `schema`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, JsonValue
from pydantic.config import JsonDict

from mmd_operator.api.v1alpha1.cel import cel_rule
from mmd_operator.api.v1alpha1.schema import (
    DNS_SUBDOMAIN_PATTERN,
    SECRET_KEY_PATTERN,
    Quantity,
    Schema,
    StringMap,
)

# The extended resource GPUs are requested by (the NVIDIA device plugin's); the operator sets it.
GPU_RESOURCE = "nvidia.com/gpu"


class SecretKeyRef(Schema):
    """A key of a Secret in the resource's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the Secret."""
    key: str = Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)
    """Key inside the Secret whose value is used."""


class Toleration(Schema):
    """A taint the pod tolerates (core/v1 Toleration)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.operator) || self.operator != 'Exists' || "
                    "!has(self.value) || self.value == ''",
                    "value ({self.value}) must be empty when operator is Exists",
                    field_path=".value",
                ),
                cel_rule(
                    "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
                    "operator ({has(self.operator) ? self.operator : 'Equal'}) must be Exists when key is "
                    "empty (an empty key matches every taint)",
                    field_path=".operator",
                ),
            ]
        }
    )

    key: str | None = Field(None, max_length=317)
    """Taint key; empty with operator Exists matches every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default Equal)."""
    value: str | None = Field(None, max_length=63)
    """Taint value for operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all."""
    toleration_seconds: int | None = None
    """How long a NoExecute taint is tolerated before eviction."""


def _value(part: str, name: str = "name") -> str:
    return f"quantity(string(self.{part}[{name}]))"


def _is_quantity(part: str, name: str = "name") -> str:
    return f"isQuantity(string(self.{part}[{name}]))"


# A resource the requests name whose request is above its limit (both quantities: their syntax has its own
# rule), as CEL over `name`; and the first such resource.
_ABOVE = (
    f"name in self.limits && {_is_quantity('requests')} && {_is_quantity('limits')} && "
    f"{_value('requests')}.isGreaterThan({_value('limits')})"
)
_ABOVE_LIMIT = f"!({_ABOVE})"
_FIRST_ABOVE = f"self.requests.filter(name, {_ABOVE})[0]"


def _not_negative(part: str) -> JsonDict:
    below = f"{_is_quantity(part)} && {_value(part)}.isLessThan(quantity('0'))"
    first = f"self.{part}.filter(name, {below})[0]"
    return cel_rule(
        f"!has(self.{part}) || self.{part}.all(name, !({below}))",
        f"a quantity must not be negative ({part}[{{{first}}}] is {{self.{part}[{first}]}}): Kubernetes "
        "refuses the pod",
        field_path=f".{part}",
    )


class ResourceRequirements(Schema):
    """CPU, memory and other resources of the pod's main container. GPUs are set by the operator."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                # Neither map is stored when the user leaves it out (no empty defaults), hence has().
                cel_rule(
                    f"!(has(self.requests) && '{GPU_RESOURCE}' in self.requests) && "
                    f"!(has(self.limits) && '{GPU_RESOURCE}' in self.limits)",
                    f"{GPU_RESOURCE} ({{has(self.requests) && '{GPU_RESOURCE}' in self.requests ? "
                    f"self.requests['{GPU_RESOURCE}'] : self.limits['{GPU_RESOURCE}']}}) is set by the "
                    "operator to engine.tensorParallelSize",
                ),
                *(_not_negative(part) for part in ("requests", "limits")),
                cel_rule(
                    f"!has(self.requests) || !has(self.limits) || self.requests.all(name, {_ABOVE_LIMIT})",
                    f"a request must not exceed its limit (requests[{{{_FIRST_ABOVE}}}] is "
                    f"{{self.requests[{_FIRST_ABOVE}]}}, limits[{{{_FIRST_ABOVE}}}] is "
                    f"{{self.limits[{_FIRST_ABOVE}]}}): the scheduler reserves the request and the kernel "
                    "holds the container to the limit, and Kubernetes refuses a pod whose request is larger",
                    field_path=".limits",
                ),
            ]
        }
    )

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=32)
    """Resources the scheduler reserves, e.g. `cpu: 8`, `memory: 64Gi`."""
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=32)
    """Upper bounds, e.g. `memory: 96Gi`. `nvidia.com/gpu` is always the tensor-parallel size."""


class LocalObjectReference(Schema):
    """A reference to an object in the same namespace, by name."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the object."""


class PodSettings(Schema):
    """Where and how the operator's pods run: scheduling, identity and extra metadata."""

    labels: StringMap = Field(default_factory=dict)
    """Extra labels on the pods (the operator's own labels win on conflict)."""
    annotations: StringMap = Field(default_factory=dict)
    """Extra annotations on the pods."""
    node_selector: StringMap = Field(default_factory=dict)
    """Node labels the pods require, e.g. `nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    """Taints the pods tolerate (GPU nodes are often tainted)."""
    affinity: dict[str, JsonValue] | None = Field(
        None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """Node and pod affinity (core/v1 Affinity), passed to the pods unchanged."""
    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """PriorityClass of the pods."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Resources of the main container besides GPUs."""
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list, max_length=16)
    """Secrets for pulling the image from a private registry."""
    service_account_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """ServiceAccount the pods run as (default: the namespace's default)."""
