"""The weights download: its plan, the key of a snapshot, and what the download Job reports.

The trtllm-serve runtime builds nothing: a download Job puts the Hugging Face snapshot of one repository at
one commit into the engine cache, once per claim, and the serving pods read it from there. The cache
holds it content-addressed:

    <cache dir>/<snapshot key>/manifest.json       written last: repository, commit, each file's size, sha256
    <cache dir>/<snapshot key>/<repository name>/  the snapshot (what `trtllm-serve` is given)

`weights_key(repo, revision)` names both the download (one Job per key: the key of what a resource names,
a branch or a commit) and the snapshot (the key of the commit the revision resolved to). A 40-hex commit
is its own resolution, so its two keys are one. A branch or tag is resolved by the Job, which reports the
commit; the operator records the resolution next to the engines in the claim's index, and every later
resource naming that repository and revision is served the recorded commit without a Job.

The termination message is one JSON line, `DownloadSucceeded` or `DownloadFailed`, in `job_report`'s
protocol, the build's too.

Pure pydantic and standard library; imports `job_report`. The operator may import this module.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from engine_builder.job_report import FileRecord, JobFailed, JobReports, JobSucceeded
from engine_builder.job_report import Frozen as _Frozen

WEIGHTS_FORMAT_VERSION = 1
WEIGHTS_KEY_LENGTH = 20
_COMMIT = re.compile(r"[0-9a-f]{40}")


def is_commit(revision: str) -> bool:
    """Whether `revision` is a full commit hash (which needs no resolving)."""
    return _COMMIT.fullmatch(revision) is not None


def weights_key(repo: str, revision: str) -> str:
    """The key of `repo` at `revision`.

    Of a download when `revision` is what a spec names, of a snapshot when it is the commit that revision
    resolved to (the same key when a spec names the commit).
    """
    identity = {"format": WEIGHTS_FORMAT_VERSION, "huggingface": repo, "revision": revision}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:WEIGHTS_KEY_LENGTH]


def snapshot_directory(repo: str) -> str:
    """The snapshot's directory inside its entry: the repository's own name (what `/v1/models` lists)."""
    return repo.rsplit("/", 1)[-1]


class DownloadPlan(_Frozen):
    """What the download Job fetches. Holds no secret: the token comes from a file the Job mounts."""

    format_version: int = WEIGHTS_FORMAT_VERSION
    # The key of (repo, revision): the Job's, and the snapshot's when the revision is a commit.
    key: str
    repo: str
    revision: str


class WeightsManifest(_Frozen):
    """The last file written into a snapshot entry; its presence with matching sizes means complete."""

    format_version: int = WEIGHTS_FORMAT_VERSION
    snapshot_key: str
    repo: str
    commit: str
    # Paths relative to the snapshot directory, `/`-separated.
    files: dict[str, FileRecord]
    created: str


class DownloadSucceeded(JobSucceeded):
    """The success summary: what the operator records about a snapshot and the revision's resolution."""

    format_version: int = WEIGHTS_FORMAT_VERSION
    result: Literal["downloaded"] = "downloaded"
    # The download's key (of the revision a spec names) and the snapshot's (of the commit it resolved to).
    key: str
    repo: str
    revision: str
    commit: str
    snapshot_key: str
    files: int


class DownloadFailed(JobFailed):
    """Why a download failed; `reason` is the one line a person reads (in the condition message).

    Its `step` is resolve (the revision), download (the files) or store (the cache volume).
    """

    format_version: int = WEIGHTS_FORMAT_VERSION
    key: str | None = None


class RevisionResolved(_Frozen):
    """A recorded resolution: `repo` at `revision` is served `commit` from now on in this claim."""

    result: Literal["resolved"] = "resolved"
    repo: str
    revision: str
    commit: str


# The one JSON line of a result for `/dev/termination-log`, and its reading back (`job_report`).
REPORTS = JobReports.of(
    DownloadSucceeded, DownloadFailed, "the download container left no termination message"
)
termination_message = REPORTS.message
parse_termination_message = REPORTS.parse
