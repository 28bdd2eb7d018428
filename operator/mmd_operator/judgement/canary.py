"""A Canary rollout's verdict on its new revision: analysing, passed (promote) or failed (roll back).

With `serving.rollout.strategy: Canary` a change runs first as one pod of the new revision (the canary
Deployment) beside the stable pods, behind the same Service. From the moment that pod is first Ready the
analysis runs for `canary.analysisSeconds`: on the operator's Prometheus, the canary's failure ratio
(where the runtime counts failures) and its mean request latency against the stable pods', read over the
analysis so far; without a Prometheus, readiness alone. A figure past its threshold, once the canary has
answered `minRequests`, fails it at once; at the end of the period it passes. The verdict, its start and
its figures live in the status (`status.canary`), so a restarted or standby operator resumes the same
analysis; a failed revision is rolled back as `revisions` undoes one that cannot start (the stable pods
were never touched, so nothing is written back), and held until the spec or the retry annotation
changes. Pure: imports the api models, the facts, the metrics table and `revisions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mmd_operator.api.v1alpha1 import (
    CanaryFigures,
    CanarySpec,
    CanaryStatus,
    CanaryVerdict,
    MultimodalDeploymentStatus,
    ServingRevision,
)
from mmd_operator.facts import DeploymentFacts, PodCounts, PodFacts, Reading
from mmd_operator.judgement.revisions import RETRY_ANNOTATION, Undo
from mmd_operator.knowledge import Runtime
from mmd_operator.scaling_metrics import ANALYSIS_SERIES
from mmd_operator.vocabulary import labels

# The status condition of the analysis, and its reasons.
CONDITION = "CanaryAnalysis"
PROMETHEUS = "Prometheus"
READINESS = "Readiness"
# How often an analysis under way looks at its figures again.
CHECK_SECONDS = 10.0
# The shortest window the figures are read over: a counter's increase needs two scrapes in it.
MIN_WINDOW_SECONDS = 30
# How soon after a new verdict is written the canary Deployment is removed.
NEW_VERDICT_SECONDS = 1.0
_STAMP = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Canary:
    """Where the canary of the Deployment's new revision stands, and what follows from it."""

    # What status.canary says (None: no canary has run under this strategy).
    status: CanaryStatus | None = None
    # It failed: the stable revision keeps serving, held there.
    undo: Undo | None = None
    recheck_after: float | None = None
    # The canary Deployment stays for this reconcile: its verdict is new, and the status must hold it
    # before the Deployment (which the verdict is read against) goes; the next reconcile removes it.
    keep: bool = False

    @property
    def analysing(self) -> bool:
        """Whether a verdict is still to come."""
        return self.status is not None and self.status.verdict is CanaryVerdict.ANALYSING

    def passed(self, revision: str) -> bool:
        """Whether `revision` (a template digest) passed its analysis."""
        return (
            self.status is not None
            and self.status.revision == revision
            and self.status.verdict is CanaryVerdict.PASSED
        )


def is_canary(pod: PodFacts) -> bool:
    """Whether `pod` is a canary's (the stable pods have no track label)."""
    return pod.meta.label(labels.TRACK) == labels.CANARY


def split(pods: Sequence[PodFacts]) -> tuple[list[PodFacts], list[PodFacts]]:
    """(canary pods, stable pods) of the live serving pods."""
    live = [pod for pod in pods if not pod.meta.deleting]
    return [pod for pod in live if is_canary(pod)], [pod for pod in live if not is_canary(pod)]


def _since(stamp: str | None) -> datetime | None:
    if stamp is None:
        return None
    return datetime.strptime(stamp, _STAMP).replace(tzinfo=UTC)


def _current(previous: MultimodalDeploymentStatus | None, revision: str | None) -> CanaryStatus | None:
    """The status's analysis of `revision`, if it is that one's."""
    shown = previous.canary if previous is not None else None
    return shown if shown is not None and revision is not None and shown.revision == revision else None


def analysis_window(
    previous: MultimodalDeploymentStatus | None, canary: DeploymentFacts | None, now: datetime
) -> int | None:
    """Seconds of figures the analysis of the live canary reads now; None: nothing to read yet."""
    shown = _current(previous, canary.template_digest if canary is not None else None)
    started = _since(shown.ready_since) if shown is not None else None
    if shown is None or started is None or shown.verdict is not CanaryVerdict.ANALYSING:
        return None
    return max(MIN_WINDOW_SECONDS, int((now - started).total_seconds()) + 1)


def _total(counts: Sequence[PodCounts]) -> tuple[float, float | None, float]:
    answered = sum(c.answered for c in counts)
    failed = None if any(c.failed is None for c in counts) else sum(c.failed or 0.0 for c in counts)
    return answered, failed, sum(c.latency_seconds for c in counts)


def figures(reading: Reading, canary: Sequence[PodFacts], stable: Sequence[PodFacts]) -> CanaryFigures:
    """The canary's and the stable pods' failure ratios and mean latencies from `reading`."""

    def of(pods: Sequence[PodFacts]) -> tuple[float, float | None, float | None]:
        counts = [reading.counts.get(pod.meta.name, PodCounts()) for pod in pods]
        answered, failed, latency = _total(counts) if counts else (0.0, None, 0.0)
        asked = answered + (failed or 0.0)
        ratio = None if failed is None or asked <= 0 else failed / asked
        return asked, ratio, (latency / answered if answered > 0 else None)

    asked, ratio, latency = of(canary)
    _, stable_ratio, stable_latency = of(stable)
    return CanaryFigures(
        requests=round(asked),
        failure_ratio=_round(ratio),
        stable_failure_ratio=_round(stable_ratio),
        latency_seconds=_round(latency),
        stable_latency_seconds=_round(stable_latency),
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _percent(value: float) -> str:
    return f"{value * 100:.1f} %"


def _breaches(spec: CanarySpec, found: CanaryFigures) -> list[str]:
    """The figures past their thresholds, in words."""
    breaches = []
    if found.failure_ratio is not None and found.failure_ratio > spec.max_failure_ratio:
        stable = (
            f"; the stable pods: {_percent(found.stable_failure_ratio)}"
            if found.stable_failure_ratio is not None
            else ""
        )
        breaches.append(
            f"{_percent(found.failure_ratio)} of its {found.requests} requests failed, more than "
            f"spec.serving.rollout.canary.maxFailureRatio ({_percent(spec.max_failure_ratio)}){stable}"
        )
    if (
        found.latency_seconds is not None
        and found.stable_latency_seconds
        and found.latency_seconds > spec.max_latency_ratio * found.stable_latency_seconds
    ):
        breaches.append(
            f"its mean request latency {found.latency_seconds:.3g} s is "
            f"{found.latency_seconds / found.stable_latency_seconds:.1f} times the stable pods' "
            f"{found.stable_latency_seconds:.3g} s, more than spec.serving.rollout.canary.maxLatencyRatio "
            f"({spec.max_latency_ratio:g})"
        )
    return breaches


def _said(found: CanaryFigures | None, runtime: Runtime) -> str:
    """The figures in words."""
    if found is None:
        return "no figures yet"
    parts = [f"{found.requests} requests"]
    series = ANALYSIS_SERIES[runtime]
    if found.failure_ratio is not None:
        parts.append(f"{_percent(found.failure_ratio)} failed")
    elif series.failed is None:
        parts.append(f"failures not judged ({series.failures_unavailable})")
    if found.latency_seconds is not None:
        stable = (
            f" (stable {found.stable_latency_seconds:.3g} s)"
            if found.stable_latency_seconds is not None
            else ""
        )
        parts.append(f"mean latency {found.latency_seconds:.3g} s{stable}")
    return ", ".join(parts)


def _failed(
    shown: CanaryStatus, message: str, stable: ServingRevision | None, retry: str | None, *, new: bool
) -> Canary:
    """The canary failed (`new`: in this reconcile); the stable revision is held."""
    status = shown.model_copy(update={"verdict": CanaryVerdict.FAILED, "message": message})
    undo = None
    if stable is not None:
        undo = Undo(to=stable, failed=shown.revision, message=message, write=False, retry=retry)
    return Canary(status=status, undo=undo, keep=new, recheck_after=NEW_VERDICT_SECONDS if new else None)


def canary_state(
    spec: CanarySpec,
    previous: MultimodalDeploymentStatus | None,
    *,
    generation: int,
    retry: str | None,
    runtime: Runtime,
    canary: DeploymentFacts | None,
    pods: Sequence[PodFacts],
    reading: Reading | None,
    stable: ServingRevision | None,
    now: datetime,
) -> Canary:
    """The analysis of the live canary Deployment's revision, given the status shown and `reading`.

    `reading` is what Prometheus said over `analysis_window`; None when the operator has no Prometheus
    (readiness alone judges) or there was nothing to read yet.
    """
    shown_any = previous.canary if previous is not None else None
    revision = canary.template_digest if canary is not None else None
    if canary is None or revision is None:
        return Canary(status=shown_any)
    shown = _current(previous, revision)
    held = previous.rollback if previous is not None else None
    if shown is not None and shown.verdict is CanaryVerdict.PASSED:
        return Canary(status=shown)
    if shown is not None and shown.verdict is CanaryVerdict.FAILED:
        if (
            held is not None
            and held.failed == revision
            and (held.generation, held.retry) == (generation, retry)
        ):
            return _failed(shown, shown.message, stable, retry, new=False)
        shown = None  # the spec or the retry annotation changed: judge it again
    gate = READINESS if reading is None and (shown is None or shown.gate == READINESS) else PROMETHEUS
    if shown is None:
        shown = CanaryStatus(
            revision=revision, generation=generation, gate=gate, verdict=CanaryVerdict.ANALYSING
        )
    canary_pods, stable_pods = split(pods)
    ready = [pod for pod in canary_pods if pod.ready]
    started = _since(shown.ready_since)
    if started is None and ready:
        started = now
    if started is None:
        message = (
            f"the canary of revision {revision} starts beside the stable pods; its analysis of "
            f"{spec.analysis_seconds} s runs once it is ready"
        )
        waiting = shown.model_copy(update={"generation": generation, "message": message})
        return Canary(status=waiting, recheck_after=CHECK_SECONDS)
    elapsed = (now - started).total_seconds()
    found = figures(reading, canary_pods, stable_pods) if reading is not None and not reading.error else None
    found = found or shown.figures
    name = ready[0].meta.name if ready else (canary_pods[0].meta.name if canary_pods else "the canary pod")
    analysed = shown.model_copy(
        update={
            "generation": generation,
            "gate": gate,
            "ready_since": started.strftime(_STAMP),
            "figures": found,
        }
    )
    enough = found is not None and found.requests >= spec.min_requests
    breaches = _breaches(spec, found) if found is not None and enough else []
    stable_words = f"revision {stable.pod_template_hash}" if stable is not None else "the stable revision"
    if breaches:
        message = (
            f"the canary of revision {revision} (pod {name}) failed its analysis after {elapsed:.0f} s: "
            f"{'; '.join(breaches)}. Rolled back: the canary is removed and {stable_words} keeps serving; "
            f"apply a fixed spec, or set the annotation {RETRY_ANNOTATION} to a new value to try this "
            "revision again"
        )
        return _failed(analysed, message, stable, retry, new=True)
    if gate == PROMETHEUS and reading is not None and reading.error and elapsed >= spec.analysis_seconds:
        message = (
            f"the canary of revision {revision} could not be judged: {reading.error}. Rolled back: "
            f"{stable_words} keeps serving; set the annotation {RETRY_ANNOTATION} to a new value to try again"
        )
        return _failed(analysed, message, stable, retry, new=True)
    # Passed only with its pod ready at the end (a canary pod gone or starting again waits).
    if elapsed >= spec.analysis_seconds and ready and len(ready) == len(canary_pods):
        if gate == READINESS:
            how = "ready at its end (no Prometheus URL is set, MMD_PROMETHEUS_URL: readiness alone judged it)"
        elif not enough:
            how = (
                f"ready at its end; it answered {found.requests if found else 0} requests, fewer than "
                f"spec.serving.rollout.canary.minRequests ({spec.min_requests}), so readiness alone judged it"
            )
        else:
            how = f"within every threshold: {_said(found, runtime)}"
        message = f"the canary of revision {revision} passed its {elapsed:.0f} s analysis, {how}; promoted"
        passed = analysed.model_copy(update={"verdict": CanaryVerdict.PASSED, "message": message})
        return Canary(status=passed)
    trouble = "" if len(ready) == len(canary_pods) else f"; pod {name} is not ready"
    note = f" ({reading.error})" if reading is not None and reading.error else ""
    message = (
        f"analysing the canary of revision {revision} (pod {name}, {gate}): {elapsed:.0f} of "
        f"{spec.analysis_seconds} s, {_said(found, runtime)}{note}{trouble}"
    )
    left = max(spec.analysis_seconds - elapsed, 0.0)
    return Canary(
        status=analysed.model_copy(update={"message": message}),
        recheck_after=min(CHECK_SECONDS, left + 0.5),
    )
