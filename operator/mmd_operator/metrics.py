"""The operator's Prometheus metrics, defined once; served on `/metrics` by `main`.

- `mmd_reconciles_total{outcome}`: changed (something was written), unchanged, error;
- `mmd_reconcile_duration_seconds`: one reconcile, from cache read to last write;
- `mmd_builds_total{outcome}` and `mmd_build_duration_seconds`: engine builds as their Jobs finish;
  which runtime's artifacts feed these and the cache lookups is one table (`ARTIFACT_METRICS`): the
  engines, not (yet) the weights downloads;
- `mmd_resources{phase}`: resources per phase;
- `mmd_engine_cache_lookups_total{result}`: a resource's cacheKey found in the engine index (hit) or not;
- `mmd_api_requests_total{method}`: requests of the operator's own client (kopf's watches not counted);
- `mmd_is_leader`: 1 while this process reconciles (it holds the lease, or runs without leader election),
  0 while it stands by or after it lost the lease;
- `mmd_leader_transitions_total{change}`: this process acquired the lease, released it at shutdown,
  or lost it;
- `mmd_pods_marked_not_ready_total`: serving pods marked not ready because their node stopped renewing
  its Lease (`judgement.node_silence`).

Imports prometheus_client.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from prometheus_client import Counter, Gauge, Histogram

from mmd_operator.api.v1alpha1 import Phase
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


@dataclass(frozen=True)
class ArtifactMetrics:
    """The metrics one runtime's artifact feeds: its Jobs' outcomes and durations, its cache lookups."""

    outcomes: Counter
    seconds: Histogram
    lookups: Counter

    def looked_up(self, found: bool) -> None:
        """A resource's new key was found in the engine index, or not."""
        self.lookups.labels(result="hit" if found else "miss").inc()

    def finished(self, *, succeeded: bool, seconds: float | None = None) -> None:
        """A Job finished; `seconds` is how long it ran, as its program measured it."""
        self.outcomes.labels(outcome="succeeded" if succeeded else "failed").inc()
        if seconds is not None:
            self.seconds.observe(seconds)


# What each runtime's artifact feeds (None: nothing yet).
ARTIFACT_METRICS: Mapping[Runtime, ArtifactMetrics | None] = MappingProxyType(
    {
        Runtime.TRITON_TRTLLM_ENGINE: ArtifactMetrics(BUILDS, BUILD_SECONDS, ENGINE_CACHE),
        Runtime.TRTLLM_SERVE: None,
    }
)


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
