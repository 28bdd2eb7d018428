"""Owner references to a MultimodalDeployment, and the key of a child in its namespace.

Pure; imports the api models, the facts and the kinds table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmd_operator.api.v1alpha1 import API_VERSION, KIND, MultimodalDeployment
from mmd_operator.facts import OwnerRef
from mmd_operator.vocabulary.kinds import ApiKind


@dataclass(frozen=True, order=True)
class ObjectKey:
    """An object in the resource's namespace."""

    api_version: str
    kind: str
    name: str

    @classmethod
    def of(cls, kind: ApiKind, name: str) -> ObjectKey:
        """The object `name` of `kind`."""
        return cls(kind.api_version, kind.kind, name)


def owner_reference(owner: OwnerRef, *, controller: bool) -> dict[str, Any]:
    """An ownerReference to a MultimodalDeployment.

    A controller reference makes the child this resource's alone; a shared child (a build Job, an
    engine-cache claim) gets a plain reference from each user, so deleting one user never takes it.
    """
    reference: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": owner.name,
        "uid": owner.uid,
    }
    if controller:
        reference["controller"] = True
    return reference


def owner_of(resource: MultimodalDeployment) -> OwnerRef:
    """The resource as an owner."""
    return OwnerRef(name=str(resource.metadata["name"]), uid=str(resource.metadata.get("uid", "")))
