"""The operator's Prometheus metrics, defined once; served on `/metrics` by `main`.

- `mmd_reconciles_total{outcome}`: changed (something was written), unchanged, error;
- `mmd_reconcile_duration_seconds`: one reconcile, from cache read to last write;
- `mmd_builds_total{outcome}` and `mmd_build_duration_seconds`: engine builds as their Jobs finish;
  which runtime's artifacts feed these and the cache lookups is one table (`ARTIFACT_METRICS`);
- `mmd_resources{phase}`: resources per phase;
- `mmd_engine_cache_lookups_total{result}`: a resource's cacheKey found in the engine index (hit) or not;
- `mmd_api_requests_total{method}`: requests of the operator's own client (kopf's watches not counted);
- `mmd_is_leader`: 1 while this process reconciles (it holds the lease, or runs without leader election),
  0 while it stands by or after it lost the lease;
- `mmd_leader_transitions_total{change}`: this process acquired the lease, released it at shutdown,
  or lost it;
- `mmd_pods_marked_not_ready_total`: serving pods marked not ready because their node stopped renewing
  its Lease (`judgement.node_silence`);
- `mmd_downloads_total{outcome}` and `mmd_download_duration_seconds`: trtllm-serve's weights downloads,
  fed as the builds are;
- `mmd_artifacts_running{artifact}`: build (engine) and download (weights) Jobs running now, each Job
  once however many resources share it; 0 of each from the start;
- per resource (`namespace`, `name`: the MultimodalDeployment's; `ResourceSeries`, fed by each reconcile
  from what it judged and reported, removed with the resource, cleared when the process stops leading):
  `mmd_resource_phase{phase}` (1 for its phase, one series), `mmd_serving_pods{state}` (wanted: the
  autoscaler's desired replicas with serving.autoscaling, else spec replicas; ready: the ready replicas;
  each times the pods of one replica, so that a replica across pods counts its pods),
  `mmd_autoscaler_replicas{bound}` (min, max, desired) and `mmd_autoscaler_saturated` (ScalingLimited,
  TooManyReplicas) with serving.autoscaling, `mmd_artifact_stalled{artifact}` while its Job runs (1 once
  its progress stalled), and `mmd_rollbacks_total{reason}` (CannotStart, AnalysisFailed; each undone
  revision once, `rollback`).

Imports prometheus_client, the api models and the facts.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import Counter as Tally
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from prometheus_client import Counter, Gauge, Histogram

from mmd_operator.api.v1alpha1 import AutoscalingSpec, CanaryVerdict, MultimodalDeploymentStatus, Phase
from mmd_operator.facts import AutoscalerFacts
from mmd_operator.knowledge import Runtime

RECONCILES = Counter("mmd_reconciles", "Reconciles of MultimodalDeployments, by outcome", ["outcome"])
RECONCILE_SECONDS = Histogram(
    "mmd_reconcile_duration_seconds",
    "Time one reconcile takes",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
BUILDS = Counter("mmd_builds", "Engine builds that finished, by outcome", ["outcome"])
BUILD_SECONDS = Histogram(
    "mmd_build_duration_seconds",
    "Time from a build Job's start to its end",
    buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400),
)
RESOURCES = Gauge("mmd_resources", "MultimodalDeployments by phase", ["phase"])
ENGINE_CACHE = Counter(
    "mmd_engine_cache_lookups", "cacheKeys found in the engine index (hit) or not (miss)", ["result"]
)
API_REQUESTS = Counter(
    "mmd_api_requests",
    "Requests the operator's own client sent to the API server, by HTTP method",
    ["method"],
)
IS_LEADER = Gauge(
    "mmd_is_leader", "1 while this process reconciles (holds the lease, or runs without election), else 0"
)
PODS_MARKED_NOT_READY = Counter(
    "mmd_pods_marked_not_ready",
    "Serving pods the operator marked not ready because their node stopped renewing its Lease",
)
LEADER_TRANSITIONS = Counter(
    "mmd_leader_transitions",
    "Changes of this process's leadership: acquired, released (at shutdown) or lost",
    ["change"],
)
DOWNLOADS = Counter("mmd_downloads", "Weights downloads that finished, by outcome", ["outcome"])
DOWNLOAD_SECONDS = Histogram(
    "mmd_download_duration_seconds",
    "Time from a download Job's start to its end",
    buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400),
)
# Per resource: `namespace` and `name` are the MultimodalDeployment's.
RESOURCE_PHASE = Gauge(
    "mmd_resource_phase", "1 for each MultimodalDeployment's current phase", ["namespace", "name", "phase"]
)
SERVING_PODS = Gauge(
    "mmd_serving_pods",
    "Serving pods a MultimodalDeployment wants (state=wanted) and has ready (state=ready); a replica across"
    " pods counts its pods, ready only while its whole group is",
    ["namespace", "name", "state"],
)
AUTOSCALER_REPLICAS = Gauge(
    "mmd_autoscaler_replicas",
    "The autoscaler's bounds (min, max) and what it wants (desired), with serving.autoscaling",
    ["namespace", "name", "bound"],
)
AUTOSCALER_SATURATED = Gauge(
    "mmd_autoscaler_saturated",
    "1 while the autoscaler is held at maxReplicas by its metric (ScalingLimited, TooManyReplicas)",
    ["namespace", "name"],
)
ROLLBACKS = Counter(
    "mmd_rollbacks",
    "New revisions undone: CannotStart (its pods did not start) or AnalysisFailed (a canary's figures)",
    ["namespace", "name", "reason"],
)
ARTIFACTS_RUNNING = Gauge(
    "mmd_artifacts_running", "Build (engine) and download (weights) Jobs running now", ["artifact"]
)
ARTIFACT_STALLED = Gauge(
    "mmd_artifact_stalled",
    "While a resource's build or download runs: 1 when it has not moved for the stall window, else 0",
    ["namespace", "name", "artifact"],
)
# Every outcome from the start: a counter that appears at its first event hides that event from rate().
for _outcome in ("succeeded", "failed"):
    BUILDS.labels(outcome=_outcome)
    DOWNLOADS.labels(outcome=_outcome)


@dataclass(frozen=True)
class ArtifactMetrics:
    """The metrics one runtime's artifact feeds: its Jobs' outcomes and durations, its cache lookups."""

    outcomes: Counter
    seconds: Histogram
    # Engine-index lookups (None: not counted for this artifact).
    lookups: Counter | None = None

    def looked_up(self, found: bool) -> None:
        """A resource's new key was found in the engine index, or not."""
        if self.lookups is not None:
            self.lookups.labels(result="hit" if found else "miss").inc()

    def finished(self, *, succeeded: bool, seconds: float | None = None) -> None:
        """A Job finished; `seconds` is how long it ran, as its program measured it."""
        self.outcomes.labels(outcome="succeeded" if succeeded else "failed").inc()
        if seconds is not None:
            self.seconds.observe(seconds)


# What each runtime's artifact feeds (None: nothing).
ARTIFACT_METRICS: Mapping[Runtime, ArtifactMetrics | None] = MappingProxyType(
    {
        Runtime.TRITON_TRTLLM_ENGINE: ArtifactMetrics(BUILDS, BUILD_SECONDS, ENGINE_CACHE),
        Runtime.TRTLLM_SERVE: ArtifactMetrics(DOWNLOADS, DOWNLOAD_SECONDS),
    }
)
# The `artifact` label of each runtime's Jobs.
ARTIFACT_LABEL: Mapping[Runtime, str] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: "engine", Runtime.TRTLLM_SERVE: "weights"}
)
for _artifact in ARTIFACT_LABEL.values():
    ARTIFACTS_RUNNING.labels(artifact=_artifact).set(0)
# The kinds of rollback (`mmd_rollbacks_total{reason}`): a new revision whose pods cannot start
# (`judgement.revisions`), and a canary that failed its analysis (`judgement.canary`).
CANNOT_START = "CannotStart"
ANALYSIS_FAILED = "AnalysisFailed"
_SATURATED = ("ScalingLimited", "True", "TooManyReplicas")
# The per-resource series, removed with their resource and cleared when this process stops leading.
_PER_RESOURCE: tuple[Gauge | Counter, ...] = (
    RESOURCE_PHASE,
    SERVING_PODS,
    AUTOSCALER_REPLICAS,
    AUTOSCALER_SATURATED,
    ARTIFACT_STALLED,
    ROLLBACKS,
)


@dataclass(frozen=True)
class AutoscalerSample:
    """The autoscaler's bounds, the pods it wants, and whether its metric holds it at its maximum."""

    minimum: int
    maximum: int
    desired: int
    saturated: bool


@dataclass(frozen=True)
class JobSample:
    """A resource's artifact Job while it runs: its `artifact` label, its name, whether it stalled."""

    artifact: str
    name: str
    stalled: bool = False


@dataclass(frozen=True)
class ResourceSample:
    """What one reconcile left a resource showing, as its per-resource series say it."""

    phase: Phase | None
    # Serving pods wanted and ready (None: the status says nothing of them, an invalid first spec).
    wanted: int | None = None
    ready: int | None = None
    # With serving.autoscaling only.
    autoscaler: AutoscalerSample | None = None
    job: JobSample | None = None


def resource_sample(
    status: MultimodalDeploymentStatus,
    autoscaling: AutoscalingSpec | None,
    autoscaler: AutoscalerFacts | None,
    job: tuple[str, str] | None,
) -> ResourceSample:
    """The sample of a resource whose reconcile left it showing `status`.

    `autoscaling` is its spec's, `autoscaler` its HorizontalPodAutoscaler as the reconcile observed it,
    and `job` the artifact label and name of its Job while that runs.
    """
    wanted = status.replicas
    bounds = None
    if autoscaling is not None:
        said = autoscaler.desired_replicas if autoscaler is not None else None
        # 0 or nothing until the autoscaler has decided (`judgement.autoscaling`): it starts at its minimum.
        desired = said or autoscaling.min_replicas
        limited = autoscaler.condition(_SATURATED[0]) if autoscaler is not None else None
        saturated = limited is not None and (limited.type, limited.status, limited.reason) == _SATURATED
        bounds = AutoscalerSample(autoscaling.min_replicas, autoscaling.max_replicas, desired, saturated)
        wanted = desired
    running = None
    if job is not None:
        artifact = status.engine or status.weights
        progress = artifact.progress if artifact is not None else None
        running = JobSample(job[0], job[1], stalled=progress is not None and progress.stalled)
    # A group's pods serve together: its ready pods count once the whole group is ready.
    pods = status.pods_per_replica or 1
    return ResourceSample(
        phase=status.phase,
        wanted=wanted * pods if wanted is not None else None,
        ready=(status.ready_replicas or 0) * pods if wanted is not None else None,
        autoscaler=bounds,
        job=running,
    )


def rollback(previous: MultimodalDeploymentStatus | None, status: MultimodalDeploymentStatus) -> str | None:
    """The kind of the rollback `status` shows and `previous` did not, or None: each undone revision once.

    One undo is one `status.rollback` (the generation and retry value it was undone under, the revision
    it undid); a canary that failed its analysis records its revision there too. Compared with the
    status the resource showed before this reconcile, not with this process's memory, so another
    reconcile, a restarted operator or a new leader that sees the same undo does not count it again.
    """
    now = status.rollback
    before = previous.rollback if previous is not None else None
    if now is None or (
        before is not None
        and (before.generation, before.failed, before.retry) == (now.generation, now.failed, now.retry)
    ):
        return None
    canary = status.canary
    # A canary whose pod cannot start is undone as any revision that cannot: its pod-template-hash.
    if canary is not None and canary.verdict is CanaryVerdict.FAILED and canary.revision == now.failed:
        return ANALYSIS_FAILED
    return CANNOT_START


class ResourceSeries:
    """Each resource's own series, changed as its samples change and removed with it; thread-safe.

    Only the leading process reconciles, so only it publishes them; `stop_publishing` clears them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, str], ResourceSample] = {}
        # The resources on each running Job, by (artifact, namespace, Job): a Job is shared by every
        # resource with its key, and counted once.
        self._jobs: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        self._running: Tally[str] = Tally()
        with _LIVE_LOCK:
            _LIVE.add(self)

    def publish(self, key: tuple[str, str], sample: ResourceSample | None) -> None:
        """Record `key`'s sample (None: the resource is gone) and change the series it changed."""
        # Changed as samples change, never recounted over every resource (see `PhaseTally`).
        namespace, name = key
        with self._lock:
            before = self._samples.pop(key, None) if sample is None else self._samples.get(key)
            if sample is None:
                for reason in (CANNOT_START, ANALYSIS_FAILED):
                    with contextlib.suppress(KeyError):
                        ROLLBACKS.remove(namespace, name, reason)
            if before == sample:
                return
            if sample is not None:
                self._samples[key] = sample
            self._remove(namespace, name, before, sample)
            if sample is not None:
                self._set(namespace, name, sample)
            self._move_job(key, before.job if before else None, sample.job if sample else None)

    def rolled_back(self, key: tuple[str, str], reason: str) -> None:
        """A new revision of `key` was undone (`rollback`)."""
        ROLLBACKS.labels(key[0], key[1], reason).inc()

    def last(self, key: tuple[str, str]) -> ResourceSample | None:
        """The sample `key` published last."""
        with self._lock:
            return self._samples.get(key)

    def known(self) -> set[tuple[str, str]]:
        """Every resource with series here."""
        with self._lock:
            return set(self._samples)

    def clear(self) -> None:
        """Forget every resource and remove every per-resource series (no Job runs, as far as it says)."""
        with self._lock:
            self._samples.clear()
            self._jobs.clear()
            self._running.clear()
            for metric in _PER_RESOURCE:
                metric.clear()
            for artifact in ARTIFACT_LABEL.values():
                ARTIFACTS_RUNNING.labels(artifact=artifact).set(0)

    @staticmethod
    def _remove(
        namespace: str, name: str, before: ResourceSample | None, after: ResourceSample | None
    ) -> None:
        if before is None:
            return
        if before.phase is not None and (after is None or after.phase != before.phase):
            RESOURCE_PHASE.remove(namespace, name, str(before.phase))
        if before.wanted is not None and (after is None or after.wanted is None):
            for state in ("wanted", "ready"):
                SERVING_PODS.remove(namespace, name, state)
        if before.autoscaler is not None and (after is None or after.autoscaler is None):
            for bound in ("min", "max", "desired"):
                AUTOSCALER_REPLICAS.remove(namespace, name, bound)
            AUTOSCALER_SATURATED.remove(namespace, name)
        if before.job is not None and (
            after is None or after.job is None or after.job.artifact != before.job.artifact
        ):
            ARTIFACT_STALLED.remove(namespace, name, before.job.artifact)

    @staticmethod
    def _set(namespace: str, name: str, sample: ResourceSample) -> None:
        if sample.phase is not None:
            RESOURCE_PHASE.labels(namespace, name, str(sample.phase)).set(1)
        if sample.wanted is not None:
            SERVING_PODS.labels(namespace, name, "wanted").set(sample.wanted)
            SERVING_PODS.labels(namespace, name, "ready").set(sample.ready or 0)
        scaler = sample.autoscaler
        if scaler is not None:
            bounds = {"min": scaler.minimum, "max": scaler.maximum, "desired": scaler.desired}
            for bound, value in bounds.items():
                AUTOSCALER_REPLICAS.labels(namespace, name, bound).set(value)
            AUTOSCALER_SATURATED.labels(namespace, name).set(int(scaler.saturated))
        if sample.job is not None:
            ARTIFACT_STALLED.labels(namespace, name, sample.job.artifact).set(int(sample.job.stalled))

    def _move_job(self, key: tuple[str, str], before: JobSample | None, after: JobSample | None) -> None:
        namespace = key[0]
        was = (before.artifact, namespace, before.name) if before is not None else None
        now = (after.artifact, namespace, after.name) if after is not None else None
        if was == now:
            return
        if was is not None:
            sharing = self._jobs.get(was, set())
            sharing.discard(key)
            if not sharing:
                self._jobs.pop(was, None)
                self._running[was[0]] -= 1
                ARTIFACTS_RUNNING.labels(artifact=was[0]).set(self._running[was[0]])
        if now is not None:
            sharing = self._jobs.setdefault(now, set())
            sharing.add(key)
            if len(sharing) == 1:
                self._running[now[0]] += 1
                ARTIFACTS_RUNNING.labels(artifact=now[0]).set(self._running[now[0]])


# Every ResourceSeries of the process (one, the reconciler's; tests make more), for `stop_publishing`.
_LIVE: weakref.WeakSet[ResourceSeries] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def stop_publishing() -> None:
    """This process stopped leading: its per-resource series go (the new leader publishes its own)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for series in live:
        series.clear()


class PhaseTally:
    """Each resource's phase, published as `mmd_resources{phase}`; safe across worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phases: dict[tuple[str, str], Phase] = {}
        self._counts: Tally[Phase] = Tally()
        for phase in Phase:
            RESOURCES.labels(phase=str(phase)).set(0)

    def publish(self, key: tuple[str, str], phase: Phase | None) -> None:
        """Record `key`'s phase (None: it is gone) and publish the counts it changed."""
        # Counted as phases change, not recounted: a recount at every reconcile made N resources cost N^2.
        with self._lock:
            before = self._phases.pop(key, None) if phase is None else self._phases.get(key)
            if before == phase:
                return
            if phase is not None:
                self._phases[key] = phase
            for changed, step in ((before, -1), (phase, 1)):
                if changed is not None:
                    self._counts[changed] += step
                    RESOURCES.labels(phase=str(changed)).set(self._counts[changed])

    def known(self) -> set[tuple[str, str]]:
        """Every resource with a phase here."""
        with self._lock:
            return set(self._phases)
