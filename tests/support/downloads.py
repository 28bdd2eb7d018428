"""A weights download's report as the download Job writes it, and a resource's `build` section that makes
kwok's fake download pod end with it (the local cluster runs no download program: its pods end as the
fault-injection stages script them, `localcluster.mmd.dev/fault: succeed` or `fail`)."""

from __future__ import annotations

import hashlib
from typing import Any

from engine_builder.weights_format import DownloadFailed, DownloadSucceeded, termination_message, weights_key
from mmd_testbed.localcluster.stages import (
    FAULT_EXIT_CODE_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)


def commit_of(repo: str, revision: str) -> str:
    """The made-up commit a branch of `repo` resolves to in these tests (a commit resolves to itself)."""
    if len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return revision
    return hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()


def succeeded(repo: str, revision: str = "main", *, seconds: float = 42.0) -> DownloadSucceeded:
    """What the download Job of `repo` at `revision` reports."""
    commit = commit_of(repo, revision)
    return DownloadSucceeded(
        key=weights_key(repo, revision),
        repo=repo,
        revision=revision,
        commit=commit,
        snapshot_key=weights_key(repo, commit),
        files=12,
        total_bytes=7_514_000_000,
        seconds=seconds,
    )


def scripted(
    report: DownloadSucceeded | DownloadFailed | None, *, exit_code: int | None = None
) -> dict[str, Any]:
    """A `spec.build` whose download pod ends with `report` (None: no message at all) on the local cluster."""
    annotations = {FAULT_MESSAGE_ANNOTATION: termination_message(report)} if report is not None else {}
    if exit_code is not None:
        annotations[FAULT_EXIT_CODE_ANNOTATION] = str(exit_code)
    fault = "succeed" if isinstance(report, DownloadSucceeded) else "fail"
    return {"backoffLimit": 0, "pod": {"labels": {FAULT_LABEL: fault}, "annotations": annotations}}
