"""Pieces every pod the operator creates shares: user settings, identity and security settings.

The security settings let builder and serving pods pass the `restricted` Pod Security Standard. No
container of these pods calls the API server, so none gets the ServiceAccount's token (`NO_API_TOKEN`).

Pure; imports the api models.
"""

from __future__ import annotations

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


def scheduling(settings: PodSettings) -> dict[str, Any]:
    """The pod spec fields of `settings` that decide where and as whom a pod runs."""
    spec: dict[str, Any] = {}
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
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
