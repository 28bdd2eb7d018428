"""The per-runtime list of one resource's children, and the per-shape row of its serving workload.

A runtime module (`triton`, `trtllm_serve`) turns an `Owner` (the resource, its plan and where its children
go) into `Children`: the Job that makes the artifact and the serving objects, as manifests or as builders
called only when the decision needs them. The operator's decision (`decision.desired_state`) and
`mmctl render` (`decision.manifests`) both build from this one list, so they cannot drift apart. How the
serving workload differs by the replica's shape (one pod, a group) is one `Workload` row per shape
(`serving.WORKLOADS`). Pure: imports the api models, the config, the facts, the plan's `Segment` and the
vocabulary's kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmd_operator.api.v1alpha1 import MultimodalDeployment, Parallelism
from mmd_operator.config import OperatorConfig
from mmd_operator.facts import OwnerRef
from mmd_operator.plan.launch import Segment
from mmd_operator.vocabulary.kinds import ApiKind

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
    # The ResourceClaimTemplates of pods that ask for their GPUs by claim (`gpu_claims`).
    claim_templates: tuple[Manifest, ...] = ()


@dataclass(frozen=True)
class Workload:
    """How the serving workload of one replica shape is written: a row of `serving.WORKLOADS`."""

    kind: ApiKind
    # Its name, from the instance's.
    name: Callable[[str], str]
    # It, made from the runtime's serving Deployment, the world's launch segments and a worker's server
    # container resources (None: the plan has no workers).
    made: Callable[[Manifest, Parallelism, Sequence[Segment], Manifest | None], Manifest]
    # What the Service selects besides the serving labels: the pods that serve.
    serving_pods: Mapping[str, str]
    # The serving NetworkPolicy's rules (given the instance), with what a replica's pods say to each other.
    policy_rules: Callable[[str, Manifest], Manifest]
    # The access mode of an engine-cache claim the operator creates for it (None: the operator's default).
    claim_access: str | None
    # The Secrets the operator generates for it (given the instance, the namespace and the owner).
    secrets: Callable[[str, str, OwnerRef], list[Manifest]]
    # Where its spec says how it rolls: the strategy's field, and its rolling update's.
    rollout: tuple[str, str]
    # The field of its spec that holds its pod template (or templates).
    template: str
    # A canary of its revision, given its manifest, the canary's name and the labels that mark it.
    canary: Callable[[Manifest, str, dict[str, str]], Manifest]
    # The spec of the pod that serves (a group's leader), from its manifest.
    serving_pod: Callable[[Manifest], Manifest]
