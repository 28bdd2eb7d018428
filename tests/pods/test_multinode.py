"""One replica across two pods on two real nodes: a LeaderWorkerSet group whose leader runs the world.

The real LeaderWorkerSet controller (built from its Go module, `cluster up --lws`) makes the group; the
operator makes the LeaderWorkerSet, its Service of leaders, its policy and the group's SSH keys. The leader
waits for its worker's name and sshd, then runs `mpirun` over SSH, as uid 1000 under Pod Security
`restricted`. The CPU stand-ins of every rank join one MPI communicator across the pods, and rank 0's
answer says how many ranks and hosts it reached: a world that did not form would fail the load.

- llava (Triton), tensor parallelism 2, one GPU per pod: Ready, answered through the Service with
  `world=2 ranks on 2 hosts`; a worker's processes killed: the group is recreated whole, Degraded then
  Ready (timed, with the GroupRestarting Event); a serving-only change rolls the group (a new world,
  formed under a NetworkPolicy that admits only a client pod, which is then enforced against a stranger);
  a revision whose group cannot pull its image is undone to the templates the LeaderWorkerSet recorded
  for the last Ready one, while the group that served goes on serving; with every free GPU held, the
  next change goes in place and says so first.
- llava, the worker's node lost: the world ends, the leader leaves the Service, the group names the
  silent node, and forms again once the node is back.
- qwen2_5_vl (trtllm-serve), the same world under `trtllm-llmapi-launch`, answered by `mmctl chat`.

The SSH keys are in no ConfigMap, status, Event, pod or LeaderWorkerSet, nor in the operator's log.
"""

from __future__ import annotations

import base64
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_operator.judgement.rollout import SURGE_UNSCHEDULABLE
from mmd_operator.vocabulary import labels, names
from mmd_testbed.localcluster import addons, leaderworkerset
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from tests.support.kube import Kube, Resources, Tools
from tests.support.pods import (
    client_pod,
    container_processes,
    example,
    http_get,
    mmctl_chat,
    mmctl_infer,
    service_ip,
    serving_pods,
    signal_processes,
    wait_until,
)

from .conftest import OPERATOR_NAMESPACE
from .test_rollouts import (
    free_gpus,
    gpu_filler,
    no_pod_stopping,
    pod_ready,
    ready_endpoints,
    rollout_reason,
)

pytestmark = pytest.mark.pods
BAD_IMAGE = "registry.invalid/mmd/no-such-server:0"


def _group_spec(instance: str) -> dict[str, Any]:
    """One GPU per pod, each pod of a group on a node of its own: a world across nodes.

    Apart within a group only (`matchLabelKeys` adds the pod's own group key to the selector): a surge
    group may share the nodes with the group it replaces.
    """
    apart = {
        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": instance}},
        "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
        "topologyKey": "kubernetes.io/hostname",
    }
    return {
        "gpusPerPod": 1,
        "pod": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}},
    }


def _group_document(example_name: str, instance: str) -> dict[str, Any]:
    """`examples/<example_name>.yaml` at tensor parallelism 2 in two pods of one GPU (`_group_spec`)."""
    document = example(example_name, engine={"tensorParallelSize": 2}, serving=_group_spec(instance))
    document["spec"]["engineCache"] = {"accessMode": "ReadWriteMany"}
    return document


def _group_set(kube: Kube, namespace: str, name: str) -> Any:
    """The resource `name`'s LeaderWorkerSet, as the API server has it."""
    return k8s.CustomObjectsApi(kube.core.api_client).get_namespaced_custom_object(
        leaderworkerset.GROUP, leaderworkerset.VERSION, namespace, leaderworkerset.PLURAL,
        names.group_set(name),
    )  # fmt: skip


@pytest.fixture(scope="module")
def busybox() -> str:
    return addons.image_names(ensure_node_binaries(Layout.discover(), say=print))["busybox"]


@pytest.fixture(scope="module")
def lws(real_cluster: LocalCluster) -> None:
    real_cluster.start_lws()


def _group(kube: Kube, namespace: str, name: str) -> tuple[Any, Any]:
    pods = serving_pods(kube, namespace, name)
    leaders = [p for p in pods if p.metadata.labels.get(labels.WORKER_INDEX) == "0"]
    workers = [p for p in pods if p.metadata.labels.get(labels.WORKER_INDEX) == "1"]
    assert len(leaders) == 1 and len(workers) == 1, [p.metadata.name for p in pods]
    return leaders[0], workers[0]


def _keys_leak(kube: Kube, tools: Tools, namespace: str, name: str) -> list[str]:
    """Where the group's private keys are besides their Secret (nowhere, when all is well)."""
    secret = kube.core.read_namespaced_secret(names.ssh_secret(name), namespace)
    values = [secret.data[key] for key in (names.SSH_CLIENT_KEY, names.SSH_HOST_KEY)]
    values += [base64.b64decode(value).decode().splitlines()[1] for value in values]
    plain = kube.core.api_client.sanitize_for_serialization
    custom = k8s.CustomObjectsApi(kube.core.api_client)
    objects = {
        "configmaps": plain(kube.core.list_namespaced_config_map(namespace).items),
        "events": plain(kube.core.list_namespaced_event(namespace).items),
        "pods": plain(kube.core.list_namespaced_pod(namespace).items),
        "resource": [custom.get_namespaced_custom_object(
            "serving.multimodal.dev", "v1alpha1", namespace, "multimodaldeployments", name
        )],
        "leaderworkersets": custom.list_namespaced_custom_object(
            leaderworkerset.GROUP, leaderworkerset.VERSION, namespace, leaderworkerset.PLURAL
        )["items"],
    }  # fmt: skip
    leaks = [
        f"{kind}/{item['metadata']['name']}"
        for kind, items in objects.items()
        for item in items
        if any(value in json.dumps(item) for value in values)
    ]
    (operator,) = kube.core.list_namespaced_pod(OPERATOR_NAMESPACE).items
    log = tools.run("kubectl", "logs", "-n", OPERATOR_NAMESPACE, operator.metadata.name).stdout
    return leaks + (["the operator's log"] if any(value in log for value in values) else [])


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("lws")
def test_a_tp2_llava_spans_two_pods_on_two_nodes_survives_a_worker_and_rolls_as_a_group(
    resources: Resources, kube: Kube, tools: Tools, namespace: str, busybox: str, picture: Path
) -> None:
    name = "llava"
    document = _group_document("llava", name)
    started = time.monotonic()
    resources.apply(document)
    body = resources.wait_phase(name, "Ready", timeout=300)
    to_ready = time.monotonic() - started
    assert body["status"]["podsPerReplica"] == 2
    assert body["status"]["groups"] == [{"index": 0, "pods": 2, "readyPods": 2}]

    leader, worker = _group(kube, namespace, name)
    assert leader.spec.node_name != worker.spec.node_name
    created = leader.metadata.creation_timestamp
    started_at = next(s.state.running.started_at for s in leader.status.container_statuses)
    log = tools.run("kubectl", "logs", "-n", namespace, leader.metadata.name, "-c", "tritonserver").stdout
    assert f"mmd: worker {worker.metadata.name}." in log and "answers on port 2222" in log, log[-2000:]
    assert "mmd: starting the world on localhost:1," in log, log[-2000:]

    # Through the Service (its leaders): rank 0 reached both ranks, on both hosts.
    address = service_ip(kube, namespace, name)
    answer = mmctl_infer(
        f"grpc://{address}:8001", "--model-type", "llava", "--image", str(picture), "--text", "What is this?"
    )
    assert answer.returncode == 0, answer.stderr
    assert "world=2 ranks on 2 hosts" in answer.stdout, answer.stdout
    assert _keys_leak(kube, tools, namespace, name) == []
    print(
        f"\nllava TP 2 across two pods: apply to Ready {to_ready:.1f} s (leader created {created:%H:%M:%S}, "
        f"server started {started_at:%H:%M:%S}); answer: {answer.stdout.strip()[-120:]}"
    )

    # A worker's processes killed: the group is recreated whole (its world cannot take a rank back).
    killed = time.monotonic()
    signal_processes(container_processes(worker.metadata.uid), signal.SIGKILL)
    degraded = resources.wait_phase(name, "Degraded", timeout=120)
    said = time.monotonic() - killed
    ready = resources.wait_phase(name, "Ready", timeout=300)
    back = time.monotonic() - killed
    new_leader, _ = _group(kube, namespace, name)
    assert new_leader.metadata.uid != leader.metadata.uid
    kube.events_about(
        namespace, name, "GroupRestarting", containing="group 0 lost 1 of its 2 pods and is recreated whole"
    )
    message = next(c["message"] for c in degraded["status"]["conditions"] if c["type"] == "Ready")
    print(f"worker killed: Degraded {said:.1f} s later ({message[:160]}), Ready again {back:.1f} s later")
    assert ready["status"]["groups"] == [{"index": 0, "pods": 2, "readyPods": 2}]

    # A serving-only change, with a policy that admits only the client: a new group forms under it.
    client_pod(kube, namespace, "client", busybox, labels={"role": "client"})
    client_pod(kube, namespace, "stranger", busybox)
    changed = dict(document)
    changed["spec"] = {
        **document["spec"],
        "serving": {
            **document["spec"]["serving"],
            "queue": {"maxQueueDelayMicroseconds": 100},
            "networkPolicy": {"clients": [{"podSelector": {"matchLabels": {"role": "client"}}}]},
        },
    }
    rolled = time.monotonic()
    resources.apply(changed)
    kube.wait_for(
        "the new group's leader",
        lambda: (
            {p.metadata.uid for p in serving_pods(kube, namespace, name)} & {new_leader.metadata.uid} == set()
        ),
        timeout=300,
    )
    resources.wait_phase(name, "Ready", timeout=300)
    print(f"serving-only change: the group rolled and is Ready {time.monotonic() - rolled:.1f} s later")
    leader, worker = _group(kube, namespace, name)
    service = f"{name}.{namespace}.svc.cluster.local"
    assert "200 OK" in http_get(tools, namespace, "client", service, 8000, "/v2/health/ready")
    assert http_get(tools, namespace, "stranger", service, 8000, "/v2/health/ready") == ""
    worker_ip = kube.core.read_namespaced_pod(worker.metadata.name, namespace).status.pod_ip
    ssh = tools.run(
        "kubectl", "exec", "-n", namespace, "stranger", "--", "sh", "-c",
        f"nc -w 3 {worker_ip} 2222 </dev/null | head -c 7", check=False, timeout=30,
    ).stdout  # fmt: skip
    assert not ssh.startswith("SSH-"), ssh
    assert _keys_leak(kube, tools, namespace, name) == []

    # A revision whose group cannot start (its image cannot be pulled): the set gets the last Ready
    # revision's templates back from its ControllerRevision; the group that served was never touched.
    stable = resources.get(name)["status"]["stableRevision"]["podTemplateHash"]
    bad = dict(changed)
    bad["spec"] = {**changed["spec"], "serving": {**changed["spec"]["serving"], "image": BAD_IMAGE}}
    broken = time.monotonic()
    resources.apply(bad)
    undone = resources.wait_phase(
        name, "Degraded", timeout=240, status_also=lambda s: bool((s.get("rollback") or {}).get("failed"))
    )
    said = time.monotonic() - broken
    rollback = undone["status"]["rollback"]
    assert rollback["message"].startswith(f"revision {rollback['failed']} did not start: pod "), rollback
    assert f"rolled back to revision {stable}" in rollback["message"], rollback
    group = _group_set(kube, namespace, name)["spec"]["leaderWorkerTemplate"]
    images = [
        c["image"] for t in ("leaderTemplate", "workerTemplate") for c in group[t]["spec"]["containers"]
    ]
    assert BAD_IMAGE not in images, images

    def only_the_stable_group() -> bool:
        pods = serving_pods(kube, namespace, name)
        return len(pods) == 2 and all(
            p.metadata.labels.get(labels.GROUP_REVISION) == stable and pod_ready(p) for p in pods
        )

    kube.wait_for("the stable group alone", only_the_stable_group, timeout=240)
    assert _group(kube, namespace, name)[0].metadata.uid == leader.metadata.uid
    assert "200 OK" in http_get(tools, namespace, "client", service, 8000, "/v2/health/ready")
    print(
        f"a group that cannot pull its image: undone {said:.1f} s after the change, the stable group alone "
        f"{time.monotonic() - broken:.1f} s after it, and answering"
    )

    # The next change finds no GPU for a surge group: it rolls in place, and says so first.
    _rolls_in_place_without_a_spare_gpu(resources, kube, namespace, changed)


def _rolls_in_place_without_a_spare_gpu(
    resources: Resources, kube: Kube, namespace: str, document: dict[str, Any]
) -> None:
    """Every free GPU of both nodes held by another pod, `document` changed: the new revision's surge
    group cannot be placed. After `surgeWaitSeconds` the status and an Event say the rollout goes on in
    place, then the LeaderWorkerSet rolls with no surge (the group stops, then its replacement forms);
    the next change surges again."""
    name = document["metadata"]["name"]
    old_leader, _ = _group(kube, namespace, name)
    nodes = sorted(n.metadata.name for n in kube.core.list_node().items)
    for index, node in enumerate(nodes):
        wait_until(f"no pod terminating on {node}", lambda node=node: no_pod_stopping(kube, node), 120)
        gpu_filler(kube, namespace, node, free_gpus(kube, node), name=f"gpu-filler-{index}")
    wait_until(
        "the GPU fillers to run",
        lambda: all(
            kube.core.read_namespaced_pod(f"gpu-filler-{i}", namespace).status.phase == "Running"
            for i in range(len(nodes))
        ),
        timeout=60,
    )
    serving = {
        **document["spec"]["serving"],
        "rollout": {"surgeWaitSeconds": 5},
        "queue": {"maxQueueDelayMicroseconds": 200},
    }
    changed = time.monotonic()
    resources.apply({**document, "spec": {**document["spec"], "serving": serving}})
    marks: dict[str, float] = {}

    kube.wait_for(
        "the status to say in place",
        lambda: rollout_reason(resources, name) == SURGE_UNSCHEDULABLE,
        timeout=120,
    )
    marks["said in place"] = time.monotonic() - changed
    kube.wait_for(
        "the old group to stop",
        lambda: old_leader.metadata.uid not in {p.metadata.uid for p in serving_pods(kube, namespace, name)},
        timeout=120,
    )
    marks["old group stopped"] = time.monotonic() - changed
    ready = resources.wait_phase(
        name, "Ready", timeout=300, status_also=lambda s: s.get("readyReplicas") == 1
    )
    marks["Ready"] = time.monotonic() - changed
    rolling = [event.message for event in kube.events_about(namespace, name, "RollingInPlace")]
    assert len(rolling) == 1 and "Insufficient nvidia.com/gpu" in rolling[0], rolling
    assert (
        "1 replica + 1 surge group: 2 x 2 pods x spec.serving.gpusPerPod 1 = 4 nvidia.com/gpu" in rolling[0]
    )
    assert ready["status"]["groups"] == [{"index": 0, "pods": 2, "readyPods": 2}]

    def surges_again() -> bool:
        strategy = _group_set(kube, namespace, name)["spec"]["rolloutStrategy"]
        configuration = strategy["rollingUpdateConfiguration"]
        return (configuration["maxSurge"], configuration["maxUnavailable"]) == (1, 0)

    kube.wait_for("the next change to surge again", surges_again, timeout=60)
    print(
        "no GPU for a surge group: "
        + ", ".join(f"{what} after {at:.1f} s" for what, at in marks.items())
        + f"; the Event: {rolling[0][:220]}"
    )


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("lws")
def test_a_lost_worker_node_takes_its_group_out_of_the_service_until_the_node_returns(
    resources: Resources, kube: Kube, tools: Tools, namespace: str, picture: Path, real_cluster: LocalCluster
) -> None:
    """The node of a group's worker loses power. Its world cannot answer without that rank: the leader's
    mpirun hears no more from the worker's host (ssh's and its daemons' keepalives) and ends, so the leader,
    on a node still alive, leaves the Service and restarts. The operator marks the worker on the silent node
    (it is in no Service) and the group says where its rank went. With two nodes and a group's pods kept
    apart, the group forms again once the node is back. The leader is placed on the operator's node (the
    other one is cordoned while the leader is made), so that the lost node holds the worker and no part of
    the operator."""
    name = "llava"
    operator_nodes = {p.spec.node_name for p in kube.core.list_namespaced_pod(OPERATOR_NAMESPACE).items}
    nodes = [n.metadata.name for n in kube.core.list_node().items]
    (kept,) = operator_nodes
    (lost,) = [n for n in nodes if n != kept]
    document = _group_document("llava", name)
    tools.run("kubectl", "cordon", lost)
    try:
        resources.apply(document)
        kube.wait_for(
            "the leader on the operator's node",
            lambda: any(
                p.spec.node_name == kept and p.metadata.labels.get(labels.WORKER_INDEX) == "0"
                for p in serving_pods(kube, namespace, name)
            ),
            timeout=240,
        )
    finally:
        tools.run("kubectl", "uncordon", lost)
    resources.wait_phase(name, "Ready", timeout=300)
    leader, worker = _group(kube, namespace, name)
    assert (leader.spec.node_name, worker.spec.node_name) == (kept, lost)

    revived = False
    started = time.monotonic()
    real_cluster.lose_node(lost)
    marks: dict[str, float] = {}
    try:
        # ssh's keepalive gives up on the worker's host after 15 s, Open MPI's daemons' after 20 s.
        kube.wait_for(
            "the leader out of the Service", lambda: ready_endpoints(kube, namespace, name) == 0, timeout=60
        )
        marks["out of the Service"] = time.monotonic() - started
        degraded = resources.wait_phase(
            name,
            "Degraded",
            timeout=60,
            status_also=lambda s: "stopped reporting" in json.dumps(s.get("groups") or []),
        )
        marks["Degraded"] = time.monotonic() - started
        real_cluster.revive_node(lost)
        revived = True
        marks["node back"] = time.monotonic() - started
        resources.wait_phase(name, "Ready", timeout=420)
        marks["Ready"] = time.monotonic() - started
    finally:
        if not revived:
            real_cluster.revive_node(lost)
    (group,) = degraded["status"]["groups"]
    assert f"on node {lost}, which stopped reporting" in group["message"], group
    assert group["readyPods"] < 2, group
    recreated = [
        e.message for e in kube.events_about(namespace, name, "GroupRestarting", containing="group 0 lost ")
    ]
    assert any(m.startswith("group 0 lost ") for m in recreated), recreated
    new_leader, _ = _group(kube, namespace, name)
    assert new_leader.metadata.uid != leader.metadata.uid or any(
        s.restart_count for s in new_leader.status.container_statuses or []
    ), "the leader of the broken world was neither restarted nor recreated"
    address = service_ip(kube, namespace, name)
    answer = mmctl_infer(
        f"grpc://{address}:8001", "--model-type", "llava", "--image", str(picture), "--text", "What is this?"
    )
    assert answer.returncode == 0 and "world=2 ranks on 2 hosts" in answer.stdout, answer.stderr
    print(
        f"\nllava TP 2, the worker's node {lost} lost: "
        + ", ".join(f"{what} after {at:.1f} s" for what, at in marks.items())
        + f"; the group said: {group['message'][:200]}; the Event: {recreated[0][:200]}"
    )


@pytest.mark.timeout(600)
@pytest.mark.usefixtures("lws")
def test_trtllm_serve_spans_two_pods_under_the_llm_api_launcher(
    resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    name = "qwen2-5-vl"
    document = _group_document("qwen2_5_vl", name)
    started = time.monotonic()
    resources.apply(document)
    resources.wait_phase(name, "Ready", timeout=300)
    to_ready = time.monotonic() - started
    leader, worker = _group(kube, namespace, name)
    assert leader.spec.node_name != worker.spec.node_name
    address = service_ip(kube, namespace, name)
    answer = mmctl_chat(f"http://{address}:8000", "--image", str(picture), "--text", "What is this?")
    assert answer.returncode == 0, answer.stderr
    assert "2 ranks on 2 hosts" in answer.stdout, answer.stdout
    print(
        f"\nqwen2_5_vl TP 2 across two pods: apply to Ready {to_ready:.1f} s; answer: {answer.stdout[:160]}"
    )
