"""One replica across pods: the LeaderWorkerSet, its leader's launch, its workers' sshd, the Service, the
policy and the autoscaler, as `mmctl render` and the operator build them; the leader's script run by bash."""

from __future__ import annotations

import base64
import dataclasses
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import groups, serving
from mmd_operator.desired.decision import desired_state, manifests
from mmd_operator.facts import (
    ClaimFacts,
    DeploymentFacts,
    Meta,
    Missing,
    MissingReference,
    Observed,
    OwnerRef,
    PodFacts,
    PodPhase,
)
from mmd_operator.judgement import judge
from mmd_operator.judgement.groups import group_states
from mmd_operator.judgement.placement import ObstacleKind, build_demand, match, obstacle, serving_demand
from mmd_operator.judgement.rollout import IN_PLACE_BECAUSE
from mmd_operator.kube import object_facts, ssh_keys
from mmd_operator.kube.nodes import nodes_of
from mmd_operator.kube.observe import unshared_claims
from mmd_operator.plan.launch import NO_ENDPOINTS, Segment
from mmd_operator.plan.resource_plan import plan_resource
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.plan.trtllm_serve import TrtllmServePlan
from mmd_operator.status import report
from mmd_operator.status.assessment import assess
from mmd_operator.vocabulary import kinds, labels, names
from mmd_operator.vocabulary.ownership import ObjectKey
from mmd_testbed.localcluster.objects import NodePool, gpu_node
from tests.support.builds import summary
from tests.support.examples import EXAMPLES_DIR, plan_any_example

CONFIG = OperatorConfig()


def _objects(name: str) -> dict[str, dict[str, Any]]:
    resource, plan = plan_any_example(name)
    return {m["kind"]: m for m in manifests(resource, plan, config=CONFIG)}


def _document(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / f"{name}.yaml").read_text())
    return document


def _leader_and_worker(lws: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    group = lws["spec"]["leaderWorkerTemplate"]
    return group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]


def test_tensor_parallelism_16_is_one_group_of_two_pods_whose_leader_runs_every_rank() -> None:
    resource, plan = plan_any_example("llava-tp16-two-nodes")
    assert isinstance(plan, TritonPlan)
    objects = {m["kind"]: m for m in manifests(resource, plan, config=CONFIG)}
    assert "Deployment" not in objects
    lws = objects["LeaderWorkerSet"]
    spec = lws["spec"]
    assert spec["replicas"] == 1 and spec["startupPolicy"] == "LeaderCreated"
    assert spec["networkConfig"] == {"subdomainPolicy": "Shared"}
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxSurge": 1, "maxUnavailable": 0}
    group = spec["leaderWorkerTemplate"]
    assert group["size"] == 2 and group["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = _leader_and_worker(lws)
    server, sshd = leader["containers"][0], worker["containers"][0]
    assert (
        server["resources"]["limits"]["nvidia.com/gpu"]
        == "8"
        == sshd["resources"]["limits"]["nvidia.com/gpu"]
    )
    # The leader: bash waits for the worker, then the 16 ranks, rank 0 alone with endpoints.
    assert server["command"][:2] == ["/bin/bash", "-c"]
    script = server["command"][2]
    segments = plan.launch.group_segments
    assert len(segments) == 16 and all(segment.count == 1 for segment in segments)
    assert not set(NO_ENDPOINTS) & set(segments[0].argv)
    assert all(segment.argv[-3:] == NO_ENDPOINTS for segment in segments[1:])
    assert script.count("/opt/tritonserver/bin/tritonserver ") == 16 and "hosts=localhost:8" in script
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(server)
    assert {p["name"] for p in server["ports"]} == {"http", "grpc", "metrics"}
    env = {e["name"]: e["value"] for e in server["env"]}
    assert env["OMPI_MCA_plm_rsh_agent"] == env["PRTE_MCA_plm_ssh_agent"] == "ssh -F /run/mmd-ssh/config"
    # A worker's host that falls silent ends the world within seconds, in ssh and in Open MPI's daemons.
    assert "ServerAliveInterval 5\n  ServerAliveCountMax 3" in script
    assert env["OMPI_MCA_oob_tcp_keepalive_time"] == env["PRTE_MCA_oob_tcp_keepalive_time"] == "5"
    assert env["OMPI_MCA_oob_tcp_keepalive_probes"] == "3"
    # The worker: sshd on the fixed port, ready when it answers, no HTTP probes.
    assert "exec /usr/sbin/sshd -D -E /run/mmd-ssh/sshd.log -f /run/mmd-ssh/sshd_config" in sshd["command"][2]
    assert sshd["ports"] == [{"name": "ssh", "containerPort": groups.SSH_PORT, "protocol": "TCP"}]
    assert sshd["readinessProbe"]["tcpSocket"] == {"port": "ssh"}
    assert not {"startupProbe", "livenessProbe", "lifecycle"} & set(sshd)
    # Both read the same repository and engines, and the group's SSH Secret, never a key itself.
    for pod in (leader, worker):
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["ssh-keys"]["secret"]["secretName"] == "llava-tp16-ssh"
        assert {"model-repository", "engine-cache", "repository-config", "shm"} <= set(volumes)
        assert pod["initContainers"][0]["name"] == "model-repository"
    assert "PRIVATE KEY" not in str(objects)
    # Requests go to leaders only.
    assert objects["Service"]["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_trtllm_serve_runs_every_rank_under_the_llm_api_launcher_with_its_pipeline() -> None:
    resource, plan = plan_any_example("qwen2_5_vl-72b-two-nodes")
    assert isinstance(plan, TrtllmServePlan)
    argv = plan.argv(plan.artifact_location)
    assert argv[argv.index("--tp_size") + 1] == "8" and argv[argv.index("--pp_size") + 1] == "2"
    assert plan.group_segments(None) == (Segment(16, ("trtllm-llmapi-launch", *plan.argv(None))),)
    objects = {m["kind"]: m for m in manifests(resource, plan, config=CONFIG)}
    leader, _ = _leader_and_worker(objects["LeaderWorkerSet"])
    script = leader["containers"][0]["command"][2]
    assert "-n 16 trtllm-llmapi-launch trtllm-serve " in script
    # The ranks get the server's environment, which ssh does not carry.
    assert "-x HF_HUB_OFFLINE" in script and "-x PATH -x LD_LIBRARY_PATH" in script
    # Its default policy lets the group's pods reach each other, on every port, and nothing else new.
    policy = objects["NetworkPolicy"]["spec"]
    group = {"podSelector": {"matchLabels": labels.serving_selector("qwen2-5-vl-72b")}}
    assert policy["policyTypes"] == ["Egress"] and policy["egress"][-1] == {"to": [group]}


def test_one_pod_per_replica_stays_a_deployment_with_its_service_on_every_pod() -> None:
    objects = _objects("llava-tp2-fp8")
    assert "LeaderWorkerSet" not in objects and "Deployment" in objects
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in objects["Service"]["spec"]["selector"]


def test_a_policy_the_spec_asks_for_admits_the_groups_pods_both_ways() -> None:
    document = _document("llava-tp16-two-nodes")
    document["spec"]["serving"]["networkPolicy"] = {}
    resource, plan = plan_resource(document)
    policy = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "NetworkPolicy")
    selector = {"podSelector": {"matchLabels": policy["spec"]["podSelector"]["matchLabels"]}}
    assert {"from": [selector]} in policy["spec"]["ingress"] and {"to": [selector]} in policy["spec"][
        "egress"
    ]


def test_the_autoscaler_scales_groups() -> None:
    document = _document("llava-tp16-two-nodes")
    document["spec"]["serving"]["autoscaling"] = {
        "maxReplicas": 3,
        "metric": {"name": "QueueTimePerRequest", "target": 500},
    }
    resource, plan = plan_resource(document)
    hpa = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    lws = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "LeaderWorkerSet")
    assert "replicas" not in lws["spec"]


def test_placement_counts_groups_of_pods() -> None:
    document = _document("llava-tp16-two-nodes")
    document["spec"]["serving"]["replicas"] = 2
    resource, _ = plan_resource(document)
    demand = serving_demand(resource.spec)
    assert demand.arithmetic() == (
        "spec.serving.replicas 2 x 2 pods x spec.serving.gpusPerPod 8 = 32 nvidia.com/gpu"
    )
    assert build_demand(resource.spec).arithmetic() == (
        "spec.serving.gpusPerPod 8 = 8 nvidia.com/gpu for one build pod"
    )
    nodes = nodes_of([gpu_node(f"gpu-{i}", NodePool(count=3, gpus_per_node=8)) for i in range(3)])
    pod = object_facts.pod_placement({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]})
    found = obstacle(match(pod, nodes), demand)
    assert found is not None and found.kind is ObstacleKind.TOO_FEW
    assert "room for 3 pods of 8 GPUs, 1 of the 2 replicas of 2 pods" in found.what


def _script_in(tmp_path: Path, script: str) -> str:
    """`script` with its SSH directories moved under `tmp_path`, and the Secret's files there."""
    secret, run = tmp_path / "secret", tmp_path / "run"
    secret.mkdir()
    run.mkdir()
    for key in names.SSH_SECRET_FILES:
        (secret / key).write_text("not a key\n")
    return script.replace(groups.SSH_SECRET_MOUNT, str(secret)).replace(groups.SSH_RUN, str(run))


def _bash(script: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_leader_names_the_worker_it_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups, "GROUP_START_SECONDS", 2)
    script = groups.leader_script([Segment(2, ("echo", "rank"))], gpus_per_pod=1, rank_env=())
    done = _bash(
        _script_in(tmp_path, script),
        {"LWS_LEADER_ADDRESS": "lws-0.lws.nowhere.invalid", "LWS_GROUP_SIZE": "2"},
    )
    assert done.returncode == 1
    assert (
        "mmd: worker lws-0-1.lws.nowhere.invalid of this group did not resolve within 2 s: its pod is not "
        "running, or DNS has no record of it yet"
    ) in done.stderr


def test_a_group_of_one_runs_mpirun_on_the_leader_alone(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / "mpirun").chmod(0o755)
    segments = [Segment(1, ("server", "--flag=a b")), Segment(1, ("server", "--rank=1"))]
    script = groups.leader_script(segments, gpus_per_pod=4, rank_env=("HOME",))
    done = _bash(
        _script_in(tmp_path, script),
        {"LWS_LEADER_ADDRESS": "x-0.x.ns", "LWS_GROUP_SIZE": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    said, *args = done.stdout.splitlines()
    assert said == "mmd: starting the world on localhost:4"
    assert args[:8] == ["--host", "localhost:4", "--map-by", "slot", "--bind-to", "none", "-x", "PATH"]
    assert args[args.index("HOME") - 1] == "-x"
    assert args[-9:] == ["-n", "1", "server", "--flag=a b", ":", "-n", "1", "server", "--rank=1"]
    assert (tmp_path / "run" / "id_ed25519").stat().st_mode & 0o777 == 0o600


# -- the operator's decision and status for a replica across pods --------------------------------------

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
OWNER = OwnerRef(name="llava-tp16", uid="uid-1")
# The LeaderWorkerSet of llava-tp16, one group, its rollout over.
SETTLED_GROUP_SET = DeploymentFacts(
    meta=Meta(name="llava-tp16-group", owners=(OWNER,)),
    kind="LeaderWorkerSet",
    group_size=2,
    replicas=1,
    status_replicas=1,
    updated_replicas=1,
    ready_replicas=1,
    available_replicas=1,
)


def _resource_in_namespace(name: str) -> tuple[MultimodalDeployment, Any]:
    resource, plan = plan_any_example(name)
    metadata = {**resource.metadata, "namespace": "ml", "uid": "uid-1", "generation": 1}
    return resource.model_copy(update={"metadata": metadata}), plan


def _ready_world(plan: Any, **more: Any) -> Observed:
    claim = ClaimFacts(meta=Meta(name=CONFIG.engine_cache_claim), phase="Bound", managed=True)
    return Observed(now=NOW, claim=claim, artifact=summary(plan.cache_key), **more)


def test_the_group_gets_its_ssh_secret_made_by_the_writer_and_a_deployment_left_from_before_goes() -> None:
    resource, plan = _resource_in_namespace("llava-tp16-two-nodes")
    old = DeploymentFacts(meta=Meta(name="llava-tp16", owners=(OWNER,)), kind="Deployment")
    observed = _ready_world(plan, retired_workload=old)
    decision = desired_state(
        resource, plan, observed, judge(plan, observed, None, 1, resource.spec), config=CONFIG
    )
    assert decision.manifest("LeaderWorkerSet") is not None
    (secret,) = decision.generated_secrets
    assert secret["metadata"]["name"] == "llava-tp16-ssh" and "data" not in secret
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert ObjectKey.of(kinds.DEPLOYMENT, "llava-tp16") in decision.delete


def test_without_the_leaderworkerset_api_nothing_is_created_and_the_status_says_what_to_install() -> None:
    resource, plan = _resource_in_namespace("llava-tp16-two-nodes")
    missing = MissingReference(
        Missing.WORKLOAD_API, "spec.serving.gpusPerPod", "the cluster does not serve it", "install it"
    )
    observed = _ready_world(plan, missing=(missing,))
    judged = judge(plan, observed, None, 1, resource.spec)
    decision = desired_state(resource, plan, observed, judged, config=CONFIG)
    assert judged.blocked and not judged.artifact.ready
    assert decision.apply == () and decision.generated_secrets == ()
    findings = assess(resource, plan, observed, judged, decision.rendered, claim=CONFIG.engine_cache_claim)
    ready = next(c for c in report(findings, previous=None, now=NOW).status.conditions if c.type == "Ready")
    assert ready.reason == "LeaderWorkerSetNotInstalled" and "install it" in ready.message


def _member(
    group: int,
    worker: int,
    *,
    ready: bool = True,
    revision: str = "aaaa",
    meta_deleting: bool = False,
    **more: Any,
) -> PodFacts:
    labels_of = {
        labels.GROUP_INDEX: str(group),
        labels.WORKER_INDEX: str(worker),
        labels.GROUP_REVISION: revision,
    }
    name = f"llava-tp16-{group}" + (f"-{worker}" if worker else "")
    return PodFacts(
        meta=Meta(name=name, labels=tuple(labels_of.items()), deleting=meta_deleting),
        phase=PodPhase.RUNNING,
        ready=ready,
        **more,
    )


def test_each_group_says_its_pods_ready_and_the_ranks_it_lacks() -> None:
    pods = [
        _member(0, 0),
        _member(0, 1),
        _member(1, 0, ready=False),
        _member(1, 1, ready=False, node="gpu-node-3", node_lost=True),
    ]
    whole, lacking, empty = group_states(pods, size=2, gpus_per_pod=8, wanted=3)
    assert whole.whole and whole.missing == ()
    assert lacking.ready == 0 and lacking.missing == (
        "leader (ranks 0-7): pod llava-tp16-1 is starting",
        "worker 1 (ranks 8-15): pod llava-tp16-1-1 is on node gpu-node-3, which stopped reporting",
    )
    assert empty.describe() == (
        "group 2: 0 of 2 pods ready; leader (ranks 0-7): no pod yet; worker 1 (ranks 8-15): no pod yet"
    )
    recreated = [
        _member(0, 0, ready=False, meta_deleting=True),
        _member(0, 1, node="gpu-node-3", node_lost=True, meta_deleting=True),
    ]
    (stopping,) = group_states(recreated, size=2, gpus_per_pod=8, wanted=1)
    assert stopping.missing == (
        "leader (ranks 0-7): pod llava-tp16-0 is stopping: the group is recreated whole",
        "worker 1 (ranks 8-15): pod llava-tp16-0-1 is on node gpu-node-3, which stopped reporting; it goes "
        "once the node returns or is deleted",
    )


def test_a_group_that_served_and_lost_a_worker_is_an_event() -> None:
    resource, plan = _resource_in_namespace("llava-tp16-two-nodes")
    lws = SETTLED_GROUP_SET

    def status_of(pods: list[PodFacts], previous: Any = None) -> Any:
        observed = _ready_world(plan, deployment=lws, serving_pods=tuple(pods))
        judged = judge(plan, observed, previous, 1, resource.spec)
        decision = desired_state(resource, plan, observed, judged, config=CONFIG)
        findings = assess(
            resource, plan, observed, judged, decision.rendered, claim=CONFIG.engine_cache_claim
        )
        return report(findings, previous=previous, now=NOW)

    serving = status_of([_member(0, 0), _member(0, 1)]).status
    assert serving.pods_per_replica == 2
    assert [(g.index, g.ready_pods, g.pods, g.message) for g in serving.groups or []] == [(0, 2, 2, None)]
    lost = status_of([_member(0, 0), _member(0, 1, ready=False, crash_loop="Error: exit 1")], serving)
    assert lost.status.phase == "Degraded" and lost.status.ready_replicas == 0
    assert lost.status.groups is not None and lost.status.groups[0].restarting
    available = next(c for c in lost.status.conditions if c.type == "Available")
    assert available.reason == "GroupRestarting" and available.message.startswith(
        "recreating 1 group whole after losing a pod: group 0: 1 of 2 pods ready"
    )
    # While the group comes back, it stays Degraded, and says so once; whole again, it is Ready.
    recreated = [_member(0, 0, ready=False), _member(0, 1, ready=False)]
    coming = status_of(recreated, lost.status)
    assert coming.status.phase == "Degraded" and not [
        e for e in coming.events if e.reason == "GroupRestarting"
    ]
    whole = status_of([_member(0, 0), _member(0, 1)], coming.status).status
    assert whole.phase != "Degraded" and whole.groups is not None and whole.groups[0].restarting is None
    (event,) = [e for e in lost.events if e.reason == "GroupRestarting"]
    assert event.message == (
        "group 0 lost 1 of its 2 pods and is recreated whole: worker 1 (ranks 8-15): pod llava-tp16-0-1 "
        "keeps failing: Error: exit 1"
    )


def test_the_keys_are_openssh_keys_whose_public_halves_match(tmp_path: Path) -> None:
    data = {name: base64.b64decode(value) for name, value in ssh_keys.secret_data("llava").items()}
    assert set(data) == set(names.SSH_SECRET_FILES)
    for private, public in (
        (names.SSH_CLIENT_KEY, names.SSH_AUTHORIZED_KEYS),
        (names.SSH_HOST_KEY, names.SSH_KNOWN_HOSTS),
    ):
        key = tmp_path / private
        key.write_bytes(data[private])
        key.chmod(0o600)
        derived = subprocess.run(
            ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True
        )
        assert derived.stdout.split()[:2] == data[public].decode().removeprefix("* ").split()[:2]
    assert data[names.SSH_KNOWN_HOSTS].startswith(b"* ssh-ed25519 ")
    # A new resource gets new keys.
    assert (
        ssh_keys.secret_data("llava")[names.SSH_CLIENT_KEY]
        != base64.b64encode(data[names.SSH_CLIENT_KEY]).decode()
    )


def test_a_canary_of_a_group_is_one_group_tracked_as_the_canary() -> None:
    lws = _objects("llava-tp16-two-nodes")["LeaderWorkerSet"]
    canary = serving.canary_deployment(lws)
    assert canary["kind"] == "LeaderWorkerSet" and canary["metadata"]["name"] == "llava-tp16-canary"
    assert canary["spec"]["replicas"] == 1
    group = canary["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert group[role]["metadata"]["labels"][labels.TRACK] == labels.CANARY
    assert group["size"] == lws["spec"]["leaderWorkerTemplate"]["size"]


def test_a_claim_a_group_cannot_share_is_refused_naming_it_and_the_operators_own_is_shared() -> None:
    resource, plan = _resource_in_namespace("llava-tp16-two-nodes")
    claim = ClaimFacts(meta=Meta(name="mine"), phase="Bound", access_modes=("ReadWriteOnce",))
    (said,) = unshared_claims(resource, {"spec.engineCache": claim, "spec.model.source.pvc.claimName": None})
    assert said.kind is Missing.SHARED_CLAIM and said.field == "spec.engineCache"
    assert said.message == (
        "PersistentVolumeClaim mine is ReadWriteOnce, and every pod of a replica of 16 ranks (tensor 16) "
        "in 2 pods of 8 GPUs mounts it, each from its own node"
    )
    shared = ClaimFacts(meta=Meta(name="mine"), phase="Bound", access_modes=("ReadWriteMany",))
    assert unshared_claims(resource, {"spec.engineCache": shared}) == []
    # The claim the operator makes for a group is shared, whatever its default for one-pod replicas.
    document = _document("llava-tp16-two-nodes")
    del document["spec"]["engineCache"]
    resource, plan = plan_resource(document)
    rwo = OperatorConfig(engine_cache_access_mode="ReadWriteOnce")
    made = next(m for m in manifests(resource, plan, config=rwo) if m["kind"] == "PersistentVolumeClaim")
    assert made["spec"]["accessModes"] == ["ReadWriteMany"]


def test_a_group_rolling_in_place_gives_the_leaderworkerset_no_surge() -> None:
    lws = _objects("llava-tp16-two-nodes")["LeaderWorkerSet"]
    rolled = serving.rolling_in_place(lws, "no free GPU for the surge group")
    assert rolled["spec"]["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
    }
    assert "strategy" not in rolled["spec"]
    assert rolled["metadata"]["annotations"][IN_PLACE_BECAUSE] == "no free GPU for the surge group"


def test_a_group_revision_that_cannot_start_gets_the_last_ready_groups_templates_back() -> None:
    """The revision is the LeaderWorkerSet controller's label on every pod of a group; undone, the set gets
    the `leaderWorkerTemplate` its ControllerRevision of the stable revision holds."""
    resource, plan = _resource_in_namespace("llava-tp16-two-nodes")
    settled = SETTLED_GROUP_SET
    stable_pods = (_member(0, 0), _member(0, 1))
    observed = _ready_world(plan, deployment=settled, serving_pods=stable_pods)
    judged = judge(plan, observed, None, 1, resource.spec)
    decision = desired_state(resource, plan, observed, judged, config=CONFIG)
    findings = assess(resource, plan, observed, judged, decision.rendered, claim=CONFIG.engine_cache_claim)
    shown = report(findings, previous=None, now=NOW).status
    assert shown.stable_revision is not None and shown.stable_revision.pod_template_hash == "aaaa"

    # The surge group of the next revision: its leader's image cannot be pulled.
    pulling = "container server is waiting: ImagePullBackOff (Back-off pulling image)"
    surging = (
        _member(1, 0, ready=False, revision="bbbb", crash_loop=pulling),
        _member(1, 1, ready=False, revision="bbbb"),
    )
    rolling = dataclasses.replace(
        settled, generation=2, observed_generation=2, status_replicas=2, updated_replicas=0
    )
    # Still starting, it is a rollout, counted in groups.
    starting = (_member(1, 0, ready=False, revision="bbbb"), _member(1, 1, ready=False, revision="bbbb"))
    observed = _ready_world(plan, deployment=rolling, serving_pods=stable_pods + starting)
    judged = judge(plan, observed, shown, 2, resource.spec)
    decision = desired_state(resource, plan, observed, judged, config=CONFIG)
    findings = assess(resource, plan, observed, judged, decision.rendered, claim=CONFIG.engine_cache_claim)
    assert judged.undo is None and findings.serving.message.startswith(
        "rolling out: 0 of 1 groups updated, 1 of 1 groups of 2 pods ready"
    ), findings.serving.message
    observed = _ready_world(plan, deployment=rolling, serving_pods=stable_pods + surging)
    judged = judge(plan, observed, shown, 2, resource.spec)
    assert judged.undo is not None and judged.undo.write and judged.undo.failed == "bbbb"
    assert judged.undo.message.startswith(f"revision bbbb did not start: pod llava-tp16-1: {pulling}; ")
    assert "rolled back to revision aaaa" in judged.undo.message
    recorded = {
        "size": 2,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"spec": {"containers": [{"name": "server", "image": "serving:good"}]}},
        "workerTemplate": {"spec": {"containers": [{"name": "server", "image": "serving:good"}]}},
    }
    decision = desired_state(resource, plan, observed, judged, config=CONFIG, stable_template=recorded)
    lws = decision.manifest("LeaderWorkerSet")
    assert lws is not None and lws["spec"]["leaderWorkerTemplate"] == recorded
    assert "template" not in lws["spec"]
    assert lws["metadata"]["annotations"][serving.UNDONE_REVISION] == "bbbb"
