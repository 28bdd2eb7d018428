"""`make demo` on real nodes: the operator's main job with every pod a real container.

Starts (or reuses) the local cluster with two real nodes (kubelet, containerd, runc, CNI, kube-proxy,
kube-router, CoreDNS, local-path-provisioner), builds the project's images from its Dockerfile and loads
them into the nodes, starts the Hub double (the stand-in for huggingface.co), installs the operator with
its Helm chart (it runs as a pod under Pod Security `restricted`, on its ServiceAccount token), then
applies three examples whose build pods run the engine builder and whose serving pods run tritonserver,
and one of the trtllm-serve runtime whose download pod fetches the snapshot from the Hub double and whose
serving pod runs trtllm-serve. It shows a cache hit, a failed build with the builder's own error, a
serving-only change rolling real pods, one model across the two nodes (llava's two tensor-parallel ranks in
a LeaderWorkerSet group of two pods, the world run over SSH by its leader), and ends with an answer from
llava's serving pod and an OpenAI chat answer from qwen2-5-vl's, each through its Service.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from mmd_testbed.demo.common import (
    LLAVA_STREAM,
    NAMESPACE,
    ROOT,
    Demo,
    ask,
    example,
    leave_cluster,
    ready,
    say,
    step,
    tp2_on_a100s,
)
from mmd_testbed.localcluster import builds, hub
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.image_build import chart_values
from mmd_testbed.localcluster.layout import Layout, default_state_dir
from mmd_testbed.localcluster.objects import NodePool
from mmd_testbed.localcluster.state import REAL_NODE_PREFIX
from mmd_testbed.triton import media

OPERATOR_NAMESPACE = "mmd-system"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def helm_install(demo: Demo, helm: Path, references: dict[str, str]) -> None:
    """Install or upgrade the chart in mmd-system, pointed at the local images, and wait for the operator."""
    try:
        demo.core.create_namespace({"metadata": {"name": OPERATOR_NAMESPACE, "labels": RESTRICTED}})
    except ApiException as error:
        if error.status != 409:
            raise
    values = [argument for value in chart_values(references, hub.ENDPOINT) for argument in ("--set", value)]
    command = [
        str(helm), "upgrade", "--install", "mmd-operator", str(ROOT / "charts" / "mmd-operator"),
        "-n", OPERATOR_NAMESPACE, *values, "--set", "retrySeconds=3", "--wait", "--timeout", "180s",
    ]  # fmt: skip
    say("$ helm upgrade --install mmd-operator charts/mmd-operator -n mmd-system " + " ".join(values))
    env = {**os.environ, "KUBECONFIG": str(demo.cluster.kubeconfig)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"demo: helm failed:\n{result.stdout}{result.stderr}")
    say(result.stdout.strip().splitlines()[0] if result.stdout.strip() else "")


def restricted_namespace(demo: Demo) -> None:
    """The demo namespace, enforcing Pod Security `restricted` (every build and serving pod is judged)."""
    demo.fresh_namespace()
    demo.core.patch_namespace(NAMESPACE, {"metadata": {"labels": RESTRICTED}})


def operator_figures(demo: Demo) -> str:
    """Reconciles and API requests so far, from the operator pod's own /metrics (over the pod network)."""
    (pod,) = demo.core.list_namespaced_pod(
        OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=mmd-operator"
    ).items
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:8080/metrics", timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'^mmd_(reconciles|api_requests)_total\{(\w+)="(\w+)"\} (\S+)$', line)
        if match:
            values[f"{match[1]}:{match[3]}"] = float(match[4])
    reconciles = sum(v for k, v in values.items() if k.startswith("reconciles:"))
    requests = sum(v for k, v in values.items() if k.startswith("api_requests:"))
    per_reconcile = requests / max(reconciles, 1)
    return f"{reconciles:.0f} reconciles, {requests:.0f} API requests ({per_reconcile:.2f} per reconcile)"


def chat(demo: Demo) -> None:
    """One OpenAI chat request with an image to qwen2-5-vl's trtllm-serve pod, through its Service."""
    step("An OpenAI chat answer from qwen2-5-vl (trtllm-serve), through its Service")
    weights = demo.get("qwen2-5-vl")["status"]["weights"]
    say(
        f"  weights: {weights['repo']}@{weights['revision']} = commit {weights['commit']} "
        f"({weights['source']})"
    )
    address = demo.core.read_namespaced_service("qwen2-5-vl", NAMESPACE).spec.cluster_ip
    with tempfile.TemporaryDirectory(prefix="mmd-demo-") as work:
        ask("chat", f"http://{address}:8000", media.image(Path(work) / "cat.jpg"), "What is in this picture?")
    say("  (the answer is the trtllm-serve double's description of what it received, not a real caption)")


def across_nodes(demo: Demo) -> None:
    """One model across the two nodes: llava's two ranks in two pods, one LeaderWorkerSet group."""
    step(
        "One model across two nodes: llava-group, tensor parallelism 2 in pods of 1 GPU, one on each node "
        "(a LeaderWorkerSet group: the leader runs both ranks with mpirun over SSH and serves)"
    )
    document = example("llava", engine={"tensorParallelSize": 2}, engineCache={"accessMode": "ReadWriteMany"})
    document["metadata"]["name"] = "llava-group"
    apart = {"labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "llava-group"}},
             "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
             "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
    document["spec"]["serving"] = {
        "gpusPerPod": 1,
        "pod": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}},
    }
    demo.apply(document)
    times = demo.follow(["llava-group"], ready, timeout=300)
    say(f"  llava-group: apply to Ready in {times['llava-group']:.1f} s")
    demo.run_kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=llava-group", "-o",
        "custom-columns=POD:.metadata.name,WORKER:.metadata.labels.leaderworkerset\\.sigs\\.k8s\\.io/"
        "worker-index,NODE:.spec.nodeName,READY:.status.containerStatuses[0].ready",
    )  # fmt: skip
    address = demo.core.read_namespaced_service("llava-group", NAMESPACE).spec.cluster_ip
    with tempfile.TemporaryDirectory(prefix="mmd-demo-") as work:
        picture = media.image(Path(work) / "cat.jpg")
        answer = ask("infer", f"grpc://{address}:8001", picture, "Hello", "--model-type", "llava")
    if "ranks on 2 hosts" not in answer.stdout:
        raise SystemExit(f"demo: the group's world did not answer from both nodes: {answer.stderr}")
    say("  (world=...: rank 0 reached both ranks, on both nodes, in one MPI world)")


def real_demo(keep_cluster: bool) -> int:
    """The demo on real nodes; returns the exit code."""
    say("What is real and what is simulated here:")
    say("  real: the control plane, two nodes (kubelet, containerd, runc, CNI, kube-proxy, kube-router),")
    say(
        "  CoreDNS, a volume provisioner, the images built from the Dockerfile, the operator's pod, the build"
    )
    say(
        "  pods running the engine builder on a real volume, the serving pods running tritonserver, Services,"
    )
    say("  a weights download pod running huggingface_hub, NetworkPolicies enforced by kube-router")
    say(
        "  simulated: the GPUs (a device plugin double registers nvidia.com/gpu with each kubelet and tells a"
    )
    say("  container which GPUs it got; no device reaches it; nvidia-smi is a double), the GPU tools in")
    say(
        "  the CPU builder image and the GPU models in the CPU serving images (doubles of the same contract),"
    )
    say("  and huggingface.co (a double of its API in a pod, serving small synthetic snapshots)")

    step("Local cluster with two real nodes (built from the Go module proxy on the first run, images beside)")
    layout = Layout.discover()
    # Two Go caches at a time, the images beside them (`builds`): a first run is mostly these builds.
    built = builds.ensure_all(
        layout, say, ["control plane", "nodes", "fake GPU plugin", "LeaderWorkerSet"], with_images=True
    )
    cluster = LocalCluster(default_state_dir(ROOT), layout, say=say)
    was_running = cluster.load_state() is not None
    state = cluster.up(
        NodePool(count=0), real_nodes=NodePool(count=2, name_prefix=REAL_NODE_PREFIX), lws=True
    )
    bin_dir = Path(state.binaries) / "bin"

    step("Images from the project's Dockerfile (buildah, Debian bases by mmdebstrap), loaded into both nodes")
    started = time.monotonic()
    cluster.load_images([image.archive for image in built.values()])
    say(f"  imported into both nodes' containerd in {time.monotonic() - started:.0f} s")
    with cluster.api_client() as api:
        hub.deploy(api, built["engine-builder-cpu"].name, say)

    with cluster.api_client() as api:
        demo = Demo(cluster, api, bin_dir / "kubectl", ROOT / "out" / "demo", stand_ins=True)
        demo.run_kubectl(
            "get", "nodes", "-o",
            "custom-columns=NODE:.metadata.name,IP:.status.addresses[0].address,"
            "RUNTIME:.status.nodeInfo.containerRuntimeVersion,GPUS:.status.allocatable.nvidia\\.com/gpu",
        )  # fmt: skip

        step("Installing the operator with its Helm chart (a pod under Pod Security restricted)")
        helm_install(demo, bin_dir / "helm", {target: image.name for target, image in built.items()})
        demo.run_kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "wide")

        step("A fresh namespace enforcing restricted")
        restricted_namespace(demo)
        say(f"  namespace {NAMESPACE} ready")

        step(
            "Applying llava, llava-tp2 and whisper (build pods, then tritonserver pods) and qwen2-5-vl "
            "(runtime trtllm-serve: a download pod, then a trtllm-serve pod)"
        )
        documents = [example("llava"), tp2_on_a100s(), example("whisper"), example("qwen2_5_vl")]
        # The Hub double slowed down: the 67 kB snapshot takes half a minute, and its progress shows.
        hub.set_chunk_delay(demo.api, 1.5)
        for document in documents:
            demo.apply(document)
        names = [d["metadata"]["name"] for d in documents]
        try:
            times = demo.follow(names, ready, timeout=600)
        finally:
            hub.set_chunk_delay(demo.api, 0.0)
        for name in names:
            say(f"  {name}: apply to Ready in {times[name]:.1f} s")
        demo.run_kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide")

        step("A cache hit: llava-copy has llava's engine inputs, so no new build Job")
        jobs_before = demo.jobs()
        copy_document = copy.deepcopy(example("llava"))
        copy_document["metadata"]["name"] = "llava-copy"
        demo.apply(copy_document)
        demo.follow(["llava-copy"], ready, timeout=300)
        engine = demo.get("llava-copy")["status"]["engine"]
        say(
            f"  engine source: {engine['source']}; "
            f"build Jobs before {len(jobs_before)}, after {len(demo.jobs())}"
        )

        step("A failed build: a gated repository without a token; the builder's own error reaches the status")
        broken = example("mllama")
        del broken["spec"]["model"]["source"]["huggingface"]["tokenSecretRef"]
        broken["metadata"]["name"] = "mllama-no-token"
        broken["spec"]["build"] = {"backoffLimit": 0}
        demo.apply(broken)
        demo.follow(
            ["mllama-no-token"], lambda b: (b.get("status") or {}).get("phase") == "Failed", timeout=300
        )

        step(
            "A serving-only change: llava streams now; its new pod surges in beside the old one onto a new "
            "repository, no build"
        )
        before = demo.get("llava")["status"]
        demo.apply(example("llava", serving={"streaming": True}))
        ready_pods: list[int] = []

        def rolled(body: dict[str, Any]) -> bool:
            ready_pods.append(int((body.get("status") or {}).get("readyReplicas") or 0))
            return ready(body) and body["status"]["modelRepository"] != before["modelRepository"]

        demo.follow(["llava"], rolled)
        after = demo.get("llava")["status"]
        say(f"  model repository {before['modelRepository']} -> {after['modelRepository']}")
        say(f"  ready pods through the rollout: never fewer than {min(ready_pods)} ({len(ready_pods)} looks)")
        say(f"  engine {after['engine']['cacheKey']} unchanged; build Jobs: {', '.join(demo.jobs())}")
        say(f"\n  The operator so far: {operator_figures(demo)}")

        across_nodes(demo)
        demo.show_what_exists("jobs,deployments,leaderworkersets,services,persistentvolumeclaims")

        step("An answer from llava's serving pod, through its Service")
        address = demo.core.read_namespaced_service("llava", NAMESPACE).spec.cluster_ip
        with tempfile.TemporaryDirectory(prefix="mmd-demo-") as work:
            picture = media.image(Path(work) / "cat.jpg")
            ask("infer", f"grpc://{address}:8001", picture, "What is in this picture?", *LLAVA_STREAM)
        say("  (the answer is the doubles' trace of what reached each model, not a real caption)")
        chat(demo)
    leave_cluster(cluster, keep=keep_cluster or was_running, what="cluster")
    return 0
