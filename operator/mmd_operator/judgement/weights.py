"""Where a trtllm-serve resource's weights are: ready, downloading, or blocked, and why.

Ready means found in the index, downloaded by the Job, or on the model.source.pvc claim.

Read from the engine index (the recorded resolution of the revision and the snapshot of its commit), the
download Job and its pods. A failed download's step and reason come from the download program's own
termination message (`weights_format`) and reach the WeightsReady condition message verbatim: a revision
that does not exist, a gated repository, an unreachable Hub. Each state that is not ready also says, in
one sentence for the Ready condition, what to do or where to look. Pure: imports the api models, the
facts, the engine judgement's helpers and the builder's weights format.
"""

from __future__ import annotations

from engine_builder.weights_format import (
    DownloadFailed,
    DownloadPlan,
    DownloadSucceeded,
    parse_termination_message,
    weights_key,
)
from mmd_operator.api.v1alpha1 import MultimodalDeploymentStatus, WeightsSource
from mmd_operator.facts import JobFacts, Observed, PodFacts, PodPhase
from mmd_operator.judgement.engine import EngineState, describe_failure, newest

WEIGHTS_READY = "WeightsReady"


def _result(pod: PodFacts) -> DownloadSucceeded | DownloadFailed | None:
    if pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        return None
    result = parse_termination_message(pod.termination_message)
    if isinstance(result, DownloadFailed) and result.exit_code is None and pod.exit_code:
        result = result.model_copy(update={"exit_code": pod.exit_code})
    return result


def _answers(report: DownloadSucceeded, download: DownloadPlan) -> bool:
    """Whether `report` is the download of `download`, its snapshot stored under its commit's key.

    A report that is not (another plan's, a hand-made line) would record a resolution that no later
    lookup finds; it counts as no result.
    """
    same = (report.key, report.repo, report.revision) == (download.key, download.repo, download.revision)
    return same and report.snapshot_key == weights_key(report.repo, report.commit)


def _previous(previous: MultimodalDeploymentStatus | None, key: str) -> tuple[str | None, int | None]:
    """The previous WeightsReady reason and generation, when it was about the same download."""
    if previous is None or previous.weights is None or previous.weights.download_key != key:
        return None, None
    for condition in previous.conditions:
        if condition.type == WEIGHTS_READY:
            return condition.reason, condition.observed_generation
    return None, None


def _ready(
    download: DownloadPlan,
    summary: DownloadSucceeded,
    previous: MultimodalDeploymentStatus | None,
    *,
    fresh: bool,
) -> EngineState:
    reason, _ = _previous(previous, download.key)
    known = previous.weights if previous is not None else None
    if known is not None and known.download_key == download.key and known.source is not None:
        source = known.source
    elif fresh or reason is not None:
        source = WeightsSource.DOWNLOADED  # this resource saw it being downloaded
    else:
        source = WeightsSource.CACHE_HIT
    size = f"{summary.total_bytes / 1e9:.1f} GB"
    where = (
        "found in the engine cache"
        if source is WeightsSource.CACHE_HIT
        else f"downloaded in {summary.seconds:.0f} s"
    )
    return EngineState(
        ready=True,
        reason=source.value,
        message=f"{download.repo}@{download.revision} is commit {summary.commit}: snapshot "
        f"{summary.snapshot_key} {where} ({summary.files} files, {size})",
        source=source,
        record=summary if fresh else None,
    )


def _failed(
    message: str, logs: str, key: str, previous: MultimodalDeploymentStatus | None, generation: int
) -> EngineState:
    reason, seen_at = _previous(previous, key)
    retry = reason == "DownloadFailed" and seen_at is not None and seen_at < generation
    summary = (
        f"{message}; {logs} has the rest, and a change of the spec (or deleting the Job) downloads again."
    )
    return EngineState(
        ready=False, reason="DownloadFailed", message=message, summary=summary, retry=retry, failed=not retry
    )


def _job_state(
    download: DownloadPlan,
    job: JobFacts,
    pods: tuple[PodFacts, ...],
    previous: MultimodalDeploymentStatus | None,
    generation: int,
) -> EngineState:
    finished = [(pod, result) for pod in newest(pods) if (result := _result(pod)) is not None]
    done = next((r for _, r in finished if isinstance(r, DownloadSucceeded) and _answers(r, download)), None)
    if done is not None:
        return _ready(download, done, previous, fresh=True)
    logs = f"kubectl logs job/{job.meta.name}"
    failures = [result for _, result in finished if isinstance(result, DownloadFailed)]
    if job.failed or job.succeeded:
        if failures:
            message = describe_failure(failures[0], "download")
        else:
            why = job.failure or "no pod said why"
            message = f"the download Job {job.meta.name} ended without a result ({why})"
        return _failed(message, logs, download.key, previous, generation)
    retrying = (
        f" (attempt {len(failures) + 1}; the last one: {describe_failure(failures[0], 'download')})"
        if failures
        else ""
    )
    what = f"{download.repo}@{download.revision}"
    for pod in newest(pods):
        if pod.meta.deleting:
            continue
        if pod.phase is PodPhase.RUNNING:
            where = f"in pod {pod.meta.name} on {pod.node or 'a node'}{retrying}"
            return EngineState(
                ready=False,
                reason="Downloading",
                message=f"downloading {what} {where}",
                summary=f"the weights are downloading {where}: follow it with {logs} -f.",
            )
        if pod.phase is PodPhase.PENDING and pod.unschedulable:
            message = f"download pod {pod.meta.name} cannot be scheduled: {pod.unschedulable}"
            return EngineState(
                ready=False,
                reason="DownloadPending",
                message=message,
                summary=f"{message}: check spec.build.pod (node selector, tolerations).",
            )
    starting = f"download Job {job.meta.name} of {what} is starting{retrying}"
    return EngineState(
        ready=False,
        reason="DownloadPending",
        message=starting,
        summary=f"{starting}: kubectl describe job {job.meta.name} shows its pods.",
    )


def weights_state(
    download: DownloadPlan | None,
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    generation: int,
) -> EngineState:
    """The state of the weights of `download` (None: a PersistentVolumeClaim source) as `observed`."""
    if observed.missing:
        first = observed.missing[0]
        message = "; ".join(f"{missing.field}: {missing.message}" for missing in observed.missing)
        summary = "; ".join(f"{m.field}: {m.message}: {m.fix}" for m in observed.missing) + "."
        return EngineState(
            ready=False, reason=first.kind.value, message=message, summary=summary, failed=True
        )
    if download is None:
        return EngineState(
            ready=True,
            reason=WeightsSource.VOLUME.value,
            message="served from the model.source.pvc claim: nothing to download",
            source=WeightsSource.VOLUME,
        )
    if observed.weights is not None:
        return _ready(download, observed.weights, previous, fresh=False)
    unbound = observed.claim is not None and observed.claim.phase != "Bound"
    if observed.job is not None and not observed.job.meta.deleting:
        state = _job_state(download, observed.job, observed.build_pods, previous, generation)
        if not unbound or state.ready or state.failed or state.retry:
            return state
    if unbound:
        assert observed.claim is not None
        name = observed.claim.meta.name
        message = f"waiting for the engine-cache claim {name} to be bound (it is {observed.claim.phase})"
        return EngineState(
            ready=False,
            reason="DownloadPending",
            message=message,
            summary=f"the download is {message}: kubectl describe pvc {name} says why.",
            waiting_for_claim=True,
        )
    what = f"{download.repo}@{download.revision}"
    return EngineState(
        ready=False,
        reason="DownloadPending",
        message=f"creating the download Job of {what}",
        summary=f"creating the download Job of {what}; nothing to do yet.",
    )
