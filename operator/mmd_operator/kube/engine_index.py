"""The engine index: which engines and snapshots an engine-cache claim holds, recorded as the Jobs report.

A build or download Job leaves one JSON line as its container's termination message; Kubernetes copies it
into the pod status, so the operator learns the result without mounting the engine volume. Successes are
recorded in the ConfigMap `<claim>-index` of the claim's namespace, so a later resource with the same key
is a cache hit without a Job:

    <cacheKey>               a built engine (BuildSucceeded)
    snapshot.<snapshot key>  a downloaded Hugging Face snapshot (DownloadSucceeded; trtllm-serve)
    revision.<download key>  the commit a branch or tag resolved to (RevisionResolved): every later
                             resource naming that repository and revision is served this commit

Each success is written with a merge patch that adds its keys alone, so concurrent recorders never
overwrite each other's entries. Imports the operator's API client and the builder's pure result formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine_builder.result_format import BuildSucceeded
from engine_builder.weights_format import DownloadSucceeded, RevisionResolved
from mmd_operator.kube.client import ApiError, KubeClient, path
from mmd_operator.vocabulary import labels, names

# Key prefixes of the index's trtllm-serve entries (engine entries are bare cacheKeys).
SNAPSHOT = "snapshot."
REVISION = "revision."


class EngineIndex(BaseModel):
    """Finished cache entries of one engine-cache claim, by cacheKey, as the index ConfigMap holds them.

    The ConfigMap's data has one key per cacheKey (hex digests are valid keys) whose value is the build's
    success summary as JSON; a resource whose cacheKey is in the index needs no build Job.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    entries: dict[str, BuildSucceeded] = {}
    snapshots: dict[str, DownloadSucceeded] = {}
    resolutions: dict[str, RevisionResolved] = {}

    def get(self, cache_key: str) -> BuildSucceeded | None:
        """The summary of `cache_key`, or None when it was never built here."""
        return self.entries.get(cache_key)

    def snapshot(self, snapshot_key: str) -> DownloadSucceeded | None:
        """The download of `snapshot_key`, or None when it was never downloaded here."""
        return self.snapshots.get(snapshot_key)

    def resolved(self, download_key: str) -> str | None:
        """The commit the revision of `download_key` resolved to, if recorded."""
        found = self.resolutions.get(download_key)
        return found.commit if found is not None else None

    def record(self, summary: BuildSucceeded) -> EngineIndex:
        """A new index that includes `summary` (a cache hit is stored like the build it found)."""
        stored = summary.model_copy(update={"cache_hit": False})
        return EngineIndex(entries={**self.entries, summary.cache_key: stored})

    def record_download(self, summary: DownloadSucceeded) -> EngineIndex:
        """A new index with the snapshot of `summary` and, for a branch or tag, its resolution."""
        stored = summary.model_copy(update={"cache_hit": False})
        resolutions = dict(self.resolutions)
        if summary.revision != summary.commit:
            resolutions[summary.key] = RevisionResolved(
                repo=summary.repo, revision=summary.revision, commit=summary.commit
            )
        return self.model_copy(
            update={"snapshots": {**self.snapshots, summary.snapshot_key: stored}, "resolutions": resolutions}
        )

    def to_configmap_data(self) -> dict[str, str]:
        """The ConfigMap's `data`."""
        data = {key: summary.model_dump_json() for key, summary in sorted(self.entries.items())}
        data |= {f"{SNAPSHOT}{key}": value.model_dump_json() for key, value in self.snapshots.items()}
        data |= {f"{REVISION}{key}": value.model_dump_json() for key, value in self.resolutions.items()}
        return dict(sorted(data.items()))

    @classmethod
    def from_configmap_data(cls, data: Mapping[str, str] | None) -> EngineIndex:
        """Read what `to_configmap_data` wrote.

        An entry that does not parse (hand-edited, or written by an incompatible version) is left out: the
        key then looks unbuilt, the build Job finds the entry's manifest on the volume, exits at once and
        reports it again, which repairs the index.
        """
        entries: dict[str, BuildSucceeded] = {}
        snapshots: dict[str, DownloadSucceeded] = {}
        resolutions: dict[str, RevisionResolved] = {}
        for key, value in (data or {}).items():
            try:
                if key.startswith(SNAPSHOT):
                    download = DownloadSucceeded.model_validate_json(value)
                    if download.snapshot_key == key.removeprefix(SNAPSHOT):
                        snapshots[download.snapshot_key] = download
                elif key.startswith(REVISION):
                    resolutions[key.removeprefix(REVISION)] = RevisionResolved.model_validate_json(value)
                else:
                    summary = BuildSucceeded.model_validate_json(value)
                    if summary.cache_key == key:
                        entries[key] = summary
            except ValidationError:
                continue
        return cls(entries=entries, snapshots=snapshots, resolutions=resolutions)


def record_build(
    client: KubeClient,
    *,
    namespace: str,
    claim: str,
    claim_uid: str | None,
    summary: BuildSucceeded | DownloadSucceeded,
) -> dict[str, Any]:
    """Add `summary` to the engine index of `claim`, creating the index on first use; return the index.

    The index is owned by its claim: when the claim (and every engine in it) is deleted, so is the index.
    """
    name = names.engine_index(claim)
    if isinstance(summary, DownloadSucceeded):
        data = EngineIndex().record_download(summary).to_configmap_data()
    else:
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
