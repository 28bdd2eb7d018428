"""Build results, read from the build Job's pods, and the per-namespace engine index that records them.

A build Job leaves one JSON line as its container's termination message; Kubernetes copies it into the
pod status, so the operator learns the result without mounting the engine volume. Successes are
recorded in the ConfigMap `mmd-engine-index` of the namespace (one key per cacheKey), so a later resource
with the same cacheKey is a cache hit without a Job. Each success is written with a merge patch that adds
its key alone, so concurrent recorders never overwrite each other's entries.

Imports the kubernetes client and the builder's pure result format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, ValidationError

from engine_builder.result_format import BuildFailed, BuildSucceeded, parse_termination_message

ENGINE_INDEX_CONFIGMAP = "mmd-engine-index"
# Set by the Job controller on every pod of a Job.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
_LABELS = {"app.kubernetes.io/managed-by": "mmd-operator", "app.kubernetes.io/component": "engine-index"}


class EngineIndex(BaseModel):
    """Finished cache entries of one namespace's engine cache, by cacheKey, as the index ConfigMap holds them.

    The ConfigMap's data has one key per cacheKey (hex digests are valid keys) whose value is the build's
    success summary as JSON; a resource whose cacheKey is in the index needs no build Job.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    entries: dict[str, BuildSucceeded] = {}

    def get(self, cache_key: str) -> BuildSucceeded | None:
        """The summary of `cache_key`, or None when it was never built here."""
        return self.entries.get(cache_key)

    def record(self, summary: BuildSucceeded) -> EngineIndex:
        """A new index that includes `summary` (a cache hit is stored like the build it found)."""
        stored = summary.model_copy(update={"cache_hit": False})
        return EngineIndex(entries={**self.entries, summary.cache_key: stored})

    def to_configmap_data(self) -> dict[str, str]:
        """The ConfigMap's `data`."""
        return {key: summary.model_dump_json() for key, summary in sorted(self.entries.items())}

    @classmethod
    def from_configmap_data(cls, data: Mapping[str, str] | None) -> EngineIndex:
        """Read what `to_configmap_data` wrote.

        An entry that does not parse (hand-edited, or written by an incompatible version) is left out: the
        key then looks unbuilt, the build Job finds the entry's manifest on the volume, exits at once and
        reports it again, which repairs the index.
        """
        entries: dict[str, BuildSucceeded] = {}
        for key, value in (data or {}).items():
            try:
                summary = BuildSucceeded.model_validate_json(value)
            except ValidationError:
                continue
            if summary.cache_key == key:
                entries[key] = summary
        return cls(entries=entries)


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
