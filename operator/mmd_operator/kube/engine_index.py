"""Build results, read from the build Job's pods, and the per-namespace engine index that records them.

A build Job leaves one JSON line as its container's termination message; Kubernetes copies it into the
pod status, so the operator learns the result without mounting the engine volume. Successes are
recorded in the ConfigMap `mmd-engine-index` of the namespace (one key per cacheKey), so a later resource
with the same cacheKey is a cache hit without a Job. Each success is written with a merge patch that adds
its key alone, so concurrent recorders never overwrite each other's entries.

Imports the kubernetes client and the builder's pure result format.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from engine_builder.result_format import BuildFailed, BuildSucceeded, EngineIndex, parse_termination_message

ENGINE_INDEX_CONFIGMAP = "mmd-engine-index"
# Set by the Job controller on every pod of a Job.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
_LABELS = {"app.kubernetes.io/managed-by": "mmd-operator", "app.kubernetes.io/component": "engine-index"}


def job_build_result(core: Any, *, namespace: str, job_name: str) -> BuildSucceeded | BuildFailed | None:
    """The result the newest finished pod of Job `job_name` reported, or None while none has finished.

    `core` is a `kubernetes.client.CoreV1Api`.
    """
    pods = core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job_name}").items
    for pod in sorted(pods, key=lambda p: p.metadata.creation_timestamp, reverse=True):
        for container in pod.status.container_statuses or []:
            terminated = container.state.terminated if container.state else None
            if terminated is not None:
                return parse_termination_message(terminated.message)
    return None


def read_engine_index(core: Any, *, namespace: str) -> EngineIndex:
    """The engine index of `namespace` (empty when nothing was recorded yet)."""
    try:
        config_map = core.read_namespaced_config_map(ENGINE_INDEX_CONFIGMAP, namespace)
    except ApiException as error:
        if error.status == 404:
            return EngineIndex()
        raise
    return EngineIndex.from_configmap_data(config_map.data)


def record_build(core: Any, *, namespace: str, summary: BuildSucceeded) -> None:
    """Add `summary` to the engine index of `namespace`, creating the index on first use."""
    data = EngineIndex().record(summary).to_configmap_data()
    try:
        core.patch_namespaced_config_map(ENGINE_INDEX_CONFIGMAP, namespace, {"data": data})
        return
    except ApiException as error:
        if error.status != 404:
            raise
    body = {"metadata": {"name": ENGINE_INDEX_CONFIGMAP, "labels": _LABELS}, "data": data}
    try:
        core.create_namespaced_config_map(namespace, body)
    except ApiException as error:
        if error.status != 409:
            raise
        # Another recorder created it in between; add our key to theirs.
        core.patch_namespaced_config_map(ENGINE_INDEX_CONFIGMAP, namespace, {"data": data})
