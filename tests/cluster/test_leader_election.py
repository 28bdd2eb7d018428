"""Leader election against the real API server: the elector in this process with short timings, and the
operator's own processes with the chart's.

In-process candidates (lease 3 s, renew deadline 1.5 s, retry 0.25 s) show the rules on a real Lease:
one leads, a standby writes nothing, a released lease passes at once, a taken one is given up at the
next renewal, and a leader cut off from the API server (a relay that drops its connections) has
stopped before the standby takes over. The process tests freeze a leader past its lease, as a paused
machine or a node that stops reporting is frozen, and check that on waking it writes nothing and exits.
Each candidate's requests carry its identity in the user agent, so the audit log attributes them.
"""

from __future__ import annotations

import copy
import json
import logging
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from mmd_operator.election import Timings
from mmd_operator.kube.client import KubeClient, user_agent
from mmd_operator.kube.lease import Leases
from mmd_operator.leadership import LeaderElector, Outcome
from mmd_testbed.localcluster.audit import requests, write_requests
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.kube import Kube, Resources
from tests.support.partition import Relay

from .conftest import Electorate, OperatorProcess

pytestmark = pytest.mark.cluster

# The leader stops 1.5 s after its last renewal, a standby may take over 3 s after it saw it: a margin
# that a loaded machine's scheduling cannot eat.
FAST = Timings(lease_seconds=3, renew_deadline=1.5, retry=0.25)
LEASE = "election"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class Candidate:
    """A LeaderElector running in a thread of this test process."""

    elector: LeaderElector
    client: KubeClient
    stop: threading.Event = field(default_factory=threading.Event)
    leading_since: float | None = None
    outcome: Outcome | None = None
    ended_at: float | None = None
    thread: threading.Thread | None = None

    def start(self) -> Candidate:
        def on_leading() -> None:
            self.leading_since = time.monotonic()

        def run() -> None:
            self.outcome = self.elector.run(self.stop, on_leading)
            self.ended_at = time.monotonic()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def end(self) -> Outcome | None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.client.close()
        return self.outcome


def _candidate(configuration: k8s.Configuration, namespace: str, identity: str) -> Candidate:
    configuration = copy.deepcopy(configuration)
    configuration.retries = 0
    client = KubeClient(
        k8s.ApiClient(configuration), field_manager="mmd-operator", agent=user_agent(identity)
    )
    return Candidate(LeaderElector(Leases(client, namespace, LEASE), identity, FAST), client)


def _agent(identity: str) -> tuple[str, ...]:
    return (user_agent(identity),)


def _holder(kube: Kube, namespace: str) -> str:
    lease = k8s.CoordinationV1Api(kube.core.api_client).read_namespaced_lease(LEASE, namespace)
    return str(lease.spec.holder_identity or "")


@pytest.fixture
def candidates(api_client: k8s.ApiClient) -> Iterator[list[Candidate]]:
    started: list[Candidate] = []
    yield started
    for candidate in started:
        candidate.end()


def test_one_candidate_leads_the_standby_writes_nothing_and_a_released_lease_passes_at_once(
    api_client: k8s.ApiClient,
    kube: Kube,
    namespace: str,
    local_cluster: LocalCluster,
    candidates: list[Candidate],
) -> None:
    started = datetime.now(UTC)
    first = _candidate(api_client.configuration, namespace, "first").start()
    candidates.append(first)
    kube.wait_for("the first candidate to lead", lambda: first.leading_since, timeout=10)
    second = _candidate(api_client.configuration, namespace, "second").start()
    candidates.append(second)
    time.sleep(2 * FAST.lease_seconds)  # two whole leases: the leader renews, the standby only reads
    assert second.leading_since is None and first.elector.leading()
    assert _holder(kube, namespace) == "first"
    assert write_requests(local_cluster.audit_log, user_agent_prefixes=_agent("second"), since=started) == []
    leader_writes = write_requests(
        local_cluster.audit_log, user_agent_prefixes=_agent("first"), since=started
    )
    verbs = [event["verb"] for event in leader_writes]
    assert verbs[0] == "create" and set(verbs[1:]) == {"update"}, verbs
    # A renewal every retry period (0.25 s) for 6 s, give or take the machine's load.
    assert len(verbs) >= 2 * FAST.lease_seconds / FAST.retry / 2, verbs

    handed_over = time.monotonic()
    assert first.end() is Outcome.RELEASED and not first.elector.leading()
    kube.wait_for("the standby to take the released lease", lambda: second.leading_since, timeout=10)
    assert second.leading_since is not None
    seconds = second.leading_since - handed_over
    assert seconds < FAST.retry + 1.0, f"a released lease took {seconds:.2f} s to pass"
    lease = k8s.CoordinationV1Api(api_client).read_namespaced_lease(LEASE, namespace)
    assert (lease.spec.holder_identity, lease.spec.lease_transitions) == ("second", 1)
    print(f"\n[election] released lease taken by the standby {seconds:.2f} s after the leader stopped")


def test_a_leader_whose_lease_is_taken_gives_it_up_at_its_next_renewal(
    api_client: k8s.ApiClient, kube: Kube, namespace: str, candidates: list[Candidate]
) -> None:
    leader = _candidate(api_client.configuration, namespace, "leader").start()
    candidates.append(leader)
    kube.wait_for("the candidate to lead", lambda: leader.leading_since, timeout=10)
    _usurp(k8s.CoordinationV1Api(api_client), namespace)
    taken = time.monotonic()
    kube.wait_for("the leader to give the lease up", lambda: leader.outcome, timeout=5, interval=0.05)
    assert leader.outcome is Outcome.LOST and not leader.elector.leading()
    assert leader.ended_at is not None and leader.ended_at - taken < FAST.retry + 1.0
    assert _holder(kube, namespace) == "usurper"  # and it wrote nothing over it


def _usurp(coordination: k8s.CoordinationV1Api, namespace: str) -> None:
    """Take the lease behind its leader's back, as another candidate would: read, write, and read again
    whenever the leader's renewal (every 0.25 s) came in between."""
    for _ in range(20):
        lease = coordination.read_namespaced_lease(LEASE, namespace)
        lease.spec.holder_identity = "usurper"
        try:
            coordination.replace_namespaced_lease(LEASE, namespace, lease)
            return
        except k8s.ApiException as refused:
            if refused.status != 409:
                raise
    raise AssertionError("the leader renewed between every read and write of 20")


def test_a_leader_cut_off_from_the_api_server_has_stopped_before_the_standby_takes_over(
    api_client: k8s.ApiClient,
    kube: Kube,
    namespace: str,
    local_cluster: LocalCluster,
    candidates: list[Candidate],
) -> None:
    host, port = api_client.configuration.host.removeprefix("https://").rsplit(":", 1)
    relay = Relay((host, int(port)))
    through_relay = copy.deepcopy(api_client.configuration)
    through_relay.host = f"https://{host}:{relay.port}"
    leader = _candidate(through_relay, namespace, "cut-off").start()
    candidates.append(leader)
    kube.wait_for("the candidate behind the relay to lead", lambda: leader.leading_since, timeout=10)
    standby = _candidate(api_client.configuration, namespace, "standby").start()
    candidates.append(standby)
    time.sleep(FAST.lease_seconds)
    assert standby.leading_since is None

    relay.cut()
    cut = time.monotonic()
    cut_at = datetime.now(UTC)
    kube.wait_for("the standby to take over", lambda: standby.leading_since, timeout=10, interval=0.05)
    assert (
        leader.outcome is Outcome.LOST and leader.ended_at is not None and standby.leading_since is not None
    )
    stopped, took_over = leader.ended_at - cut, standby.leading_since - cut
    # The leader stops at its renew deadline (1.5 s after its last renewal), the standby may write only
    # a whole lease (3 s) after it last saw one: never two leaders, and a bounded gap.
    assert stopped < took_over, (
        f"the old leader stopped {stopped:.2f} s after the cut, the new one led at {took_over:.2f} s"
    )
    assert took_over <= FAST.takeover_bound + 0.5
    # A renewal already on the wire at the cut can still reach the API server, which then sees its client
    # gone and cancels it (504): that wrote nothing. No write of the cut-off leader may succeed.
    after_cut = write_requests(local_cluster.audit_log, user_agent_prefixes=_agent("cut-off"), since=cut_at)
    assert [event for event in after_cut if event.get("responseStatus", {}).get("code", 200) < 400] == []
    print(
        f"\n[election] cut off: the leader stopped {stopped:.2f} s after the cut, the standby led "
        f"{took_over:.2f} s after it (bound {FAST.takeover_bound:.2f} s)"
    )


# -- the operator's processes ------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_frozen_leader_wakes_to_a_lost_lease_writes_nothing_and_exits(
    electorate: Electorate, resources: Resources, local_cluster: LocalCluster
) -> None:
    """SIGSTOP freezes the leader as a paused machine, or a node that stops reporting, freezes it: its
    renewals stop, the standby takes over, and when it runs again it has events and reconciles queued.
    Its first act on waking must be to find its renew deadline passed: no write taken, exit code 3."""
    electorate.start("op-a")
    electorate.start("op-b")
    whisper = yaml.safe_load((EXAMPLES / "whisper.yaml").read_text())
    resources.apply({**whisper, "metadata": {"name": "frozen"}})
    resources.wait_phase("frozen", "Ready")
    frozen = electorate.processes["op-a"]
    assert frozen.process is not None and electorate.holder() == "op-a"
    frozen.process.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        electorate.wait_for_holder("op-b", timeout=electorate.timings.takeover_bound + 10)
        took_over = time.monotonic() - stopped
        # A change only the new leader sees while the old one is frozen.
        changed = copy.deepcopy(whisper)
        changed["spec"].setdefault("serving", {})["queue"] = {"maxQueueDelayMicroseconds": 700}
        resources.apply({**changed, "metadata": {"name": "frozen"}})
        ready = resources.wait_phase("frozen", "Ready", timeout=120)
        assert ready["status"]["observedGeneration"] == ready["metadata"]["generation"]
    finally:
        woke_at = datetime.now(UTC)
        frozen.process.send_signal(signal.SIGCONT)
    assert frozen.process.wait(timeout=15) == 3
    log = frozen.output()
    assert "Lost the Lease" in log and "not renewed within 10 s" in log, log[-2000:]
    writes = write_requests(
        local_cluster.audit_log, user_agent_prefixes=electorate.agents("op-a"), since=woke_at
    )
    # A SIGSTOP between the deadline check and the renewal's send leaves that one renewal to go out on
    # waking (CI saw it once under load): it carries the old resourceVersion, so the API server refuses it
    # (409). What must never be is a write the server took.
    taken = [w for w in writes if w.get("responseStatus", {}).get("code", 200) < 400]
    assert taken == [], [(w["verb"], w["objectRef"], w.get("responseStatus")) for w in writes]
    assert all(w["verb"] == "update" and w["objectRef"]["resource"] == "leases" for w in writes), writes
    print(
        f"\n[election] frozen leader replaced after {took_over:.1f} s; "
        "on waking it wrote nothing and exited 3"
    )


def test_the_standby_only_reads_its_lease(
    electorate: Electorate, resources: Resources, local_cluster: LocalCluster
) -> None:
    """While it waits, the standby's every request (the audit log has a ServiceAccount's reads too) is a
    GET of the Lease: no watch, no list, no write."""
    electorate.start("op-a")
    since = datetime.now(UTC)
    electorate.start("op-b")
    whisper = yaml.safe_load((EXAMPLES / "whisper.yaml").read_text())
    resources.apply({**whisper, "metadata": {"name": "watched"}})
    resources.wait_phase("watched", "Ready")
    time.sleep(3 * electorate.timings.retry)
    seen = requests(local_cluster.audit_log, user_agent_prefixes=electorate.agents("op-b"), since=since)
    calls = {(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name")) for e in seen}
    assert calls == {("get", "leases", electorate.lease)}, calls
    print(f"\n[election] the standby made {len(seen)} requests, all GETs of its Lease, and no write")
    # What a person or Prometheus sees of each: the gauge, the transitions, and a standby kept alive.
    leader, standby = electorate.processes["op-a"], electorate.processes["op-b"]
    assert _metric(leader, "mmd_is_leader") == 1.0 and _metric(standby, "mmd_is_leader") == 0.0
    assert _metric(leader, 'mmd_leader_transitions_total{change="acquired"}') == 1.0
    assert _metric(standby, 'mmd_leader_transitions_total{change="acquired"}') is None
    with urllib.request.urlopen(f"http://127.0.0.1:{standby.health_port}/healthz", timeout=5) as answer:
        assert answer.status == 200 and json.loads(answer.read()) == {"standby": True}
    with urllib.request.urlopen(f"http://127.0.0.1:{leader.health_port}/healthz", timeout=5) as answer:
        assert answer.status == 200  # kopf's own liveness endpoint, once leading
    log = leader.output()
    assert log.count("Became the leader as op-a-") == 1 and "Standing by" not in log
    assert standby.output().count("Standing by as op-b-") == 1


def _metric(process: OperatorProcess, sample: str) -> float | None:
    """The value of one sample (`name{labels}`) on the process's /metrics, None when it has none."""
    with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            name, _, value = line.rpartition(" ")
            if name == sample:
                return float(value)
    return None


def test_a_candidate_that_may_not_create_its_lease_says_so_once_and_keeps_a_calm_pace(
    api_client: k8s.ApiClient,
    namespace: str,
    local_cluster: LocalCluster,
    candidates: list[Candidate],
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = datetime.now(UTC)
    missing = f"{namespace}-missing"
    lost = _candidate(api_client.configuration, missing, "lost")
    with caplog.at_level(logging.WARNING, logger="mmd_operator.leadership"):
        candidates.append(lost.start())
        time.sleep(3.0)
        lost.end()
    assert lost.leading_since is None and lost.outcome is Outcome.STOPPED
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        f"Could not create the Lease {missing}/{LEASE}: the namespace {missing} of the Lease "
        f"{missing}/{LEASE} does not exist"
    ]
    attempts = write_requests(local_cluster.audit_log, user_agent_prefixes=_agent("lost"), since=started)
    # One create per retry period (0.25 s), each refused for the missing namespace; never a tight loop.
    assert 3 <= len(attempts) <= 3.0 / FAST.retry + 2, len(attempts)
    assert {(e["verb"], e["responseStatus"]["code"]) for e in attempts} == {("create", 404)}
