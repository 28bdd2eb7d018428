"""Download one Hugging Face snapshot into the cache, once, atomically: the trtllm-serve runtime's Job.

The revision is resolved first (a 40-hex commit is used as is; a branch or tag is asked of the Hub's
model API), so the snapshot is stored under the key of its commit (`weights_format`). Then, holding the
lock of that key, like a build:

    <snapshot key>/            a finished entry: the snapshot and manifest.json, written last
    .work-<snapshot key>/      the download in progress
    .lock-<snapshot key>       flock-ed by the one downloader of that key
    .trash-<snapshot key>.<n>/ an incomplete entry moved aside before it is deleted

The files are fetched with `huggingface_hub.snapshot_download` at the resolved commit (it honours
HF_ENDPOINT, so a mirror or a local double of the Hub serves it), every file is hashed and synced, the
manifest written and synced, and the work directory renamed into place: a killed download leaves nothing
that looks complete, and the next downloader of the key removes what it left. The token is read from a
file the Job mounts from its Secret and never printed. Imports the weights format, the build runner's
cache helpers and, when it runs, huggingface_hub.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from engine_builder.job_report import MANIFEST_NAME
from engine_builder.plan_runner import (
    CacheLayout,
    duration,
    file_problems,
    fsync_dir,
    locked,
    read_manifest,
    record_files,
    size,
    write_manifest,
)
from engine_builder.progress import DownloadMeter, beating
from engine_builder.weights_format import (
    DownloadPlan,
    DownloadSucceeded,
    WeightsManifest,
    is_commit,
    snapshot_directory,
    weights_key,
)

Log = Callable[[str], None]
DEFAULT_ENDPOINT = "https://huggingface.co"
# What huggingface_hub keeps beside the files of a local-dir download (its own metadata and locks).
HUB_METADATA = ".cache"


class WeightsError(Exception):
    """The download cannot finish; `reason` is the one line reported to the operator and the log."""

    def __init__(self, reason: str, *, step: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.step = step


def endpoint() -> str:
    """The Hub the download talks to: HF_ENDPOINT, as huggingface_hub reads it, or the public Hub."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def _quiet_hub() -> None:
    """huggingface_hub settings for a Job: no progress bars or telemetry, its home in a scratch directory.

    Set before the first import of huggingface_hub, which reads them then.
    """
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="hf-home-"))


def _explain(error: Exception, plan: DownloadPlan, step: str) -> WeightsError:
    """The Hub's refusal as one line that names the spec's fields."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{plan.repo} on {endpoint()}"
    if isinstance(error, RevisionNotFoundError):
        reason = (
            f"revision {plan.revision} does not exist in {where}: name a branch, tag or commit of the "
            "repository in spec.model.source.huggingface.revision"
        )
    elif isinstance(error, GatedRepoError):
        reason = (
            f"{where} is gated: accept its terms on the Hub with the account whose token "
            "spec.model.source.huggingface.tokenSecretRef names"
        )
    elif isinstance(error, RepositoryNotFoundError):
        reason = (
            f"repository {where} does not exist, or is private and the token "
            "(spec.model.source.huggingface.tokenSecretRef) does not grant access to it"
        )
    elif isinstance(error, LocalEntryNotFoundError | OSError) and not isinstance(error, HfHubHTTPError):
        reason = f"cannot reach {endpoint()}: {' '.join(str(error).split())}"
    else:
        reason = f"the Hub refused the {step} of {where}: {' '.join(str(error).split())}"
    return WeightsError(reason, step=step)


def resolve(plan: DownloadPlan, token: str | None) -> str:
    """The commit `plan.revision` names: itself when it is one, else the Hub's answer."""
    if is_commit(plan.revision):
        return plan.revision
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint(), token=token or False).model_info(plan.repo, revision=plan.revision)
    except Exception as error:
        raise _explain(error, plan, "resolve") from None
    if not info.sha or not is_commit(info.sha):
        raise WeightsError(f"the Hub named no commit for {plan.repo}@{plan.revision}", step="resolve")
    return info.sha


def _listing(plan: DownloadPlan, commit: str, token: str | None) -> tuple[int, int | None]:
    """How many files the snapshot has and their bytes (None when the Hub leaves a size out)."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint(), token=token or False).model_info(
            plan.repo, revision=commit, files_metadata=True
        )
    except Exception as error:
        raise _explain(error, plan, "download") from None
    siblings = info.siblings or []
    sizes = [sibling.size for sibling in siblings]
    return len(siblings), None if None in sizes else sum(s for s in sizes if s is not None)


def inspect_snapshot(entry: Path, snapshot_key: str) -> tuple[WeightsManifest | None, list[str]]:
    """The manifest of a snapshot entry and what is wrong with the entry (nothing when it is complete)."""
    manifest, problems = read_manifest(entry, WeightsManifest)
    if manifest is None:
        return None, problems
    if manifest.snapshot_key != snapshot_key:
        problems.append(f"{entry / MANIFEST_NAME} is for snapshot {manifest.snapshot_key}")
    return manifest, problems + file_problems(entry / snapshot_directory(manifest.repo), manifest.files)


def _summary(
    plan: DownloadPlan, manifest: WeightsManifest, *, cache_hit: bool, started: float
) -> DownloadSucceeded:
    return DownloadSucceeded(
        key=plan.key,
        repo=plan.repo,
        revision=plan.revision,
        commit=manifest.commit,
        snapshot_key=manifest.snapshot_key,
        files=len(manifest.files),
        total_bytes=sum(record.size for record in manifest.files.values()),
        seconds=round(time.monotonic() - started, 1),
        cache_hit=cache_hit,
    )


def download(
    plan: DownloadPlan, cache_dir: Path, *, token: str | None = None, log: Log = print
) -> DownloadSucceeded:
    """Make the snapshot of `plan` complete in `cache_dir`, downloading it unless it already is.

    Raises:
        WeightsError: the plan is refused, the revision does not resolve, or the download fails.
    """
    started = time.monotonic()
    if plan.key != weights_key(plan.repo, plan.revision):
        raise WeightsError(f"the plan's key {plan.key} is not the key of {plan.repo}@{plan.revision}")
    _quiet_hub()
    commit = resolve(plan, token)
    if commit != plan.revision:
        log(f"{plan.repo}@{plan.revision} is commit {commit}")
    snapshot_key = weights_key(plan.repo, commit)
    layout = CacheLayout(cache_dir, snapshot_key)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with locked(layout.lock, log):
            manifest, problems = inspect_snapshot(layout.entry, snapshot_key)
            if manifest is not None and not problems:
                log(f"snapshot {layout.entry} is complete: nothing to download")
                return _summary(plan, manifest, cache_hit=True, started=started)
            if layout.entry.exists():
                log(f"snapshot {layout.entry} is incomplete ({problems[0]}); downloading it again")
                layout.entry.rename(layout.trash())
            for leftover in layout.leftovers():
                log(f"removing {leftover.name}, left by a download of this snapshot that did not finish")
                shutil.rmtree(leftover)
            layout.work.mkdir()
            try:
                manifest = _download_into(layout.work, plan, commit, snapshot_key, token, log)
            except BaseException:
                shutil.rmtree(layout.work, ignore_errors=True)
                raise
            layout.work.rename(layout.entry)
            fsync_dir(cache_dir)
    except OSError as error:
        raise WeightsError(f"the engine cache {cache_dir}: {error}", step="store") from None
    summary = _summary(plan, manifest, cache_hit=False, started=started)
    log(
        f"snapshot {layout.entry} is ready: {summary.files} files, {size(summary.total_bytes)} in "
        f"{duration(summary.seconds)}"
    )
    return summary


def _download_into(
    work: Path, plan: DownloadPlan, commit: str, snapshot_key: str, token: str | None, log: Log
) -> WeightsManifest:
    from huggingface_hub import snapshot_download

    target = work / snapshot_directory(plan.repo)
    files_total, bytes_total = _listing(plan, commit, token)
    total = f"{files_total} files, {size(bytes_total)}" if bytes_total is not None else f"{files_total} files"
    log(f"downloading {plan.repo}@{commit} ({total}) from {endpoint()} into {target}")
    meter = DownloadMeter(target, bytes_total=bytes_total, files_total=files_total, metadata=HUB_METADATA)
    try:
        with beating(meter.sample, log):
            snapshot_download(
                plan.repo, revision=commit, local_dir=target, token=token or False, endpoint=endpoint()
            )
    except Exception as error:
        raise _explain(error, plan, "download") from None
    shutil.rmtree(target / HUB_METADATA, ignore_errors=True)
    files = record_files(target)
    manifest = WeightsManifest(
        snapshot_key=snapshot_key,
        repo=plan.repo,
        commit=commit,
        files=files,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    for directory in sorted({path.parent for path in target.rglob("*")} | {target}, reverse=True):
        fsync_dir(directory)
    write_manifest(work, manifest)
    log(f"hashed {len(files)} files, {size(sum(f.size for f in files.values()))}; wrote {MANIFEST_NAME}")
    return manifest
