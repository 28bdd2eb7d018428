"""The rules of leader election on a Lease, as client-go's leaderelection package has them; pure.

A candidate never compares its clock with another's: it notes, on its own monotonic clock, when it first
saw the lease record as it is now (a `Sighting`), and holds the lease for expired only when that same
record has stood for the lease's duration since. So a leader that stops renewing (killed, frozen, cut
off) loses the lease `lease_seconds` after a standby last saw it renewed, and a standby never writes
before then. The leader, for its part, counts from when it SENT its last successful renewal and gives up
after `renew_deadline`, which is shorter than the lease: it has stopped writing before anyone may take
over, whatever the network did to its requests.

The wall-clock times written into the record (acquireTime, renewTime) are for people reading the Lease;
no decision here reads them. Imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum


@dataclass(frozen=True)
class Timings:
    """How long a lease lasts, how long its leader keeps trying to renew it, how often anyone looks."""

    lease_seconds: int
    renew_deadline: float
    retry: float

    @property
    def takeover_bound(self) -> float:
        """The longest a standby waits after the leader's last renewal (and so after its death).

        The standby sees a renewal within one retry period and takes the lease `lease_seconds` after
        it saw it (it wakes for exactly that moment), so at most `lease_seconds + retry` after the
        renewal, plus the latency of its two requests.
        """
        return self.lease_seconds + self.retry


@dataclass(frozen=True)
class LeaseRecord:
    """The spec of a coordination.k8s.io/v1 Lease as leader election writes it."""

    holder: str
    lease_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int


@dataclass(frozen=True)
class Sighting:
    """A lease record as a candidate last read it (None: no Lease), and when it first read it so."""

    record: LeaseRecord | None
    version: str
    since: float


class Step(StrEnum):
    """What a candidate does after reading the lease."""

    CREATE = "create"  # no Lease yet: create it, holding it
    TAKE = "take"  # released, or not renewed for its duration: write it, holding it
    RENEW = "renew"  # ours: write it again with a new renewTime
    WAIT = "wait"  # another holds it and renews it: look again later


def sighted(previous: Sighting | None, record: LeaseRecord | None, version: str, now: float) -> Sighting:
    """The sighting after reading `record` at `now`: its time moves only when the record changed."""
    if previous is not None and previous.record == record:
        return replace(previous, version=version)
    return Sighting(record, version, now)


def next_step(identity: str, sighting: Sighting, now: float) -> Step:
    """What `identity` does about the lease it has just read."""
    record = sighting.record
    if record is None:
        return Step.CREATE
    if record.holder == identity:
        return Step.RENEW
    if not record.holder or now >= sighting.since + record.lease_seconds:
        return Step.TAKE
    return Step.WAIT


def wait_before_looking_again(sighting: Sighting, now: float, timings: Timings) -> float:
    """A standby's pause: one retry period, or less when the lease expires sooner (it wakes for that)."""
    record = sighting.record
    if record is None:
        return 0.0
    return max(0.0, min(timings.retry, sighting.since + record.lease_seconds - now))


def record_to_write(
    identity: str, step: Step, sighting: Sighting, timings: Timings, wall_time: datetime
) -> LeaseRecord:
    """The record `identity` writes to create, take or renew the lease at `wall_time`."""
    now = micro_time(wall_time)
    previous = sighting.record
    if step is Step.RENEW and previous is not None:
        return replace(previous, lease_seconds=timings.lease_seconds, renew_time=now)
    transitions = 0 if previous is None else previous.transitions + int(previous.holder != identity)
    return LeaseRecord(identity, timings.lease_seconds, now, now, transitions)


def released(record: LeaseRecord, wall_time: datetime) -> LeaseRecord:
    """The record a leader leaves when it stops cleanly: nobody holds it, a standby takes it at once."""
    now = micro_time(wall_time)
    return LeaseRecord("", 1, now, now, record.transitions)


def lapsed(renewed_at: float, now: float, timings: Timings) -> bool:
    """Whether a leader whose last successful renewal was sent at `renewed_at` must stop leading."""
    return now - renewed_at >= timings.renew_deadline


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
