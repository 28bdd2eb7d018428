"""Where a resource's engine is: ready (found or built), building, or blocked, and why.

Read from the engine index, the build Job and its pods. A failed build's step and last error line come
from the builder's own termination message and reach the condition message verbatim; a build pod the
scheduler cannot place is described in the spec's fields and GPU figures (`placement`). Each state that
is not ready also says, in one sentence for the Ready condition, what to do or where to look. Pure:
imports the api models, the facts, placement and the builder's result format.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_builder.result_format import BuildFailed, BuildSucceeded, parse_termination_message
from engine_builder.weights_format import DownloadFailed, DownloadSucceeded
from mmd_operator.api.v1alpha1 import EngineSource, MultimodalDeploymentStatus, WeightsSource
from mmd_operator.facts import JobFacts, Observed, PodFacts, PodPhase
from mmd_operator.judgement.placement import GpuDemand, unschedulable

ENGINE_READY = "EngineReady"


@dataclass(frozen=True)
class EngineState:
    """The engine of one resource's current cacheKey."""

    ready: bool
    reason: str
    message: str
    # One sentence for the Ready condition while the engine is not ready: what is wrong and what to do.
    summary: str = ""
    # Where a ready engine (or, on trtllm-serve, the weights) came from.
    source: EngineSource | WeightsSource | None = None
    # A success the engine index does not hold yet (a build, or a download on trtllm-serve).
    record: BuildSucceeded | DownloadSucceeded | None = None
    # The build failed for an earlier generation and the spec has changed since: build again.
    retry: bool = False
    # Nothing will change until the user acts (a failed build, a missing Secret or claim).
    failed: bool = False
    # Waiting on the engine-cache claim to be bound.
    waiting_for_claim: bool = False


# 128 + 9: what a container's exit code is when the kernel or the kubelet sent SIGKILL.
SIGKILL_EXIT = 137


def pod_result(pod: PodFacts) -> BuildSucceeded | BuildFailed | None:
    """What a finished build pod reported, or None while it has not finished."""
    if pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        return None
    result = parse_termination_message(pod.termination_message)
    if isinstance(result, BuildFailed) and result.exit_code is None and pod.exit_code:
        result = result.model_copy(update={"exit_code": pod.exit_code})
    return result


def describe_failure(failure: BuildFailed | DownloadFailed, program: str = "builder") -> str:
    """A failed build (or download) in one line: the step, its exit code and the program's reason."""
    code = f" (exit code {failure.exit_code})" if failure.exit_code is not None else ""
    if failure.step is None:  # it died before reporting: the reason is its last log line
        if failure.exit_code is None:
            return failure.reason
        killed = ", killed by SIGKILL (out of memory or evicted)" if failure.exit_code == SIGKILL_EXIT else ""
        return f"the {program} exited{code}{killed} without a result; its last line: {failure.reason}"
    return f"step {failure.step} failed{code}: {failure.reason}"


def newest(pods: tuple[PodFacts, ...]) -> list[PodFacts]:
    """`pods`, the newest first."""
    return sorted(pods, key=lambda pod: (pod.meta.created is not None, pod.meta.created), reverse=True)


def _previous_engine(
    previous: MultimodalDeploymentStatus | None, cache_key: str
) -> tuple[str | None, int | None]:
    """The previous EngineReady reason and generation, when it was about the same cacheKey."""
    if previous is None or previous.engine is None or previous.engine.cache_key != cache_key:
        return None, None
    for condition in previous.conditions:
        if condition.type == ENGINE_READY:
            return condition.reason, condition.observed_generation
    return None, None


def _ready(
    cache_key: str,
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    summary: BuildSucceeded,
    *,
    record: BuildSucceeded | None = None,
) -> EngineState:
    known = previous.engine if previous is not None and previous.engine is not None else None
    reason, _ = _previous_engine(previous, cache_key)
    if known is not None and known.cache_key == cache_key and known.source is not None:
        source = known.source
    elif reason is not None or record is not None:
        source = EngineSource.BUILT  # this resource saw it being built
    else:
        source = EngineSource.CACHE_HIT
    built = f"built in {summary.seconds:.0f} s" if summary.seconds else "built"
    size = f"{summary.total_bytes / 1e9:.1f} GB"
    where = "found in the engine cache" if source is EngineSource.CACHE_HIT else built
    return EngineState(
        ready=True,
        reason=source.value,
        message=f"engine {cache_key} {where} ({size}, TensorRT-LLM {summary.versions.tensorrt_llm})",
        source=source,
        record=record,
    )


def _job_state(
    cache_key: str,
    job: JobFacts,
    pods: tuple[PodFacts, ...],
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    generation: int,
    demand: GpuDemand,
) -> EngineState:
    results = [(pod, pod_result(pod)) for pod in newest(pods)]
    finished = [(pod, result) for pod, result in results if result is not None]
    built = next((r for _, r in finished if isinstance(r, BuildSucceeded) and r.cache_key == cache_key), None)
    if built is not None:
        # The pod's own report is the result; the Job controller marks the Job Complete a moment later.
        return _ready(cache_key, observed, previous, built, record=built)
    logs = f"kubectl logs job/{job.meta.name}"
    if job.succeeded:
        last = finished[0][1] if finished else None
        if isinstance(last, BuildSucceeded) and last.cache_key == cache_key:
            return _ready(cache_key, observed, previous, last, record=last)
        if isinstance(last, BuildFailed):
            message = describe_failure(last)
        elif isinstance(last, BuildSucceeded):
            message = f"the build Job {job.meta.name} reported cacheKey {last.cache_key}, not {cache_key}"
        else:
            message = f"the build Job {job.meta.name} completed without a result"
        return _failed(message, logs, cache_key, previous, generation)
    if job.failed:
        failures = [result for _, result in finished if isinstance(result, BuildFailed)]
        if failures:
            message = describe_failure(failures[0])
            if job.failure and "BackoffLimitExceeded" not in job.failure:
                message += f" ({job.failure})"
        else:
            message = f"the build Job {job.meta.name} failed: {job.failure or 'no pod reported why'}"
        return _failed(message, logs, cache_key, previous, generation)
    earlier = [result for _, result in finished if isinstance(result, BuildFailed)]
    retrying = ""
    if earlier:
        retrying = f" (attempt {len(earlier) + 1}; the last one: {describe_failure(earlier[0])})"
    running = [pod for pod in newest(pods) if pod.phase is PodPhase.RUNNING and not pod.meta.deleting]
    if running:
        pod = running[0]
        where = f"in pod {pod.meta.name} on {pod.node or 'a node'}{retrying}"
        return EngineState(
            ready=False,
            reason="BuildRunning",
            message=f"building engine {cache_key} {where}",
            summary=f"the engine is building {where}: follow it with {logs} -f.",
        )
    pending = [pod for pod in newest(pods) if pod.phase is PodPhase.PENDING and not pod.meta.deleting]
    for pod in pending:
        if pod.unschedulable:
            unplaced = unschedulable(pod, demand, observed.nodes)
            return EngineState(
                ready=False, reason=unplaced.reason, message=unplaced.message, summary=unplaced.summary
            )
    if pending:
        name = pending[0].meta.name
        return EngineState(
            ready=False,
            reason="BuildPending",
            message=f"build pod {name} is starting{retrying}",
            summary=f"build pod {name} is starting{retrying}: kubectl describe pod {name} shows what it "
            "waits for.",
        )
    if earlier:
        # Every pod so far failed and none runs: the Job controller retries or gives up next.
        message = (
            f"build attempt {len(earlier)} failed: {describe_failure(earlier[0])}; the Job retries it or "
            "gives up"
        )
        return EngineState(
            ready=False, reason="BuildRunning", message=message, summary=f"{message}: {logs} has the rest."
        )
    starting = f"build Job {job.meta.name} is starting"
    return EngineState(
        ready=False,
        reason="BuildPending",
        message=starting,
        summary=f"{starting}: kubectl describe job {job.meta.name} shows its pods.",
    )


def _failed(
    message: str, logs: str, cache_key: str, previous: MultimodalDeploymentStatus | None, generation: int
) -> EngineState:
    reason, seen_at = _previous_engine(previous, cache_key)
    # A failure this resource reported for an older generation: the spec changed since, so try again.
    retry = reason == "BuildFailed" and seen_at is not None and seen_at < generation
    summary = f"{message}; {logs} has the rest, and a change of the spec (or deleting the Job) builds again."
    return EngineState(
        ready=False, reason="BuildFailed", message=message, summary=summary, retry=retry, failed=not retry
    )


def _waiting_for_claim(observed: Observed) -> EngineState:
    assert observed.claim is not None
    name = observed.claim.meta.name
    message = f"waiting for the engine-cache claim {name} to be bound (it is {observed.claim.phase})"
    return EngineState(
        ready=False,
        reason="BuildPending",
        message=message,
        summary=f"the build is {message}: kubectl describe pvc {name} says why.",
        waiting_for_claim=True,
    )


def engine_state(
    cache_key: str,
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    generation: int,
    demand: GpuDemand,
) -> EngineState:
    """The state of the engine `cache_key` as `observed`.

    `previous` is the resource's last status, and `demand` what its build pod asks of the scheduler.
    """
    if observed.engine is not None and observed.engine.cache_key == cache_key:
        return _ready(cache_key, observed, previous, observed.engine)
    unbound = observed.claim is not None and observed.claim.phase != "Bound"
    if observed.job is not None and not observed.job.meta.deleting:
        state = _job_state(
            cache_key, observed.job, observed.build_pods, observed, previous, generation, demand
        )
        # A build that cannot start for want of storage is waiting on the claim, whatever its pod says.
        return _waiting_for_claim(observed) if unbound and not (state.failed or state.retry) else state
    if observed.missing:
        first = observed.missing[0]
        message = "; ".join(f"{missing.field}: {missing.message}" for missing in observed.missing)
        summary = "; ".join(f"{m.field}: {m.message}: {m.fix}" for m in observed.missing) + "."
        return EngineState(
            ready=False, reason=first.kind.value, message=message, summary=summary, failed=True
        )
    if unbound:
        return _waiting_for_claim(observed)
    return EngineState(
        ready=False,
        reason="BuildPending",
        message=f"creating the build Job of engine {cache_key}",
        summary=f"creating the build Job of engine {cache_key}; nothing to do yet.",
    )
