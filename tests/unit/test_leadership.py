"""A candidate that stops leading, by losing the Lease or handing it back, clears each resource's series.

The elector runs against a Lease kept in memory; the per-resource series are published while it leads.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY

from mmd_operator.api.v1alpha1 import Phase
from mmd_operator.election import LeaseRecord, Timings
from mmd_operator.kube.lease import LeaseConflictError, Leases
from mmd_operator.leadership import LeaderElector, Outcome
from mmd_operator.metrics import ResourceSample, ResourceSeries

TIMINGS = Timings(lease_seconds=15, renew_deadline=10.0, retry=0.01)


class _Lease(Leases):
    """One Lease in memory; `taken_by` makes the next renewal conflict and the Lease another's."""

    def __init__(self) -> None:
        self.namespace, self.name = "mmd-system", "mmd-operator"
        self.record: LeaseRecord | None = None
        self.version = 0
        self.taken_by = ""

    def read(self, *, timeout: float) -> tuple[LeaseRecord | None, str]:
        return self.record, str(self.version) if self.record else ""

    def create(self, record: LeaseRecord, *, timeout: float) -> str:
        return self._store(record)

    def update(self, record: LeaseRecord, version: str, *, timeout: float) -> str:
        if self.taken_by:
            self._store(LeaseRecord(self.taken_by, 15, "", "", 1))
            raise LeaseConflictError("taken")
        return self._store(record)

    def _store(self, record: LeaseRecord) -> str:
        self.record, self.version = record, self.version + 1
        return str(self.version)


def _phase(name: str) -> float | None:
    return REGISTRY.get_sample_value(
        "mmd_resource_phase", {"namespace": "lead", "name": name, "phase": str(Phase.READY)}
    )


def _lead_then(name: str, end: str) -> Outcome:
    lease, stop = _Lease(), threading.Event()
    series = ResourceSeries()

    def reconciling() -> None:
        series.publish(("lead", name), ResourceSample(phase=Phase.READY, wanted=1, ready=1))
        assert _phase(name) == 1.0
        if end == "lost":
            lease.taken_by = "mmd-operator-b"
        else:
            stop.set()

    return LeaderElector(lease, "mmd-operator-a", TIMINGS).run(stop, reconciling)


def test_a_leader_that_loses_the_lease_clears_the_per_resource_series() -> None:
    assert _lead_then("lost", "lost") is Outcome.LOST
    assert _phase("lost") is None


def test_a_leader_that_hands_the_lease_back_clears_them_too() -> None:
    assert _lead_then("released", "released") is Outcome.RELEASED
    assert _phase("released") is None
