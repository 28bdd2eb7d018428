"""Where a resource's artifact is, whatever its runtime: ready, being made by its Job, or blocked, and why.

Each runtime makes one artifact before it serves: the triton-trtllm-engine runtime an engine built by a
build Job (`judgement.triton`), the trtllm-serve runtime a Hugging Face snapshot fetched by a download Job
(`judgement.trtllm_serve`). Both Jobs are shared by every resource with the same key, report in the same
protocol (one JSON line, `engine_builder.job_report`), and are judged here by the same rules: a success the
Job's pod reported is the result; a Job that ended without one failed, with the program's own step, exit
code and last line; a running pod (with how far it is, `judgement.progress`), a pending pod, a pod the
scheduler cannot place, a Job that is starting, a claim not yet bound and a missing Secret or source claim
each say what is happening and, in one sentence for the Ready condition, what to do or where to look. A
runtime supplies its words and what counts as its success (`ArtifactRules`). Pure: imports the api models,
the facts, the progress judgement and the builder's job report and progress formats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from engine_builder.job_report import JobFailed
from engine_builder.progress_format import BuildProgress, DownloadProgress
from mmd_operator.api.v1alpha1 import ArtifactProgress, MultimodalDeploymentStatus
from mmd_operator.facts import JobFacts, Observed, PodFacts, PodPhase
from mmd_operator.judgement.progress import assess

# 128 + 9: what a container's exit code is when the kernel or the kubelet sent SIGKILL.
SIGKILL_EXIT = 137
# Where the spec sets the Job pod's memory (a build's and a download's alike).
JOB_MEMORY_FIELD = "spec.build.pod.resources.limits.memory"

Record = TypeVar("Record")
Source = TypeVar("Source")


@dataclass(frozen=True)
class ArtifactState(Generic[Record, Source]):
    """The artifact of one resource's current key: its engine, or its weights on trtllm-serve."""

    ready: bool
    reason: str
    message: str
    # One sentence for the Ready condition while the artifact is not ready: what is wrong and what to do.
    summary: str = ""
    # Where a ready artifact came from (found in the cache, made by this resource's Job, ...).
    source: Source | None = None
    # A success the engine index does not hold yet, to record there.
    record: Record | None = None
    # The Job failed for an earlier generation and the spec has changed since: make it again.
    retry: bool = False
    # Nothing will change until the user acts (a failed Job, a missing Secret or claim).
    failed: bool = False
    # Waiting on the engine-cache claim to be bound.
    waiting_for_claim: bool = False
    # Where a ready artifact lies in the engine-cache claim (its directory's name), when it lies there.
    location: str | None = None
    # Its Job's pod runs (its progress is read again soon), and how far it is, from the last progress
    # line the pod printed.
    job_running: bool = False
    progress: ArtifactProgress | None = None


def not_ready(
    reason: str,
    message: str,
    summary: str = "",
    *,
    retry: bool = False,
    failed: bool = False,
    waiting_for_claim: bool = False,
) -> ArtifactState[Any, Any]:
    """An artifact that is not ready, with the sentence for Ready and the state's flags."""
    return ArtifactState(
        ready=False,
        reason=reason,
        message=message,
        summary=summary,
        retry=retry,
        failed=failed,
        waiting_for_claim=waiting_for_claim,
    )


@dataclass(frozen=True)
class JobWords:
    """How one runtime speaks of its artifact and of the Job that makes it."""

    # The status condition of the artifact (EngineReady, WeightsReady).
    condition: str
    # What the Job does ("build", "download": a build Job, its build pods) and its program ("builder").
    kind: str
    program: str
    # What the pods wait for ("engine", "weights") and the making of it ("the engine is building").
    artifact: str
    making: str
    verb: str
    # Reasons: the Job runs, is pending, failed.
    running: str
    pending: str
    failed: str
    # What a change of the spec does after a failure ("builds again").
    again: str
    # How the Job's termination message is read (its format's `parse_termination_message`).
    parse: Callable[[str | None], Any]

    @property
    def job(self) -> str:
        """The Job's kind, as messages name it."""
        return f"{self.kind} Job"


Result = TypeVar("Result", contravariant=True)


class ArtifactRules(Protocol[Result]):
    """What a runtime tells the shared rules: its words, what its Job makes and what its success is."""

    words: ClassVar[JobWords]

    @property
    def what(self) -> str:
        """What the Job makes ("engine 1a2b", "Qwen/Qwen2.5-VL-3B-Instruct@main"), for messages."""
        ...

    def ready(self, result: Result) -> ArtifactState[Any, Any] | None:
        """The ready state when `result` is this artifact's success (None when it is not)."""
        ...

    def unplaced(self, pod: PodFacts) -> ArtifactState[Any, Any]:
        """The state while the scheduler cannot place the Job's `pod`."""
        ...

    def mismatch(self, job: JobFacts, result: Result) -> str | None:
        """What to say of a Job that reported a success that is not this artifact's (None: nothing)."""
        ...


def newest(pods: tuple[PodFacts, ...]) -> list[PodFacts]:
    """`pods`, the newest first."""
    return sorted(pods, key=lambda pod: (pod.meta.created is not None, pod.meta.created), reverse=True)


def finished_result(
    pod: PodFacts, parse: Callable[[str | None], Result | JobFailed]
) -> Result | JobFailed | None:
    """What a finished Job pod reported, or None while it has not finished."""
    if pod.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        return None
    result = parse(pod.termination_message)
    if isinstance(result, JobFailed) and result.exit_code is None and pod.exit_code:
        result = result.model_copy(update={"exit_code": pod.exit_code})
    return result


def describe_failure(failure: JobFailed, program: str = "builder", oom_killed: str | None = None) -> str:
    """A failed Job in one line: the program's step, its exit code and the program's reason.

    `oom_killed` names the container the kernel killed for going over its memory limit, if it did.
    """
    code = f" (exit code {failure.exit_code})" if failure.exit_code is not None else ""
    if oom_killed is not None:
        where = f"in step {failure.step}" if failure.step is not None else f"its last line: {failure.reason}"
        return (
            f"the {program} was OOMKilled: the kernel killed {oom_killed}{code}; {where}; raise "
            f"{JOB_MEMORY_FIELD} (status.podResources says what the derived figure rests on)"
        )
    if failure.step is None:  # it died before reporting: the reason is its last log line
        if failure.exit_code is None:
            return failure.reason
        killed = ", killed by SIGKILL (out of memory or evicted)" if failure.exit_code == SIGKILL_EXIT else ""
        return f"the {program} exited{code}{killed} without a result; its last line: {failure.reason}"
    return f"step {failure.step} failed{code}: {failure.reason}"


def previous_condition(
    previous: MultimodalDeploymentStatus | None, words: JobWords, same_key: bool
) -> tuple[str | None, int | None]:
    """The previous artifact condition's reason and generation, when it was about the same key."""
    if previous is None or not same_key:
        return None, None
    for condition in previous.conditions:
        if condition.type == words.condition:
            return condition.reason, condition.observed_generation
    return None, None


def source_of(known: Source | None, made_here: bool, *, made: Source, found: Source) -> Source:
    """Where a ready artifact came from.

    What the status said of the same key before, else `made` when this resource saw its Job make it,
    else `found` (in the cache).
    """
    if known is not None:
        return known
    return made if made_here else found


def failed_state(
    message: str, job: JobFacts, words: JobWords, previous: tuple[str | None, int | None], generation: int
) -> ArtifactState[Any, Any]:
    """A failed Job: final until the spec changes, made again at once when it already has."""
    reason, seen_at = previous
    # A failure this resource reported for an older generation: the spec changed since, so try again.
    retry = reason == words.failed and seen_at is not None and seen_at < generation
    summary = (
        f"{message}; kubectl logs job/{job.meta.name} has the rest, and a change of the spec (or deleting "
        f"the Job) {words.again}."
    )
    return not_ready(words.failed, message, summary, retry=retry, failed=not retry)


def job_state(
    rules: ArtifactRules[Result],
    job: JobFacts,
    pods: tuple[PodFacts, ...],
    previous: tuple[str | None, int | None],
    generation: int,
    *,
    progress: tuple[DownloadProgress | BuildProgress, datetime] | None = None,
) -> ArtifactState[Any, Any]:
    """The artifact as its Job `job` and the Job's `pods` show it.

    `progress` is the last progress line the running pod printed, and the time it is judged at.
    """
    words = rules.words
    results = [(pod, finished_result(pod, words.parse)) for pod in newest(pods)]
    finished = [(pod, result) for pod, result in results if result is not None]
    for _, result in finished:
        # The pod's own report is the result; the Job controller marks the Job Complete a moment later.
        if not isinstance(result, JobFailed) and (state := rules.ready(result)) is not None:
            return state
    logs = f"kubectl logs job/{job.meta.name}"
    failed_pods = [(pod, result) for pod, result in finished if isinstance(result, JobFailed)]
    failures = [result for _, result in failed_pods]
    last_failure = (
        describe_failure(failed_pods[0][1], words.program, failed_pods[0][0].oom_killed)
        if failed_pods
        else ""
    )
    if job.succeeded or job.failed:
        if failures:
            message = last_failure
            if job.failure and "BackoffLimitExceeded" not in job.failure:
                message += f" ({job.failure})"
        else:
            others = [result for _, result in finished if not isinstance(result, JobFailed)]
            mismatch = rules.mismatch(job, others[0]) if others else None
            why = job.failure or "no pod said why"
            message = mismatch or f"the {words.job} {job.meta.name} ended without a result ({why})"
        return failed_state(message, job, words, previous, generation)
    retrying = ""
    if failures:
        retrying = f" (attempt {len(failures) + 1}; the last one: {last_failure})"
    live = [pod for pod in newest(pods) if not pod.meta.deleting]
    running = [pod for pod in live if pod.phase is PodPhase.RUNNING]
    if running:
        where = f"in pod {running[0].meta.name} on {running[0].node or 'a node'}{retrying}"
        running_now = f"{words.verb} {rules.what} {where}"
        state = dataclasses.replace(
            not_ready(words.running, running_now, f"{words.making} {where}: follow it with {logs} -f."),
            job_running=True,
        )
        if progress is None:
            return state
        seen = assess(*progress)
        return dataclasses.replace(
            state,
            message=f"{running_now}: {seen.clause}",
            summary=f"{words.making} {where}: {seen.clause}; follow it with {logs} -f.",
            progress=seen.progress,
        )
    pending = [pod for pod in live if pod.phase is PodPhase.PENDING]
    for pod in pending:
        if pod.unschedulable:
            return rules.unplaced(pod)
    if pending:
        name = pending[0].meta.name
        starting = f"{words.kind} pod {name} is starting{retrying}"
        return not_ready(
            words.pending, starting, f"{starting}: kubectl describe pod {name} shows what it waits for."
        )
    if failures:
        # Every pod so far failed and none runs: the Job controller retries or gives up next.
        message = (
            f"{words.kind} attempt {len(failures)} failed: {last_failure}; the Job retries it or gives up"
        )
        return not_ready(words.running, message, f"{message}: {logs} has the rest.")
    starting = f"{words.job} {job.meta.name} is starting"
    return not_ready(
        words.pending, starting, f"{starting}: kubectl describe job {job.meta.name} shows its pods."
    )


def missing_state(observed: Observed) -> ArtifactState[Any, Any] | None:
    """The state while a Secret or source claim the spec names is missing (None when nothing is)."""
    if not observed.missing:
        return None
    first = observed.missing[0]
    message = "; ".join(f"{missing.field}: {missing.message}" for missing in observed.missing)
    summary = "; ".join(f"{m.field}: {m.message}: {m.fix}" for m in observed.missing) + "."
    return not_ready(first.kind.value, message, summary, failed=True)


def artifact_state(
    rules: ArtifactRules[Result],
    observed: Observed,
    found: ArtifactState[Any, Any] | None,
    previous: tuple[str | None, int | None],
    generation: int,
) -> ArtifactState[Any, Any]:
    """The artifact as `observed`; `found` is its ready state when it is in the index already."""
    words = rules.words
    missing = missing_state(observed)
    if missing is not None:
        return missing
    if found is not None:
        return found
    unbound = observed.claim is not None and observed.claim.phase != "Bound"
    if observed.job is not None and not observed.job.meta.deleting:
        line = observed.job_progress
        state = job_state(
            rules,
            observed.job,
            observed.job_pods,
            previous,
            generation,
            progress=None if line is None else (line, observed.now),
        )
        # A Job that cannot start for want of storage is waiting on the claim, whatever its pod says.
        if not unbound or state.ready or state.failed or state.retry:
            return state
    if unbound:
        assert observed.claim is not None
        name = observed.claim.meta.name
        message = f"waiting for the engine-cache claim {name} to be bound (it is {observed.claim.phase})"
        summary = f"the {words.kind} is {message}: kubectl describe pvc {name} says why."
        return not_ready(words.pending, message, summary, waiting_for_claim=True)
    creating = f"creating the {words.job} of {rules.what}"
    return not_ready(words.pending, creating, f"{creating}; nothing to do yet.")
