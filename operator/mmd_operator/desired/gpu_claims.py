"""Pods that ask for their GPUs by claim (`spec.gpus.resourceClaim`): the templates, and the pods rewritten.

One ResourceClaimTemplate per GPU count the resource's pods ask for (a build pod and a serving pod ask for
the same number on the engine runtime): one request of `deviceClassName`, exactly that many devices,
narrowed by the spec's selector and pinned to the kind of GPU the engine is built for, so a build and the
pods that serve its engine get GPUs of one kind. A template's spec cannot change once made, so its name
carries a digest of it. Every container that asked for `nvidia.com/gpu` asks for the claim instead, and
the pod takes one claim from the template. Pure: imports the api models, the facts' `GpuKind` and the
vocabulary.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

from mmd_operator.api.v1alpha1.spec import ResourceClaimGpus
from mmd_operator.facts import DRA_PRODUCT_ATTRIBUTE, NVIDIA_DRA_DOMAIN, GpuKind, OwnerRef
from mmd_operator.vocabulary import hashing, kinds, labels, ownership
from mmd_operator.vocabulary.kinds import GPU_RESOURCE

Manifest = dict[str, Any]
# The name of the claim in a pod, which its containers name in `resources.claims`.
CLAIM = "gpus"


def kind_pin(kind: GpuKind) -> str:
    """A selector admitting only GPUs of `kind`: its product, as the driver names it (spaces, not hyphens)."""
    words = "[ -]".join(re.escape(part) for part in kind.product.split("-"))
    return f'device.attributes["{NVIDIA_DRA_DOMAIN}"].{DRA_PRODUCT_ATTRIBUTE}.matches("^{words}$")'


def claim_template(
    claim: ResourceClaimGpus,
    *,
    instance: str,
    namespace: str,
    owner: OwnerRef,
    gpus: int,
    kind: GpuKind | None,
) -> Manifest:
    """The template of `gpus` GPUs of `claim`'s class and selector (and of `kind`, when known)."""
    selectors = [expression for expression in (claim.selector, kind and kind_pin(kind)) if expression]
    exactly: Manifest = {
        "deviceClassName": claim.device_class_name,
        "allocationMode": "ExactCount",
        "count": gpus,
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": expression}} for expression in selectors]
    spec = {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}}
    return {
        "apiVersion": kinds.RESOURCE_CLAIM_TEMPLATE.api_version,
        "kind": kinds.RESOURCE_CLAIM_TEMPLATE.kind,
        "metadata": {
            "name": f"{instance}-gpus-{gpus}-{hashing.digest(spec)[:8]}",
            "namespace": namespace,
            "labels": labels.for_instance(instance, labels.SERVING),
            "ownerReferences": [ownership.owner_reference(owner, controller=True)],
        },
        "spec": spec,
    }


def _pod_specs(manifest: Manifest) -> Iterator[Manifest]:
    spec = manifest.get("spec") or {}
    if "template" in spec:
        yield spec["template"]["spec"]
    group = spec.get("leaderWorkerTemplate") or {}
    for template in (group.get("leaderTemplate"), group.get("workerTemplate")):
        if template:
            yield template["spec"]


def claimed(manifest: Manifest, templates: Mapping[int, str]) -> Manifest:
    """`manifest` (a Job, a Deployment, a LeaderWorkerSet) with its pods' GPUs asked for by claim.

    `templates` names the template of each GPU count; a pod takes the one of its containers' count.
    """
    rewritten = copy.deepcopy(manifest)
    for pod in _pod_specs(rewritten):
        counts = set()
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            resources = container.get("resources") or {}
            asked = resources.get("limits", {}).pop(GPU_RESOURCE, None)
            resources.get("requests", {}).pop(GPU_RESOURCE, None)
            if asked is not None:
                counts.add(int(asked))
                resources["claims"] = [{"name": CLAIM}]
        if counts:
            (count,) = counts  # every container of a pod shares the pod's GPUs
            pod["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": templates[count]}]
    return rewritten
