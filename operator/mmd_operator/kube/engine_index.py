"""The engine index: which engines an engine-cache claim holds, recorded as the builds report them.

A build Job leaves one JSON line as its container's termination message; Kubernetes copies it into the
pod status, so the operator learns the result without mounting the engine volume. Successes are
recorded in the ConfigMap `<claim>-index` of the claim's namespace (one key per cacheKey), so a later
resource with the same cacheKey is a cache hit without a Job. Each success is written with a merge patch
that adds its key alone, so concurrent recorders never overwrite each other's entries.

Imports the operator's API client and the builder's pure result format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine_builder.result_format import BuildSucceeded
from mmd_operator.kube.client import ApiError, KubeClient, path
from mmd_operator.vocabulary import labels, names


class EngineIndex(BaseModel):
    """Finished cache entries of one engine-cache claim, by cacheKey, as the index ConfigMap holds them.

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


def record_build(
    client: KubeClient, *, namespace: str, claim: str, claim_uid: str | None, summary: BuildSucceeded
) -> dict[str, Any]:
    """Add `summary` to the engine index of `claim`, creating the index on first use; return the index.

    The index is owned by its claim: when the claim (and every engine in it) is deleted, so is the index.
    """
    name = names.engine_index(claim)
    data = EngineIndex().record(summary).to_configmap_data()
    try:
        return client.merge_patch("v1", "ConfigMap", namespace, name, {"data": data})
    except ApiError as error:
        if not error.not_found:
            raise
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**labels.common(labels.ENGINE_INDEX), labels.ENGINE_CACHE_CLAIM: claim},
    }
    if claim_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim, "uid": claim_uid}
        ]
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
    try:
        return client.request("POST", path("v1", "ConfigMap", namespace), body=body)
    except ApiError as error:
        if not error.conflict:
            raise
        # Another recorder created it in between; add our key to theirs.
        return client.merge_patch("v1", "ConfigMap", namespace, name, {"data": data})
