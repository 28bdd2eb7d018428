"""The whole path on real pods: the operator's pod from the chart, a build pod writing a real volume, a
serving pod assembling its repository and loading it into a real tritonserver behind its probes, the
Service, DNS.

Only the GPU parts are doubles (the build tools in the CPU builder image, the TensorRT-LLM and vision
engines in the CPU serving image); every process, mount, probe, address and rule is real.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from engine_builder.result_format import BuildSucceeded, parse_termination_message
from mmd_testbed.localcluster import addons
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from tests.support.kube import Kube, Resources, Tools
from tests.support.pods import (
    client_pod,
    container_processes,
    example,
    http_get,
    manifest,
    mmctl_infer,
    service_ip,
    serving_pods,
    volume_directory,
)

pytestmark = pytest.mark.pods


@pytest.fixture(scope="module")
def busybox() -> str:
    return addons.image_names(ensure_node_binaries(Layout.discover(), say=print))["busybox"]


def test_the_operator_runs_as_a_real_pod_from_the_chart_on_its_token_alone(
    kube: Kube, tools: Tools, operator_release: dict[str, Any]
) -> None:
    namespace = operator_release["namespace"]
    labels = kube.core.read_namespace(namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    (pod,) = kube.core.list_namespaced_pod(namespace).items
    assert pod.spec.containers[0].image == operator_release["images"]["operator"]
    status = pod.status.container_statuses[0]
    # One restart is the canary test's own SIGKILL (test_canary.py kills the operator mid-analysis),
    # never an OOM kill or a crash.
    killed = status.last_state.terminated
    assert status.ready and (
        status.restart_count == 0
        or (status.restart_count == 1 and killed.exit_code == 137 and killed.reason != "OOMKilled")
    ), status
    # In-cluster configuration from the projected ServiceAccount token: no kubeconfig anywhere.
    env = {variable.name for variable in pod.spec.containers[0].env or []}
    assert "KUBECONFIG" not in env
    identity = tools.run("kubectl", "exec", "-n", namespace, pod.metadata.name, "--", "id").stdout
    assert re.match(r"uid=65532\b", identity), identity
    mounted = tools.run(
        "kubectl",
        "exec",
        "-n",
        namespace,
        pod.metadata.name,
        "--",
        "ls",
        "/var/run/secrets/kubernetes.io/serviceaccount",
    ).stdout.split()
    assert {"ca.crt", "namespace", "token"} <= set(mounted)
    log = tools.run("kubectl", "logs", "-n", namespace, pod.metadata.name).stdout
    # RBAC never refused it anything (an Event refused by a namespace being deleted is not RBAC's doing).
    assert not re.search(r'forbidden: User "[^"]+" cannot', log) and "Traceback" not in log, log[-3000:]
    # The kubelet's probes of /healthz (every 10 s) leave no line: an admin tailing the log sees failures.
    assert "aiohttp.access" not in log and "GET /healthz" not in log, log[-3000:]


def test_llava_builds_on_a_real_volume_and_answers_through_its_service(
    resources: Resources, kube: Kube, tools: Tools, namespace: str, busybox: str, picture: Path
) -> None:
    started = time.monotonic()
    resources.apply(example("llava"))
    body = resources.wait_phase("llava", "Ready", timeout=240)
    apply_to_ready = time.monotonic() - started
    engine = body["status"]["engine"]
    key = engine["cacheKey"]

    # The build Job's pod ran the real engine builder, which reported its summary as the termination message.
    (build,) = kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={engine['job']}").items
    terminated = build.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0, terminated
    summary = parse_termination_message(terminated.message)
    assert isinstance(summary, BuildSucceeded) and summary.cache_key == key and not summary.cache_hit
    build_log = tools.run("kubectl", "logs", "-n", namespace, build.metadata.name).stdout
    assert f"engine_builder: {key} is ready" in build_log

    # ... onto a real volume of the dynamic provisioner: the entry is complete, nothing half-written is left.
    directory = volume_directory(kube, namespace, engine["claim"])
    entry = directory / key
    assert manifest(entry)["cache_key"] == key
    assert {"llm", "encoder", "tokenizer", "manifest.json"} <= {path.name for path in entry.iterdir()}
    assert not [path for path in directory.iterdir() if path.name.startswith(".work")]

    # The serving pod's init container assembled the repository; tritonserver loaded it as uid 1000.
    (pod,) = serving_pods(kube, namespace, "llava")
    init = pod.status.init_container_statuses[0]
    assert init.state.terminated.exit_code == 0
    assembly = tools.run(
        "kubectl", "logs", "-n", namespace, pod.metadata.name, "-c", "model-repository"
    ).stdout
    assert "assembled 6 models in /models" in assembly
    server = pod.status.container_statuses[0]
    assert server.ready and server.restart_count == 0
    server_log = tools.run("kubectl", "logs", "-n", namespace, pod.metadata.name, "-c", "tritonserver").stdout
    assert "successfully loaded 'ensemble'" in server_log
    identity = tools.run(
        "kubectl", "exec", "-n", namespace, pod.metadata.name, "-c", "tritonserver", "--", "id"
    )
    assert re.match(r"uid=1000\b.* gid=1000\b", identity.stdout), identity.stdout
    # Neither pod holds an API token, and both ran within the CPU and memory they asked for (a memory
    # limit is a real cgroup limit here: the stand-ins' figures, images.STAND_IN_RESOURCES).
    for made in (build, pod):
        assert made.spec.automount_service_account_token is False
        assert not [v for v in made.spec.volumes if v.name.startswith("kube-api-access")], made.spec.volumes
        (main,) = made.spec.containers
        assert {"cpu", "memory"} <= set(main.resources.requests) and "memory" in main.resources.limits
    token = tools.run(
        "kubectl", "exec", "-n", namespace, pod.metadata.name, "-c", "tritonserver", "--",
        "ls", "/var/run/secrets/kubernetes.io/serviceaccount", check=False,
    )  # fmt: skip
    assert token.returncode != 0, token.stdout
    processes = container_processes(pod.metadata.uid)
    assert any("/opt/pytriton/pytriton/tritonserver/bin/tritonserver" in p.argv[0] for p in processes)

    # The Service routes to it: from this host through the first node's kube-proxy, over gRPC and HTTP.
    address = service_ip(kube, namespace, "llava")
    for url in (f"grpc://{address}:8001", f"http://{address}:8000"):
        answer = mmctl_infer(url, "--model-type", "llava", "--image", str(picture), "--text", "What is this?")
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.startswith("llava|pre:text=What is this?"), answer.stdout

    # And by name from a pod: CoreDNS resolves the Service, kube-proxy forwards to the serving pod.
    client_pod(kube, namespace, "client", busybox)
    name = f"llava.{namespace}.svc.cluster.local"
    lookup = tools.run("kubectl", "exec", "-n", namespace, "client", "--", "nslookup", name).stdout
    assert address in lookup, lookup
    assert "200 OK" in http_get(tools, namespace, "client", name, 8000, "/v2/health/ready")
    print(f"\nllava on real pods: apply to Ready {apply_to_ready:.1f} s")


def test_tensor_parallel_two_runs_mpirun_with_two_ranks_in_one_pod(
    resources: Resources, kube: Kube, tools: Tools, namespace: str, picture: Path
) -> None:
    started = time.monotonic()
    # The nodes are A100s: the TP 2 example's FP8 KV cache needs 8.9, so this one keeps 16 bits.
    document = example("llava", engine={"tensorParallelSize": 2})
    document["metadata"]["name"] = "llava-tp2"
    resources.apply(document)
    resources.wait_phase("llava-tp2", "Ready", timeout=240)
    apply_to_ready = time.monotonic() - started
    (pod,) = serving_pods(kube, namespace, "llava-tp2")
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    processes = container_processes(pod.metadata.uid)
    launchers = [p for p in processes if p.argv and p.argv[0] == "mpirun"]
    ranks = [
        p
        for p in processes
        if p.argv and p.argv[0].endswith("/bin/tritonserver") and "--model-repository=/models" in p.argv
    ]
    assert len(launchers) == 1 and len(ranks) == 2, [p.argv[:2] for p in processes]
    prefixes = sorted(arg for p in ranks for arg in p.argv if "shm-region-prefix-name" in arg)
    assert prefixes == [
        "--backend-config=python,shm-region-prefix-name=prefix0_",
        "--backend-config=python,shm-region-prefix-name=prefix1_",
    ]
    follower = next(p for p in ranks if "--model-control-mode=explicit" in p.argv)
    assert "--load-model=tensorrt_llm" in follower.argv
    log = tools.run("kubectl", "logs", "-n", namespace, pod.metadata.name, "-c", "tritonserver").stdout
    assert "rank 1 waits for the leader" in log
    answer = mmctl_infer(
        f"grpc://{service_ip(kube, namespace, 'llava-tp2')}:8001", "--model-type", "llava",
        "--image", str(picture), "--text", "Two ranks?",
    )  # fmt: skip
    assert answer.returncode == 0 and answer.stdout.startswith("llava|"), answer.stderr
    print(f"\nllava-tp2 on real pods: apply to Ready {apply_to_ready:.1f} s")
