"""Pieces every pod the operator creates shares: user settings, identity and security settings.

The security settings let builder and serving pods pass the `restricted` Pod Security Standard. No
container of these pods calls the API server, so none gets the ServiceAccount's token (`NO_API_TOKEN`).

Pure; imports the api models.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from mmd_operator.api.v1alpha1 import PodSettings

# The builder and serving images run as the NGC images' `triton-server` user; the group owns what the
# builder writes to the engine cache, so serving pods (same group) can read it.
IMAGE_UID = 1000
# A stolen or leaked token is worth nothing if the pod never had one; the operator's own pod keeps its.
NO_API_TOKEN = {"automountServiceAccountToken": False}


def pod_security_context() -> dict[str, Any]:
    """The pod-level security settings of builder and serving pods."""
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "fsGroup": IMAGE_UID,
        # A large engine cache would otherwise be chowned file by file at every pod start.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """The container-level security settings: no privilege escalation, no capabilities."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod_metadata(
    settings: PodSettings, labels: dict[str, str], annotations: dict[str, str]
) -> dict[str, Any]:
    """Pod template metadata: the user's labels and annotations, with the operator's on top."""
    metadata: dict[str, Any] = {"labels": {**settings.labels, **labels}}
    merged = {**settings.annotations, **annotations}
    if merged:
        metadata["annotations"] = merged
    return metadata


def scheduling(
    settings: PodSettings, gpu_selector: Mapping[str, str] = MappingProxyType({})
) -> dict[str, Any]:
    """The pod spec fields of `settings` that decide where and as whom a pod runs.

    `gpu_selector` (the engine's kind of GPU) joins the nodeSelector and wins over the user's same key.
    """
    spec: dict[str, Any] = {}
    if settings.node_selector or gpu_selector:
        spec["nodeSelector"] = {**settings.node_selector, **gpu_selector}
    if settings.tolerations:
        spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in settings.tolerations]
    if settings.affinity:
        spec["affinity"] = dict(settings.affinity)
    if settings.priority_class_name:
        spec["priorityClassName"] = settings.priority_class_name
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": secret.name} for secret in settings.image_pull_secrets]
    if settings.service_account_name:
        spec["serviceAccountName"] = settings.service_account_name
    return spec


def engine_build_scheduling(
    build: PodSettings, serving: PodSettings, gpu_selector: Mapping[str, str]
) -> dict[str, Any]:
    """Where an engine build runs: on the kind of GPU its engine is built for, reached as serving is.

    The build pod's own settings, plus `gpu_selector`, the serving pods' tolerations (a tainted GPU pool
    admits the build only with them) and, when the build names none of its own, the serving pods' node
    selector and node affinity: where no kind is known (no feature discovery, a node pool just added), the
    build still lands where the serving pods will; never their pod affinity, which speaks of serving pods.
    """
    selector = {**(serving.node_selector if not build.node_selector else {}), **gpu_selector}
    spec = scheduling(build, selector)
    tolerations = [*spec.get("tolerations", [])]
    for toleration in scheduling(serving).get("tolerations", []):
        if toleration not in tolerations:
            tolerations.append(toleration)
    if tolerations:
        spec["tolerations"] = tolerations
    node_affinity = (serving.affinity or {}).get("nodeAffinity")
    if not build.affinity and node_affinity:
        spec["affinity"] = {"nodeAffinity": node_affinity}
    return spec
