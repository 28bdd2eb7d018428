"""The per-runtime list of one resource's children: what `decision` asks each runtime module for.

A runtime module (`triton`, `trtllm_serve`) turns an `Owner` (the resource, its plan and where its children
go) into `Children`: the Job that makes the artifact and the serving objects, as manifests or as builders
called only when the decision needs them. The operator's decision (`decision.desired_state`) and
`mmctl render` (`decision.manifests`) both build from this one list, so they cannot drift apart. Pure:
imports the api models, the config and the facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.facts import OwnerRef

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Owner:
    """One resource and where its children go: what every runtime's builders start from."""

    resource: MultimodalDeployment
    namespace: str
    owner: OwnerRef
    # The engine-cache claim the resource's spec names (or the operator's default).
    claim: str
    config: OperatorConfig

    @property
    def instance(self) -> str:
        """The resource's name, which its serving children carry."""
        return str(self.resource.metadata["name"])


@dataclass(frozen=True)
class Children:
    """What one runtime makes for one resource."""

    # Whether the artifact lives in the engine-cache claim (a trtllm-serve model on its own claim does not).
    uses_claim: bool
    # The shared Job that makes the artifact, by name, and its manifest (built only when needed); None
    # when nothing is made.
    job_name: str | None
    job: Callable[[], Manifest] | None
    # The immutable ConfigMap of the pods' configuration (the model repository, or `--config`).
    configmap: Manifest
    # The serving Deployment, given where the ready artifact lies in the claim (None: not known yet).
    deployment: Callable[[str | None], Manifest]
    service: Manifest
    # The serving pods' NetworkPolicy, when the runtime wants one.
    network_policy: Manifest | None
