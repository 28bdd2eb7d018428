"""Leader election: stand by until the Lease is free or expired, take it, renew it, release or lose it.

Drives the pure rules of `election` with the Lease reads and writes of `kube.lease`, in a thread of its
own (`LeaderElector.run` blocks), so that a busy event loop (kopf parsing a burst of watch events) never
delays a renewal. A standby reads the Lease once a retry period and writes nothing until the record it
sees has stood unrenewed for the lease's duration. A leader renews once a retry period; `leading()` is
the guard its API client checks before every write, and it closes the moment the renew deadline passes
without a successful renewal, before any standby may take over. The process decides what to do with a
lost lease (`main` exits). Metrics: `mmd_is_leader` and `mmd_leader_transitions_total`; a candidate
that stops leading clears the per-resource series (`metrics.stop_publishing`). Imports election,
kube.lease and metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum

from mmd_operator import election, metrics
from mmd_operator.election import Sighting, Step, Timings
from mmd_operator.kube.lease import LeaseConflictError, Leases, LeaseUnavailableError

_log = logging.getLogger(__name__)


class Outcome(StrEnum):
    """How a candidate's `run` ended."""

    STOPPED = "stopped"  # asked to stop while standing by
    RELEASED = "released"  # asked to stop while leading; the lease was handed back
    LOST = "lost"  # the lease was taken, or not renewed within the renew deadline


def _wall_time() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """One candidate of the election for `leases`, under `identity`."""

    def __init__(
        self,
        leases: Leases,
        identity: str,
        timings: Timings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_time: Callable[[], datetime] = _wall_time,
    ) -> None:
        self.leases = leases
        self.identity = identity
        self.timings = timings
        self._clock = clock
        self._wall_time = wall_time
        self._sighting: Sighting | None = None
        # When the last successful take or renewal of this term was sent; None while not leading.
        self._renewed_at: float | None = None
        self._last_failure = ""
        metrics.IS_LEADER.set(0)

    def leading(self) -> bool:
        """Whether this candidate holds the lease and may write (false once the renew deadline passed)."""
        renewed_at = self._renewed_at
        return renewed_at is not None and not election.lapsed(renewed_at, self._clock(), self.timings)

    def run(self, stop: threading.Event, on_leading: Callable[[], None]) -> Outcome:
        """Stand by, lead (`on_leading` is called once the lease is held) until `stop`, or lose the lease."""
        if not self._stand_by(stop):
            return Outcome.STOPPED
        metrics.IS_LEADER.set(1)
        metrics.LEADER_TRANSITIONS.labels(change="acquired").inc()
        record = self._sighting.record if self._sighting else None
        _log.info(
            "Became the leader as %s (Lease %s, transition %d); reconciling",
            self.identity,
            self.leases,
            record.transitions if record else 0,
        )
        on_leading()
        return self._lead(stop)

    # -- standing by -------------------------------------------------------------------------

    def _stand_by(self, stop: threading.Event) -> bool:
        announced: str | None = None
        unavailable = False
        while not stop.is_set():
            try:
                record, version = self.leases.read(timeout=self.timings.renew_deadline)
            except LeaseUnavailableError as error:
                if not unavailable:
                    _log.warning(
                        "Cannot read the Lease %s (trying every %.0f s): %s",
                        self.leases,
                        self.timings.retry,
                        error,
                    )
                unavailable = True
                stop.wait(self.timings.retry)
                continue
            unavailable = False
            now = self._clock()
            self._sighting = election.sighted(self._sighting, record, version, now)
            step = election.next_step(self.identity, self._sighting, now)
            if step is not Step.WAIT:
                if self._write(step):
                    return True
                if self._sighting is not None:  # no answer (a conflict reads again at once)
                    stop.wait(self.timings.retry)
                continue
            holder = record.holder if record else ""
            if holder != announced:
                _log.info(
                    "Standing by as %s: the Lease %s is held by %s; taking over if it goes %d s unrenewed",
                    self.identity,
                    self.leases,
                    holder,
                    record.lease_seconds if record else 0,
                )
                announced = holder
            stop.wait(election.wait_before_looking_again(self._sighting, self._clock(), self.timings))
        return False

    def _write(self, step: Step) -> bool:
        """Create, take or renew the lease as `step` says; whether this candidate now holds it.

        After a conflict the sighting is dropped, so that the lease is read again before anything else.
        """
        sighting = self._sighting
        assert sighting is not None
        record = election.record_to_write(self.identity, step, sighting, self.timings, self._wall_time())
        sent = self._clock()
        timeout = self.timings.renew_deadline if self._renewed_at is None else self._deadline_left()
        try:
            if step is Step.CREATE:
                version = self.leases.create(record, timeout=timeout)
            else:
                version = self.leases.update(record, sighting.version, timeout=timeout)
        except LeaseConflictError:
            self._sighting = None
            return False
        except LeaseUnavailableError as error:
            said = f"Could not {step} the Lease {self.leases}: {error}"
            if said != self._last_failure:  # a lasting refusal (no Role, no namespace) is said once
                _log.warning("%s", said)
            self._last_failure = said
            return False
        self._last_failure = ""
        self._sighting = Sighting(record, version, sent)
        self._renewed_at = sent
        return True

    # -- leading -----------------------------------------------------------------------------

    def _lead(self, stop: threading.Event) -> Outcome:
        assert self._renewed_at is not None
        attempt_at = self._renewed_at + self.timings.retry
        while True:
            if stop.wait(max(0.0, attempt_at - self._clock())):
                return self._release()
            # Checked before any request: a process frozen past its deadline must not write on waking.
            if not self.leading():
                return self._lose(f"not renewed within {self.timings.renew_deadline:g} s")
            attempt_at = self._clock() + self.timings.retry
            if self._sighting is None:
                taken = self._taken()
                if taken:
                    return self._lose(taken)
                if self._sighting is None:
                    continue  # no answer: the deadline decides
            if not self._write(Step.RENEW) and self._sighting is None:
                attempt_at = self._clock()  # a conflict: read at once who wrote the lease

    def _taken(self) -> str:
        """Read the lease after a conflict: who took it, or "" while it is still this candidate's."""
        try:
            record, version = self.leases.read(timeout=self._deadline_left())
        except LeaseUnavailableError:
            return ""
        self._sighting = election.sighted(None, record, version, self._clock())
        if record is None:
            return "the Lease was deleted"
        return "" if record.holder == self.identity else f"taken by {record.holder or 'nobody'}"

    def _deadline_left(self) -> float:
        renewed_at = self._renewed_at
        return 0.0 if renewed_at is None else renewed_at + self.timings.renew_deadline - self._clock()

    def _lose(self, why: str) -> Outcome:
        self._renewed_at = None
        metrics.IS_LEADER.set(0)
        metrics.LEADER_TRANSITIONS.labels(change="lost").inc()
        # The new leader publishes each resource's series: two processes' would disagree.
        metrics.stop_publishing()
        _log.warning("Lost the Lease %s as %s (%s); stopping at once", self.leases, self.identity, why)
        return Outcome.LOST

    def _release(self) -> Outcome:
        """Hand the lease back (the process has stopped reconciling), so a standby takes it at once."""
        sighting = self._sighting
        if sighting is not None and sighting.record is not None and self.leading():
            record = election.released(sighting.record, self._wall_time())
            try:
                self.leases.update(record, sighting.version, timeout=max(0.1, self._deadline_left()))
            except (LeaseConflictError, LeaseUnavailableError) as error:
                _log.warning("Could not release the Lease %s (it expires by itself): %s", self.leases, error)
        self._renewed_at = None
        metrics.IS_LEADER.set(0)
        metrics.LEADER_TRANSITIONS.labels(change="released").inc()
        metrics.stop_publishing()
        _log.info("Released the Lease %s as %s", self.leases, self.identity)
        return Outcome.RELEASED
