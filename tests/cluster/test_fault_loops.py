"""Faults in loops, each with a count: the operator killed at random points, the API server and etcd
restarted under it, serving pods that stop being ready, a node that goes away, builds that fail or die
mid-write, two operators electing a leader, the leader killed. After every round the namespace passes the
whole consistency check (`tests/support/consistency.py`) and no cacheKey was ever built by a second Job.

`make test` runs a few rounds of each; `make soak` runs the full counts (MMD_FAULT_ROUNDS and friends).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import logging
import os
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_operator.config import DEFAULT_CLAIM, OperatorConfig
from mmd_operator.controller import Controller
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient
from mmd_operator.vocabulary import labels
from mmd_testbed.localcluster.audit import requests, write_requests
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.objects import NODE_ANNOTATION, NodePool, gpu_node
from mmd_testbed.localcluster.stages import (
    FAULT_EXIT_CODE_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)
from tests.support import consistency
from tests.support.kube import Kube, Resources, Tools
from tests.support.nodes import extra_gpu_nodes

from .conftest import STARTED, Electorate, OperatorProcess

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KILL_ROUNDS = int(os.environ.get("MMD_FAULT_KILL_ROUNDS", "3"))
FLEET = int(os.environ.get("MMD_FAULT_RESOURCES", "50"))
RESTART_ROUNDS = int(os.environ.get("MMD_FAULT_RESTART_ROUNDS", "1"))
UNREADY_ROUNDS = int(os.environ.get("MMD_FAULT_UNREADY_ROUNDS", "2"))
NODE_ROUNDS = int(os.environ.get("MMD_FAULT_NODE_ROUNDS", "1"))
LEADER_ROUNDS = int(os.environ.get("MMD_FAULT_LEADER_ROUNDS", "1"))
SEED = int(os.environ.get("MMD_FAULT_SEED", str(time.time_ns() % 100_000)))
EXTRA_NODES = NodePool(count=6, name_prefix="fault-node")
# The nodes the node-loss test takes away: tainted, so that no other test's pod (the soak runs beside
# these tests on another worker) is on a node when it goes, and labelled, so its own pod lands on them.
LOSABLE_NODES = NodePool(count=2, name_prefix="losable-node")
LOSABLE = "mmd.test/losable"


def say(text: str) -> None:
    print(f"\n[faults] {text}", flush=True)


@pytest.fixture(scope="module")
def capacity(kube: Kube) -> Iterator[list[str]]:
    """Six more GPU nodes (48 GPUs) for a fleet of fifty and room to reschedule."""
    names = EXTRA_NODES.node_names()
    for name in names:
        kube.core.create_node(gpu_node(name, EXTRA_NODES))
    kube.wait_for(
        "the extra nodes to be Ready",
        lambda: all(
            any(
                c.type == "Ready" and c.status == "True"
                for c in kube.core.read_node(n).status.conditions or []
            )
            for n in names
        ),
        timeout=60,
    )
    yield names
    for name in names:
        kube.core.delete_node(name)


def fleet(count: int) -> list[dict[str, Any]]:
    """`count` resources over five engines (three llava, two whisper), ten per engine."""
    llava = yaml.safe_load((EXAMPLES / "llava.yaml").read_text())
    whisper = yaml.safe_load((EXAMPLES / "whisper.yaml").read_text())
    engines = []
    for index, template in enumerate((llava, llava, llava, whisper, whisper)):
        document = copy.deepcopy(template)
        document["spec"].setdefault("engine", {})["maxBatchSize"] = 8 + index
        engines.append(document)
    documents = []
    for index in range(count):
        document = copy.deepcopy(engines[index % len(engines)])
        document["metadata"] = {"name": f"f{index:02d}"}
        documents.append(document)
    return documents


def apply_all(resources: Resources, documents: list[dict[str, Any]]) -> None:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(resources.apply, documents))


def apply_all_as_a_user_would(resources: Resources, documents: list[dict[str, Any]]) -> None:
    """Apply, and try again for a while when a just-restarted API server is not serving the CRD yet."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return apply_all(resources, documents)
        except k8s.ApiException as refused:
            if refused.status not in (404, 429, 500, 503) or time.monotonic() > deadline:
                raise
            say(f"the restarted API server said {refused.status} {refused.reason}; applying again")
            time.sleep(1)


def converge(api: k8s.ApiClient, namespace: str, what: str, timeout: float = 300) -> float:
    """Wait until the namespace passes the consistency check; the seconds it took."""
    started = time.monotonic()
    found: list[str] = []
    while time.monotonic() - started < timeout:
        found = consistency.problems(api, namespace)
        if not found:
            return time.monotonic() - started
        time.sleep(2)
    pytest.fail(
        f"{what}: not consistent after {timeout:.0f} s; {len(found)} problems:\n" + "\n".join(found[:30])
    )


def one_job_per_cache_key(ledger: consistency.JobLedger) -> dict[str, int]:
    created = ledger.created()
    assert created, "no build Job was ever seen"
    twice = {key: count for key, count in created.items() if count != 1}
    assert not twice, f"cacheKeys built by more than one Job: {twice}"
    return created


def change(document: dict[str, Any], rng: random.Random, round_number: int, engine_move: bool) -> None:
    """A serving change (a new repository, a rollout) or a move to an engine no round used before."""
    spec = document["spec"]
    if engine_move:
        spec["engine"]["maxBatchSize"] = 8 + 5 * (round_number + 1) + rng.randrange(2)
    else:
        spec.setdefault("serving", {}).setdefault("queue", {})["maxQueueDelayMicroseconds"] = rng.randrange(
            1, 10_000
        )


@pytest.mark.timeout(180 + 60 * KILL_ROUNDS)
@pytest.mark.usefixtures("capacity")
def test_sigkill_at_random_points_loses_nothing(
    api_client: k8s.ApiClient, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    rng = random.Random(SEED)
    say(f"SIGKILL: {KILL_ROUNDS} rounds over {FLEET} resources, seed {SEED}")
    documents = fleet(FLEET)
    ledger = consistency.JobLedger(api_client, namespace)
    try:
        apply_all(resources, documents)
        first = converge(api_client, namespace, "the first apply")
        say(f"{FLEET} resources consistent after {first:.1f} s")
        for round_number in range(KILL_ROUNDS):
            changed = rng.sample(documents, 10)
            for position, document in enumerate(changed):
                change(document, rng, round_number, engine_move=position % 2 == 0)
            applying = concurrent.futures.ThreadPoolExecutor(1).submit(apply_all, resources, changed)
            delay = rng.uniform(0.0, 3.0)
            time.sleep(delay)
            operator.kill()
            applying.result()
            operator.start()
            seconds = converge(api_client, namespace, f"round {round_number + 1}")
            say(f"round {round_number + 1}: killed {delay:.2f} s in; consistent after {seconds:.1f} s")
        created = one_job_per_cache_key(ledger)
    finally:
        ledger.close()
    say(f"SIGKILL: {KILL_ROUNDS} of {KILL_ROUNDS} rounds survived; {len(created)} cacheKeys, one Job each")


@pytest.mark.timeout(180 + 90 * RESTART_ROUNDS)
@pytest.mark.usefixtures("capacity")
def test_the_api_server_and_etcd_restart_under_a_running_operator(
    api_client: k8s.ApiClient,
    resources: Resources,
    namespace: str,
    operator: OperatorProcess,
    local_cluster: LocalCluster,
) -> None:
    rng = random.Random(SEED + 1)
    documents = fleet(20)
    pid = operator.process.pid if operator.process else None
    ledger = consistency.JobLedger(api_client, namespace)
    try:
        apply_all(resources, documents)
        for round_number in range(RESTART_ROUNDS):
            time.sleep(rng.uniform(0.5, 2.0))  # mid-reconcile
            local_cluster.restart(("etcd", "kube-apiserver"), downtime=2.0)
            # What changes after the restart reaches the operator only through watches made again.
            changed = rng.sample(documents, 5)
            for position, document in enumerate(changed):
                change(document, rng, round_number, engine_move=position == 0)
            apply_all_as_a_user_would(resources, changed)
            seconds = converge(api_client, namespace, f"restart {round_number + 1}")
            say(f"restart {round_number + 1}: etcd and API server down 2 s; consistent after {seconds:.1f} s")
        assert operator.process is not None and operator.process.pid == pid and operator.running
        one_job_per_cache_key(ledger)
    finally:
        ledger.close()
    say(f"API server and etcd: {RESTART_ROUNDS} of {RESTART_ROUNDS} restarts, no operator restart")


# kopf's own retries of one request add up to 54 s; the refusal must outlast them.
REFUSED_SECONDS = 75.0


@pytest.mark.timeout(420)
@pytest.mark.usefixtures("capacity")
def test_watches_outlast_a_minute_of_refusals_after_an_api_server_restart(
    api_client: k8s.ApiClient,
    tools: Tools,
    resources: Resources,
    namespace: str,
    operator: OperatorProcess,
    local_cluster: LocalCluster,
    tmp_path: Path,
) -> None:
    """The API server restarts and then refuses the operator (403) for over a minute, as when its binding
    is deleted and restored, or answers 503 while a slow start installs its paths: the operator keeps
    trying, sees what changed meanwhile once let in, and never restarts. (With kopf's own retry budget
    its watcher gave up after 54 s and the operator stopped: the 30-minute soak's failure.)"""
    account = "refused-operator"
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{namespace}-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    k8s.CoreV1Api(api_client).create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    rbac.create_cluster_role_binding(binding)
    token = tools.run("kubectl", "create", "token", account, "-n", namespace, "--duration=1h").stdout
    kubeconfig = local_cluster.token_kubeconfig(token.strip(), tmp_path / "token.kubeconfig")
    operator.stop()  # the session's operator holds cluster-admin for good: this one alone may work here
    refused = OperatorProcess(kubeconfig, tmp_path / "operator.log", namespaces=(namespace,))
    documents = fleet(10)
    try:
        refused.start()
        pid = refused.process.pid if refused.process else None
        apply_all(resources, documents)
        say(f"10 resources consistent after {converge(api_client, namespace, 'the first apply'):.1f} s")
        rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        local_cluster.restart(("kube-apiserver",), downtime=1.0)  # every watch connects again, and is refused
        refused_at = time.monotonic()
        changed = documents[:4]
        for position, document in enumerate(changed):
            change(document, random.Random(SEED + 2), 0, engine_move=position == 0)
        apply_all_as_a_user_would(resources, changed)
        time.sleep(max(0.0, REFUSED_SECONDS - (time.monotonic() - refused_at)))
        log = refused.output()
        forbidden = log.count("Forbidden")
        assert "APIForbiddenError" in log, "the operator's watches were never refused: " + log[-2000:]
        rbac.create_cluster_role_binding(binding)
        seconds = converge(api_client, namespace, "after the refusals")
        say(
            f"refused for {REFUSED_SECONDS:.0f} s ({forbidden} refusals logged); "
            f"consistent {seconds:.1f} s after the binding came back, same operator"
        )
        assert refused.running and refused.process is not None and refused.process.pid == pid
        assert "has failed" not in refused.output(), refused.output()[-3000:]
    finally:
        refused.stop()
        with contextlib.suppress(k8s.ApiException):
            rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        operator.start()


def _gone(resources: Resources, name: str) -> bool:
    try:
        resources.get(name)
    except k8s.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


@pytest.mark.usefixtures("operator")
def test_a_resource_deleted_unseen_is_forgotten_at_its_first_404_not_retried_for_ever(
    api_client: k8s.ApiClient,
    kube: Kube,
    resources: Resources,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A watch that missed a deletion (broken by an outage at that moment) leaves the resource in the cache;
    the reconcile of a change it did see then meets a 404. The operator asks the API server once, forgets the
    resource, and does not fail it again (in the soak it had failed every reconcile thereafter)."""
    whisper = yaml.safe_load((EXAMPLES / "whisper.yaml").read_text())
    resources.apply({**whisper, "metadata": {"name": "ghost"}})
    resources.wait_phase("ghost", "Ready")
    # An operator of its own, with no watches: its cache holds what it listed, and nothing tells it more.
    blind = Controller(
        KubeClient(k8s.ApiClient(api_client.configuration), field_manager="mmd-operator"),
        OperatorConfig(namespaces=(namespace,)),
    )
    try:
        blind.prime()
        # Its watch brings a change, then breaks before the deletion.
        whisper["spec"].setdefault("serving", {})["queue"] = {"maxQueueDelayMicroseconds": 500}
        blind.store.put(cached.RESOURCES, resources.apply({**whisper, "metadata": {"name": "ghost"}}))
        resources.delete("ghost")
        kube.wait_for("ghost to be deleted", lambda: _gone(resources, "ghost"))
        with caplog.at_level(logging.INFO, logger="mmd_operator.reconcile"):
            outcome = blind.reconciler.reconcile(namespace, "ghost")
        assert outcome.phase is None and outcome.requeue_after is None
        assert blind.store.get(cached.RESOURCES, namespace, "ghost") is None
        assert "gone without a deletion event" in caplog.text
        assert blind.reconciler.reconcile(namespace, "ghost").writes == 0  # nothing left to do
    finally:
        blind.reconciler.events.close()
        blind.client.close()
    kube.wait_for(
        "the garbage collector to take whatever the blind reconcile made for the deleted owner",
        lambda: (
            not kube.core.list_namespaced_config_map(
                namespace, label_selector=f"{labels.INSTANCE}=ghost"
            ).items
            and not kube.apps.list_namespaced_deployment(
                namespace, label_selector=f"{labels.INSTANCE}=ghost"
            ).items
        ),
        timeout=60,
    )


def _serving_pod(kube: Kube, namespace: str, name: str) -> Any:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={name}").items
    live = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]
    return live[0] if len(live) == 1 else None


def _set_ready(kube: Kube, namespace: str, pod: Any, ready: bool, restarts: int) -> None:
    """Write the pod's status as its kubelet would when the readiness probe starts or stops failing."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = "True" if ready else "False"
    conditions = [
        {"type": kind, "status": status, "lastTransitionTime": now} for kind in ("Ready", "ContainersReady")
    ]
    containers = [
        {
            "name": c.name,
            "image": c.image,
            "imageID": c.image_id or "",
            "ready": ready,
            "restartCount": restarts,
            "started": True,
            "state": {"running": {"startedAt": now}},
        }
        for c in pod.status.container_statuses
    ]
    kube.core.patch_namespaced_pod_status(
        pod.metadata.name, namespace, {"status": {"conditions": conditions, "containerStatuses": containers}}
    )


@pytest.mark.timeout(120 + 60 * UNREADY_ROUNDS)
def test_serving_pods_that_stop_being_ready_degrade_and_recover(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    document = fleet(1)[0]
    resources.apply(document)
    resources.wait_phase("f00", "Ready")
    for round_number in range(UNREADY_ROUNDS):
        pod = kube.wait_for("one running serving pod", lambda: _serving_pod(kube, namespace, "f00"))
        _set_ready(kube, namespace, pod, ready=False, restarts=round_number + 1)
        degraded = resources.wait_phase("f00", "Degraded")
        ready = next(c for c in degraded["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False" and ready["reason"] == "PodsNotReady", ready
        assert pod.metadata.name in ready["message"], ready
        _set_ready(kube, namespace, pod, ready=True, restarts=round_number + 1)
        resources.wait_phase("f00", "Ready")
    say(f"unready serving pods: {UNREADY_ROUNDS} of {UNREADY_ROUNDS} rounds Degraded, then Ready")


def _node_ready(kube: Kube, name: str) -> bool:
    conditions = kube.core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _restart_kwok_without(kube: Kube, cluster: LocalCluster, node: str, *, lost: bool) -> None:
    """kwok plays the kubelet of every annotated node; a node it no longer plays stops renewing its lease."""
    kube.core.patch_node(node, {"metadata": {"annotations": {NODE_ANNOTATION: None if lost else "fake"}}})
    cluster.restart(("kwok",))


@pytest.mark.timeout(120 + 300 * NODE_ROUNDS)
def test_a_node_that_goes_away_has_its_serving_pods_rescheduled(
    kube: Kube,
    resources: Resources,
    namespace: str,
    operator: OperatorProcess,
    local_cluster: LocalCluster,
) -> None:
    document = fleet(1)[0]
    document["spec"].setdefault("serving", {})["pod"] = {
        "nodeSelector": {LOSABLE: "true"},
        "tolerations": [{"key": LOSABLE, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
    }
    taint = {"key": LOSABLE, "value": "true", "effect": "NoSchedule"}
    with extra_gpu_nodes(kube, LOSABLE_NODES, taints=(taint,), labels={LOSABLE: "true"}):
        resources.apply(document)
        resources.wait_phase("f00", "Ready")
        for round_number in range(NODE_ROUNDS):
            _lose_the_serving_node(kube, resources, namespace, local_cluster, round_number)
    say(f"lost nodes: {NODE_ROUNDS} of {NODE_ROUNDS} rounds, the pod rescheduled and the status said so")


def _lose_the_serving_node(
    kube: Kube, resources: Resources, namespace: str, cluster: LocalCluster, round_number: int
) -> None:
    pod = kube.wait_for("one running serving pod", lambda: _serving_pod(kube, namespace, "f00"))
    node = pod.spec.node_name
    started = time.monotonic()
    _restart_kwok_without(kube, cluster, node, lost=True)
    phases: list[tuple[float, str, str]] = []

    def rescheduled() -> Any:
        status = resources.get("f00").get("status") or {}
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
        seen = (status.get("phase", ""), ready.get("message", ""))
        if not phases or phases[-1][1:] != seen:
            phases.append((round(time.monotonic() - started, 1), *seen))
        replacement = _serving_pod(kube, namespace, "f00")
        if replacement is None or replacement.spec.node_name == node or seen[0] != "Ready":
            return None
        return replacement

    try:
        kube.wait_for(f"{node} to be NotReady", lambda: not _node_ready(kube, node), timeout=240)
        lost = time.monotonic() - started
        replacement = kube.wait_for("the serving pod to run elsewhere", rescheduled, timeout=180)
    finally:
        _restart_kwok_without(kube, cluster, node, lost=False)
        kube.wait_for(f"{node} to be Ready again", lambda: _node_ready(kube, node), timeout=120)
    assert replacement.spec.node_name != node
    said = [p for p in phases if p[1] == "Degraded" and f"its node {node} stopped reporting" in p[2]]
    assert said, f"the status never said the node was lost: {phases}"
    say(f"round {round_number + 1}: {node} NotReady after {lost:.0f} s; pod to {replacement.spec.node_name}")
    say(f"status: {phases}")


@pytest.mark.timeout(420)
@pytest.mark.usefixtures("capacity")
def test_two_operators_elect_one_leader_whose_standby_writes_nothing_and_nothing_is_duplicated(
    api_client: k8s.ApiClient,
    resources: Resources,
    namespace: str,
    electorate: Electorate,
    local_cluster: LocalCluster,
) -> None:
    """Two operators at once, as the chart's two replicas run: one leads and reconciles, the other stands
    by and, the whole round through, makes no request but a GET of the Lease."""
    assert electorate.start("op-a") == "leader"
    standing_by = datetime.now(UTC)
    assert electorate.start("op-b") == "standby"
    ledger = consistency.JobLedger(api_client, namespace)
    try:
        documents = fleet(20)
        apply_all(resources, documents)
        converge(api_client, namespace, "two operators")
        rng = random.Random(SEED + 2)
        for document in documents[:10]:
            change(document, rng, 0, engine_move=True)
        apply_all(resources, documents[:10])
        converge(api_client, namespace, "two operators, after engine moves")
        created = one_job_per_cache_key(ledger)
    finally:
        ledger.close()
    assert electorate.holder() == "op-a"
    audit = local_cluster.audit_log
    standby = requests(audit, user_agent_prefixes=electorate.agents("op-b"), since=standing_by)
    calls = {(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name")) for e in standby}
    assert calls == {("get", "leases", electorate.lease)}, calls
    leader_writes = write_requests(audit, user_agent_prefixes=electorate.agents("op-a"), since=standing_by)
    renewals = sum(e["objectRef"]["resource"] == "leases" for e in leader_writes)
    say(
        f"two operators: {len(created)} cacheKeys, one Job each, namespace consistent; the leader wrote "
        f"{len(leader_writes) - renewals} times and renewed its Lease {renewals} times, the standby made "
        f"{len(standby)} requests, every one a GET of the Lease, and no write"
    )


@pytest.mark.timeout(180 + 120 * LEADER_ROUNDS)
@pytest.mark.usefixtures("capacity")
def test_a_leader_killed_at_random_points_is_replaced_within_the_bound_and_loses_nothing(
    api_client: k8s.ApiClient, resources: Resources, namespace: str, electorate: Electorate
) -> None:
    """SIGKILL of the leader 0-3 s into concurrent changes: the standby holds the Lease within lease
    duration + retry period (17 s with the chart's timings), lists everything as at any start, and the
    changes made during the gap converge; the killed one comes back as the standby."""
    rng = random.Random(SEED + 3)
    bound = electorate.timings.takeover_bound
    say(f"leader SIGKILL: {LEADER_ROUNDS} rounds over 20 resources, seed {SEED + 3}, bound {bound:.0f} s")
    electorate.start("op-a")
    electorate.start("op-b")
    documents = fleet(20)
    ledger = consistency.JobLedger(api_client, namespace)
    takeovers: list[float] = []
    try:
        apply_all(resources, documents)
        converge(api_client, namespace, "the first apply")
        for round_number in range(LEADER_ROUNDS):
            leader = electorate.holder()
            standby = next(name for name in electorate.processes if name != leader)
            changed = rng.sample(documents, 6)
            for position, document in enumerate(changed):
                change(document, rng, round_number, engine_move=position % 2 == 0)
            starts = electorate.processes[standby].output().count(STARTED)
            applying = concurrent.futures.ThreadPoolExecutor(1).submit(apply_all, resources, changed)
            delay = rng.uniform(0.0, 3.0)
            time.sleep(delay)
            electorate.processes[leader].kill()
            killed = time.monotonic()
            applying.result()
            electorate.wait_for_holder(standby, timeout=bound + 30)
            takeover = time.monotonic() - killed
            takeovers.append(takeover)
            # The bound, plus 1 s for the latency of the standby's GET and update on a loaded machine.
            assert takeover <= bound + 1.0, (
                f"the standby took {takeover:.1f} s, more than {bound:.0f} s + 1 s"
            )
            electorate.kube.wait_for(
                "the new leader to start reconciling",
                lambda log=electorate.processes[standby], starts=starts: log.output().count(STARTED) > starts,
                interval=0.05,
            )
            reconciling = time.monotonic() - killed
            electorate.start(leader)  # back, as the standby
            seconds = converge(api_client, namespace, f"leader round {round_number + 1}")
            say(
                f"round {round_number + 1}: {leader} killed {delay:.2f} s into the changes; {standby} held "
                f"the Lease {takeover:.1f} s later, reconciled from {reconciling:.1f} s; consistent "
                f"{seconds:.1f} s after that"
            )
        created = one_job_per_cache_key(ledger)
    finally:
        ledger.close()
    say(
        f"leader SIGKILL: {LEADER_ROUNDS} of {LEADER_ROUNDS} rounds; takeover {min(takeovers):.1f}-"
        f"{max(takeovers):.1f} s (bound {bound:.0f} s); {len(created)} cacheKeys, one Job each"
    )


@pytest.mark.timeout(120 + 90 * UNREADY_ROUNDS)
def test_a_builder_killed_mid_write_is_retried_as_configured_and_never_served(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    """kwok plays a builder the kernel kills while it writes the engine (exit 137, no result line)."""
    serving = fleet(1)[0]
    resources.apply(serving)
    first = resources.wait_phase("f00", "Ready")["status"]["engine"]["cacheKey"]
    retries = 2
    for round_number in range(UNREADY_ROUNDS):
        broken = copy.deepcopy(serving)
        broken["spec"]["engine"]["maxBatchSize"] = 20 + round_number
        broken["spec"]["build"] = {
            "backoffLimit": retries,
            "pod": {
                "labels": {FAULT_LABEL: "fail"},
                "annotations": {
                    FAULT_EXIT_CODE_ANNOTATION: "137",
                    FAULT_MESSAGE_ANNOTATION: "[build-llm] writing rank0.engine: 6.2 of 13.5 GiB",
                },
            },
        }
        resources.apply(broken)
        served: set[str] = set()

        def failed(served: set[str] = served) -> Any:
            deployment = kube.apps.read_namespaced_deployment("f00", namespace)
            served.add(deployment.spec.template.metadata.labels[labels.CACHE_KEY])
            body = resources.get("f00")
            status = body.get("status") or {}
            current = status.get("observedGeneration") == body["metadata"]["generation"]
            return body if current and status.get("phase") == "Failed" else None

        body = kube.wait_for("the killed build to fail after its retries", failed, timeout=120)
        key = body["status"]["engine"]["cacheKey"]
        ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "BuildFailed" and "(exit code 137), killed by SIGKILL" in ready["message"]
        assert "writing rank0.engine" in ready["message"], ready
        available = next(c for c in body["status"]["conditions"] if c["type"] == "Available")
        assert available["status"] == "True"  # the old engine still serves
        attempts = kube.core.list_namespaced_pod(namespace, label_selector=f"{labels.CACHE_KEY}={key}").items
        assert sorted(p.status.phase for p in attempts) == ["Failed"] * (retries + 1)
        assert served <= {first}, f"a Deployment referenced the partial engine {key}"
        index = kube.core.read_namespaced_config_map(f"{DEFAULT_CLAIM}-index", namespace).data or {}
        assert key not in index
        fixed = copy.deepcopy(broken)
        fixed["spec"]["build"] = {"backoffLimit": retries}
        resources.apply(fixed)
        resources.wait_phase("f00", "Ready")
        deployment = kube.apps.read_namespaced_deployment("f00", namespace)
        assert deployment.spec.template.metadata.labels[labels.CACHE_KEY] == key
        serving, first = fixed, key
    say(f"builder killed mid-write: {UNREADY_ROUNDS} of {UNREADY_ROUNDS} rounds, never served, then built")


def test_the_consistency_check_finds_drift_and_the_operator_repairs_it(
    api_client: k8s.ApiClient, kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    resources.apply(fleet(1)[0])
    converge(api_client, namespace, "one resource")
    owner = resources.get("f00")["metadata"]
    operator.stop()
    try:
        kube.core.delete_namespaced_service("f00", namespace)
        kube.apps.patch_namespaced_deployment(
            "f00", namespace, {"metadata": {"annotations": {labels.APPLIED_HASH: "half-written"}}}
        )
        stale = {
            "metadata": {
                "name": "f00-repo-0000000000",
                "labels": labels.for_instance("f00", labels.MODEL_REPOSITORY),
                "ownerReferences": [
                    {"apiVersion": API_VERSION, "kind": KIND, "name": "f00", "uid": owner["uid"]}
                ],
            },
            "data": {"config.pbtxt": "stale"},
        }
        kube.core.create_namespaced_config_map(namespace, stale)
        found = consistency.problems(api_client, namespace)
        wanted = consistency.expected_children(resources.get("f00"), OperatorConfig())["ConfigMap"]
        repositories = sorted(["f00-repo-0000000000", wanted["metadata"]["name"]])
        assert sorted(found) == [
            "f00: its Deployment is not the one its spec wants",
            "f00: no Service",
            f"f00: repository ConfigMaps {repositories}, wanted {wanted['metadata']['name']}",
        ], found
    finally:
        operator.start()
    seconds = converge(api_client, namespace, "the repairs")
    say(f"the check found 3 drifts; the operator repaired them in {seconds:.1f} s")
