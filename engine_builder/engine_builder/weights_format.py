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

The termination message is one JSON line, like a build's: `DownloadSucceeded` or `DownloadFailed`.

Pure pydantic and standard library; imports nothing of ours. The operator may import this module.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

WEIGHTS_FORMAT_VERSION = 1
WEIGHTS_KEY_LENGTH = 20
MANIFEST_NAME = "manifest.json"
# Kubernetes keeps at most 4096 bytes of a termination message; a reason is clipped well below.
REASON_LIMIT = 480
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


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DownloadPlan(_Frozen):
    """What the download Job fetches. Holds no secret: the token comes from a file the Job mounts."""

    format_version: int = WEIGHTS_FORMAT_VERSION
    # The key of (repo, revision): the Job's, and the snapshot's when the revision is a commit.
    key: str
    repo: str
    revision: str


class FileRecord(_Frozen):
    """One file of a snapshot."""

    size: int
    sha256: str


class WeightsManifest(_Frozen):
    """The last file written into a snapshot entry; its presence with matching sizes means complete."""

    format_version: int = WEIGHTS_FORMAT_VERSION
    snapshot_key: str
    repo: str
    commit: str
    # Paths relative to the snapshot directory, `/`-separated.
    files: dict[str, FileRecord]
    created: str


class DownloadSucceeded(_Frozen):
    """The success summary: what the operator records about a snapshot and the revision's resolution."""

    result: Literal["downloaded"] = "downloaded"
    format_version: int = WEIGHTS_FORMAT_VERSION
    key: str
    repo: str
    revision: str
    commit: str
    snapshot_key: str
    files: int
    total_bytes: int
    seconds: float
    # True when the snapshot was already complete (another Job, an earlier run): nothing was fetched.
    cache_hit: bool = False


class DownloadFailed(_Frozen):
    """Why a download failed; `reason` is the one line a person reads (in the condition message)."""

    result: Literal["failed"] = "failed"
    format_version: int = WEIGHTS_FORMAT_VERSION
    key: str | None = None
    # resolve (the revision), download (the files) or store (the cache volume); None: it died first.
    step: str | None = None
    exit_code: int | None = None
    reason: str


DownloadResult = Annotated[DownloadSucceeded | DownloadFailed, Field(discriminator="result")]
_RESULT: TypeAdapter[DownloadSucceeded | DownloadFailed] = TypeAdapter(DownloadResult)


def termination_message(result: DownloadSucceeded | DownloadFailed) -> str:
    """The one JSON line for `/dev/termination-log`."""
    if isinstance(result, DownloadFailed) and len(result.reason) > REASON_LIMIT:
        result = result.model_copy(update={"reason": result.reason[: REASON_LIMIT - 1] + "…"})
    return result.model_dump_json()


def parse_termination_message(text: str | None) -> DownloadSucceeded | DownloadFailed:
    """Read a download container's termination message; never raises.

    The last line that is one of our results wins; anything else becomes a failure whose reason is the
    last non-empty line (a crash's log tail under `FallbackToLogsOnError`).
    """
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        try:
            return _RESULT.validate_json(line)
        except ValidationError:
            continue
    reason = lines[-1][:REASON_LIMIT] if lines else "the download container left no termination message"
    return DownloadFailed(reason=reason)


class RevisionResolved(_Frozen):
    """A recorded resolution: `repo` at `revision` is served `commit` from now on in this claim."""

    result: Literal["resolved"] = "resolved"
    repo: str
    revision: str
    commit: str
