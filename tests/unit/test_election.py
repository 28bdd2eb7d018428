"""The pure rules of leader election: when a candidate creates, takes, renews or waits, on its own clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmd_operator import election
from mmd_operator.election import LeaseRecord, Sighting, Step, Timings

TIMINGS = Timings(lease_seconds=15, renew_deadline=10.0, retry=2.0)
WALL = datetime(2025, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def held_by(holder: str, renewed: str = "2025-05-01T11:59:58.000000Z", transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, 15, "2025-05-01T11:00:00.000000Z", renewed, transitions)


def test_no_lease_is_created_holding_it() -> None:
    sighting = election.sighted(None, None, "", now=100.0)
    assert election.next_step("b", sighting, now=100.0) is Step.CREATE
    record = election.record_to_write("b", Step.CREATE, sighting, TIMINGS, WALL)
    assert record == LeaseRecord("b", 15, "2025-05-01T12:00:00.123456Z", "2025-05-01T12:00:00.123456Z", 0)


def test_a_standby_waits_while_the_holder_renews_and_takes_over_only_after_a_whole_unrenewed_lease() -> None:
    first = election.sighted(None, held_by("a"), "7", now=100.0)
    assert election.next_step("b", first, now=100.0) is Step.WAIT
    # The leader renews at 101: a new record, so the lease counts from when b saw it (102), not before.
    renewed = election.sighted(first, held_by("a", renewed="2025-05-01T12:00:01.000000Z"), "8", now=102.0)
    assert renewed.since == 102.0
    assert election.next_step("b", renewed, now=116.9) is Step.WAIT
    # Then no renewal: the same record, read again, keeps its first sighting.
    again = election.sighted(renewed, renewed.record, "8", now=116.9)
    assert again.since == 102.0
    assert election.next_step("b", again, now=117.0) is Step.TAKE
    taken = election.record_to_write("b", Step.TAKE, again, TIMINGS, WALL)
    assert (taken.holder, taken.transitions, taken.acquire_time) == ("b", 1, "2025-05-01T12:00:00.123456Z")


def test_a_standby_wakes_exactly_when_the_lease_would_expire_not_a_retry_period_later() -> None:
    sighting = election.sighted(None, held_by("a"), "7", now=100.0)
    assert election.wait_before_looking_again(sighting, 100.0, TIMINGS) == 2.0
    assert election.wait_before_looking_again(sighting, 114.5, TIMINGS) == pytest.approx(0.5)
    assert election.wait_before_looking_again(sighting, 120.0, TIMINGS) == 0.0


def test_a_released_lease_is_taken_at_once_and_the_holder_renews_its_own() -> None:
    released = election.released(held_by("a", transitions=4), WALL)
    assert released.holder == "" and released.lease_seconds == 1 and released.transitions == 4
    sighting = election.sighted(None, released, "9", now=100.0)
    assert election.next_step("b", sighting, now=100.0) is Step.TAKE
    assert election.record_to_write("b", Step.TAKE, sighting, TIMINGS, WALL).transitions == 5
    own = election.sighted(None, held_by("b", transitions=5), "10", now=100.0)
    assert election.next_step("b", own, now=100.0) is Step.RENEW
    renewal = election.record_to_write("b", Step.RENEW, own, TIMINGS, WALL)
    assert own.record is not None and renewal.acquire_time == own.record.acquire_time
    assert (renewal.renew_time, renewal.transitions) == ("2025-05-01T12:00:00.123456Z", 5)


def test_the_leader_stops_at_its_renew_deadline_counted_from_when_it_sent_its_last_renewal() -> None:
    assert not election.lapsed(renewed_at=50.0, now=59.99, timings=TIMINGS)
    assert election.lapsed(renewed_at=50.0, now=60.0, timings=TIMINGS)
    assert TIMINGS.takeover_bound == 17.0


@given(
    renew_sent=st.floats(0, 1000),
    seen_after=st.floats(0, 2.0),  # a standby reads the lease within a retry period of the write
    clock_offset=st.floats(-1e6, 1e6),  # the standby's monotonic clock has its own origin
)
def test_the_leader_has_stopped_before_any_standby_may_take_over(
    renew_sent: float, seen_after: float, clock_offset: float
) -> None:
    """Whatever the delays, the first moment a standby may write is after the leader's own deadline."""
    sighting = election.sighted(None, held_by("a"), "7", now=renew_sent + seen_after + clock_offset)
    # On the standby's clock (no round trip through the offset: floats would move the boundary).
    first_take = sighting.since + TIMINGS.lease_seconds
    assert election.next_step("b", sighting, now=first_take) is Step.TAKE
    assert election.next_step("b", sighting, now=first_take - 1e-3) is Step.WAIT
    # The same moment on the leader's clock.
    assert election.lapsed(renew_sent, first_take - clock_offset, TIMINGS)


def test_a_sighting_keeps_the_newest_version_of_an_unchanged_record() -> None:
    first = election.sighted(None, held_by("a"), "7", now=100.0)
    assert election.sighted(first, held_by("a"), "8", now=101.0) == Sighting(held_by("a"), "8", 100.0)
