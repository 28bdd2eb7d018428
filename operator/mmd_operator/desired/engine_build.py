"""The engine-cache claim and the build Job: where engines are built, and the Job that builds one.

Both are shared: every resource whose plan has the same cacheKey (and claim) uses the same Job, and
every resource that names a claim uses it; each user is a plain owner. The Job runs the builder image's
`python -m engine_builder build` with the plan as an argument (plans never hold a secret; the Hugging
Face token comes from its Secret as an environment variable), the claim at `/engines`, and any model
source claim read-only at `/sources/<role>`. Pure: imports the api models, the plan and the config.
"""

from __future__ import annotations

from typing import Any

from engine_builder.plan_format import BuildPlan
from mmd_operator.api.v1alpha1 import MultimodalDeployment, VolumeSource
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import pods
from mmd_operator.facts import OwnerRef
from mmd_operator.plan.build_plan import HF_TOKEN_ENV, SOURCES_MOUNT
from mmd_operator.plan.resource_plan import ResourcePlan
from mmd_operator.plan.settings import ENGINE_MOUNT
from mmd_operator.vocabulary import hashing, labels, names, ownership

BUILDER_CONTAINER = "engine-builder"
CLAIM_RETENTION = f"{labels.PREFIX}/retention"
# The builder's scratch space for MPI and tensor exchange during conversion.
BUILD_SHM = "8Gi"


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
    spec: dict[str, Any] = {
        "accessModes": [cache.access_mode or config.engine_cache_access_mode],
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


def _source_volume(role: str, source: VolumeSource) -> tuple[dict[str, Any], dict[str, Any]]:
    volume = {
        "name": f"source-{role}",
        "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True},
    }
    mount = {"name": f"source-{role}", "mountPath": f"{SOURCES_MOUNT}/{role}", "readOnly": True}
    return volume, mount


def _plan_argument(plan: BuildPlan) -> str:
    return plan.model_dump_json(exclude_defaults=False)


def build_job(
    resource: MultimodalDeployment,
    plan: ResourcePlan,
    *,
    namespace: str,
    claim: str,
    owner: OwnerRef,
) -> dict[str, Any]:
    """The Job that builds `plan`'s engines into `claim`, with `owner` as its first user."""
    spec, build = resource.spec, resource.spec.build
    key = plan.cache_key
    build_labels = {
        **labels.common(labels.ENGINE_BUILD),
        labels.CACHE_KEY: key,
        labels.ENGINE_CACHE_CLAIM: claim,
    }
    container: dict[str, Any] = {
        "name": BUILDER_CONTAINER,
        "image": plan.build.builder_image,
        "args": ["build", "--plan-json", _plan_argument(plan.build), "--cache-dir", ENGINE_MOUNT],
        "resources": pods.resources(build.pod, plan.settings.tensor_parallel_size),
        "volumeMounts": [
            {"name": "engine-cache", "mountPath": ENGINE_MOUNT},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
        # A crash that leaves no result line still reports its last log lines.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pods.container_security_context(),
    }
    token = spec.model.source.huggingface.token_secret_ref if spec.model.source.huggingface else None
    if token is not None:
        container["env"] = [
            {"name": HF_TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}
        ]
    volumes: list[dict[str, Any]] = [
        {"name": "engine-cache", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": BUILD_SHM}},
    ]
    sources = [("model", spec.model.source.pvc)]
    if spec.model.lora is not None:
        sources.append(("lora", spec.model.lora.source.pvc))
    for role, source in sources:
        if source is not None:
            volume, mount = _source_volume(role, source)
            volumes.append(volume)
            container["volumeMounts"].append(mount)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        **pods.scheduling(build.pod),
        "securityContext": pods.pod_security_context(),
        "containers": [container],
        "volumes": volumes,
    }
    job_spec = {
        "backoffLimit": build.backoff_limit,
        "activeDeadlineSeconds": build.active_deadline_seconds,
        "template": {
            "metadata": pods.pod_metadata(build.pod, build_labels, {}),
            "spec": pod_spec,
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.build_job(key, claim),
            "namespace": namespace,
            "labels": build_labels,
            "annotations": {labels.BUILD_RECIPE: hashing.digest(job_spec)},
            "ownerReferences": [ownership.owner_reference(owner, controller=False)],
        },
        "spec": job_spec,
    }
