"""The engine-cache claim and the shape of the Jobs that fill it: where artifacts are made and kept.

Both are shared. Every resource that names a claim uses it; every resource whose plan has the same key
(and claim) uses the same Job, a build (`triton`) or a weights download (`trtllm_serve`); each user is a
plain owner, so the last one out takes a Job (and a claim with retention Delete) with it, unless another
resource wants it and has not joined yet: then it passes to that one (`kube.writes`). A Job runs one
container of the builder's program with the claim at `/engines`; its pod template takes the spec's
`build.pod` settings, its labels name the key and the claim (the controller finds a Job's users by
them), and a digest of its spec (`BUILD_RECIPE`) tells a failed Job made from another recipe. Pure:
imports the api models, the config, the facts and the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import pods
from mmd_operator.desired.children import Manifest, Owner
from mmd_operator.desired.serving import WORKLOADS
from mmd_operator.facts import OwnerRef
from mmd_operator.plan.settings import ENGINE_MOUNT
from mmd_operator.vocabulary import hashing, labels, ownership

CLAIM_RETENTION = f"{labels.PREFIX}/retention"
ENGINE_CACHE_VOLUME = "engine-cache"


def claim_name(resource: MultimodalDeployment, config: OperatorConfig) -> str:
    """The engine-cache claim `resource` builds into and serves from."""
    return resource.spec.engine_cache.claim_name or config.engine_cache_claim


def engine_cache_claim(
    resource: MultimodalDeployment, *, namespace: str, config: OperatorConfig, owner: OwnerRef
) -> dict[str, Any]:
    """The claim the operator creates when the one a resource names does not exist.

    The creator's retention is recorded on the claim and decides for every later user: with Delete each
    user is an owner and the claim goes with the last of them; with Retain it has no owner.
    """
    cache = resource.spec.engine_cache
    # A replica across pods mounts it from several nodes: shared, whatever the operator's default.
    shared = WORKLOADS[resource.spec.parallelism.shape].claim_access
    spec: dict[str, Any] = {
        "accessModes": [cache.access_mode or shared or config.engine_cache_access_mode],
        "resources": {"requests": {"storage": str(cache.size or config.engine_cache_size)}},
    }
    storage_class = cache.storage_class_name or config.engine_cache_storage_class
    if storage_class:
        spec["storageClassName"] = storage_class
    metadata: dict[str, Any] = {
        "name": claim_name(resource, config),
        "namespace": namespace,
        "labels": labels.common(labels.ENGINE_CACHE),
        "annotations": {CLAIM_RETENTION: cache.retention},
    }
    if cache.retention == "Delete":
        metadata["ownerReferences"] = [ownership.owner_reference(owner, controller=False)]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def artifact_job(
    owned: Owner,
    *,
    name: str,
    component: str,
    key: str,
    head: Manifest,
    mounts: Sequence[Manifest] = (),
    tail: Manifest | None = None,
    volumes: Sequence[Manifest] = (),
    scheduling: Manifest | None = None,
) -> Manifest:
    """The Job `name` with the claim at `/engines`, `owned`'s resource its first user.

    `component` is its kind's label value (engine-build, weights-download) and `key` what it makes. Its
    one container is `head` (name, image, arguments), the claim and `mounts`, the settings every Job's
    container has, then `tail`; its pod has the claim's volume and `volumes`, and runs where `scheduling`
    says (by default, where `spec.build.pod` does).
    """
    build = owned.resource.spec.build
    job_labels = {**labels.common(component), labels.CACHE_KEY: key, labels.ENGINE_CACHE_CLAIM: owned.claim}
    container = {
        **head,
        "volumeMounts": [{"name": ENGINE_CACHE_VOLUME, "mountPath": ENGINE_MOUNT}, *mounts],
        # A crash that leaves no result line still reports its last log lines.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pods.container_security_context(),
        **(tail or {}),
    }
    job_spec = {
        "backoffLimit": build.backoff_limit,
        "activeDeadlineSeconds": build.active_deadline_seconds,
        "template": {
            "metadata": pods.pod_metadata(build.pod, job_labels, {}),
            "spec": {
                "restartPolicy": "Never",
                **(pods.scheduling(build.pod) if scheduling is None else scheduling),
                **pods.NO_API_TOKEN,
                "securityContext": pods.pod_security_context(),
                "containers": [container],
                "volumes": [
                    {"name": ENGINE_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": owned.claim}},
                    *volumes,
                ],
            },
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": owned.namespace,
            "labels": job_labels,
            "annotations": {labels.BUILD_RECIPE: hashing.digest(job_spec)},
            "ownerReferences": [ownership.owner_reference(owned.owner, controller=False)],
        },
        "spec": job_spec,
    }
