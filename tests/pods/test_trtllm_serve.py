"""The trtllm-serve runtime on real pods: a real download Job against the Hub double, the trtllm-serve double
serving the snapshot behind its probes, the OpenAI API through the Service, the NetworkPolicy enforced.

Two Qwen2.5-VL resources name the same repository and revision: one with the default policy (egress to DNS
only), one with `serving.networkPolicy` letting only pods labelled `app: chat` in. The download pod runs
the builder image's `python -m engine_builder download` (huggingface_hub) against the local cluster's Hub
double through CoreDNS and kube-proxy, once for both; the serving pods run the trtllm-serve image's
`trtllm-serve` (the double, in the CPU stand-in) on the real volume. Only the GPU model is a double.
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from engine_builder.weights_format import DownloadSucceeded, parse_termination_message, snapshot_directory
from mmd_operator.knowledge import ModelType
from mmd_testbed.localcluster import addons, hub
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from tests.support.kube import Kube, Resources, Tools
from tests.support.pods import (
    client_pod,
    container_processes,
    example,
    http_get,
    mmctl_chat,
    pod_connects,
    service_ip,
    serving_pods,
    volume_directory,
    wait_until,
)

pytestmark = pytest.mark.pods
REPO = "Qwen/Qwen2.5-VL-3B-Instruct"
SERVER = "trtllm-serve"
RED = (200, 10, 10)


@pytest.fixture(scope="module")
def busybox() -> str:
    return addons.image_names(ensure_node_binaries(Layout.discover(), say=print))["busybox"]


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("picture") / "red.png"
    Image.new("RGB", (32, 32), RED).save(path)
    return path


def data_url(size: int = 8) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), RED).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat_request(text: str) -> dict[str, Any]:
    content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": data_url()}}]
    return {"model": "qwen", "max_tokens": 64, "messages": [{"role": "user", "content": content}]}


def hub_log(kube: Kube, tools: Tools) -> list[str]:
    (pod,) = kube.core.list_namespaced_pod(
        hub.NAMESPACE, label_selector="app.kubernetes.io/name=hub-double"
    ).items
    return tools.run("kubectl", "logs", "-n", hub.NAMESPACE, pod.metadata.name).stdout.splitlines()


def the_hubs_commit(kube: Kube) -> str:
    """What `main` is at the Hub double, asked of it from this host through its Service."""
    address = service_ip(kube, hub.NAMESPACE, hub.NAME)
    with urllib.request.urlopen(f"http://{address}/api/models/{REPO}/revision/main", timeout=10) as answer:
        return str(json.load(answer)["sha"])


def test_qwen2_5_vl_downloads_once_in_a_real_pod_and_answers_openai_chat_through_its_service(
    resources: Resources, kube: Kube, tools: Tools, namespace: str, busybox: str, picture: Path
) -> None:
    files_before = len([line for line in hub_log(kube, tools) if "/resolve/" in line])
    guarded = example(
        "qwen2_5_vl",
        serving={"networkPolicy": {"clients": [{"podSelector": {"matchLabels": {"app": "chat"}}}]}},
    )
    guarded["metadata"]["name"] = "qwen-guarded"
    started = time.monotonic()
    resources.apply(example("qwen2_5_vl"))
    resources.apply(guarded)
    body = resources.wait_phase("qwen2-5-vl", "Ready", timeout=240)
    apply_to_ready = time.monotonic() - started
    resources.wait_phase("qwen-guarded", "Ready", timeout=120)
    weights = body["status"]["weights"]
    commit = the_hubs_commit(kube)
    assert (weights["repo"], weights["revision"], weights["commit"]) == (REPO, "main", commit)

    # One download Job for both resources; its pod ran the real download against the Hub double.
    jobs = kube.batch.list_namespaced_job(
        namespace, label_selector="app.kubernetes.io/component=weights-download"
    )
    (job,) = jobs.items
    assert sorted(owner.name for owner in job.metadata.owner_references) == ["qwen-guarded", "qwen2-5-vl"]
    (download,) = kube.core.list_namespaced_pod(
        namespace, label_selector=f"job-name={job.metadata.name}"
    ).items
    terminated = download.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0, terminated
    summary = parse_termination_message(terminated.message)
    assert isinstance(summary, DownloadSucceeded), summary
    assert (summary.commit, summary.snapshot_key, summary.cache_hit) == (
        commit,
        weights["snapshotKey"],
        False,
    )
    log = tools.run("kubectl", "logs", "-n", namespace, download.metadata.name).stdout
    assert f"{REPO}@main is commit {commit}" in log, log
    # ... each file fetched once, over the pod network (the Hub double logs the client's address).
    fetched = [line for line in hub_log(kube, tools) if "/resolve/" in line][files_before:]
    expected = hub.synthetic_snapshot(REPO, ModelType.QWEN2_5_VL)
    gets = sorted(re.search(r"/resolve/\w+/(\S+) HTTP", line)[1] for line in fetched if '"GET ' in line)  # type: ignore[index]
    assert gets == sorted(expected), fetched

    # The snapshot is on the real volume, byte for byte, with nothing half-written beside it.
    directory = volume_directory(kube, namespace, weights["claim"])
    stored = directory / weights["snapshotKey"] / snapshot_directory(REPO)
    assert {path.name: path.read_bytes() for path in stored.iterdir()} == expected
    assert not [path for path in directory.iterdir() if path.name.startswith(".work")]

    # The serving pod runs the image's `trtllm-serve` on it, as uid 1000 with a writable $HOME.
    (pod,) = serving_pods(kube, namespace, "qwen2-5-vl")
    server = pod.status.container_statuses[0]
    assert server.ready and server.restart_count == 0
    (container,) = pod.spec.containers
    assert container.command[:2] == [
        "trtllm-serve",
        f"/engines/{weights['snapshotKey']}/Qwen2.5-VL-3B-Instruct",
    ]
    assert {
        probe.http_get.path
        for probe in (container.startup_probe, container.readiness_probe, container.liveness_probe)
    } == {"/health"}
    shell = tools.run(
        "kubectl",
        "exec",
        "-n",
        namespace,
        pod.metadata.name,
        "--",
        "sh",
        "-c",
        'id && touch "$HOME/w" && echo "$HOME"',
    ).stdout
    assert re.match(r"uid=1000\b.* gid=1000\b", shell) and shell.rstrip().endswith("/home/trtllm-serve"), (
        shell
    )
    argvs = [process.argv for process in container_processes(pod.metadata.uid)]
    assert any(argv[1:3] == ["-m", "mmd_testbed.trtllm_serve"] and "--backend" in argv for argv in argvs), (
        argvs
    )
    # The kubelet's probes reached /health for real.
    server_log = tools.run("kubectl", "logs", "-n", namespace, pod.metadata.name).stdout
    assert '"GET /health HTTP/1.1" 200' in server_log, server_log[-2000:]

    # An OpenAI chat request with an image, through the Service: by `mmctl chat` and by raw HTTP.
    address = service_ip(kube, namespace, "qwen2-5-vl")
    answer = mmctl_chat(f"http://{address}:8000", "--image", str(picture), "--text", "What is this?")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith(
        "[trtllm-serve double, qwen2_5_vl] image 1: 32x32, mean colour #c80a0a."
    ), answer
    assert "model: Qwen2.5-VL-3B-Instruct" in answer.stderr, answer.stderr
    request = urllib.request.Request(
        f"http://{address}:8000/v1/chat/completions",
        data=json.dumps(chat_request("And this?")).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        completion = json.load(response)
    assert completion["object"] == "chat.completion" and completion["model"] == "qwen"
    assert completion["choices"][0]["message"]["content"].startswith(
        "[trtllm-serve double, qwen2_5_vl] image 1: 8x8"
    )
    with urllib.request.urlopen(f"http://{address}:8000/prometheus/metrics", timeout=10) as response:
        assert "trtllm_request_success_total{" in response.read().decode()

    # The default policy: DNS only. The Hub, reachable for the download pod, is not for the server.
    name = pod.metadata.name
    hub_host = f"{hub.NAME}.{hub.NAMESPACE}.svc.cluster.local"
    egress = {
        "serving -> DNS": pod_connects(
            tools, namespace, name, SERVER, "kube-dns.kube-system.svc.cluster.local", 53
        ),
        "serving -> the Hub double": pod_connects(tools, namespace, name, SERVER, hub_host, 80),
    }
    assert egress == {"serving -> DNS": True, "serving -> the Hub double": False}, egress

    # The spec's policy: the `app: chat` client asks through the Service by name; a stranger gets nothing.
    client_pod(kube, namespace, "chat", busybox, labels={"app": "chat"})
    client_pod(kube, namespace, "stranger", busybox)
    service = f"qwen-guarded.{namespace}.svc.cluster.local"
    wait_until(
        "the allowed client's answer",
        lambda: "200 OK" in http_get(tools, namespace, "chat", service, 8000, "/health"),
        20,
    )
    # No `-T`: with --post-data it makes the host's busybox 1.35 wget segfault (exit 139); kubectl's
    # timeout bounds the request instead.
    post = (
        f"wget -q -O - --header 'Content-Type: application/json' "
        f"--post-data '{json.dumps(chat_request('From a pod?'))}' http://{service}:8000/v1/chat/completions"
    )
    from_pod = tools.run(
        "kubectl", "exec", "-n", namespace, "chat", "--", "sh", "-c", post, timeout=30
    ).stdout
    assert json.loads(from_pod)["choices"][0]["message"]["content"].endswith("prompt: From a pod?"), from_pod
    assert http_get(tools, namespace, "stranger", service, 8000, "/health") == ""
    print(
        f"\nqwen2-5-vl (trtllm-serve) on real pods: apply to Ready {apply_to_ready:.1f} s; "
        f"chat: {answer.stdout.strip()}"
    )


def test_a_slow_download_shows_its_progress_in_the_status_with_few_writes(
    resources: Resources, kube: Kube, tools: Tools, namespace: str
) -> None:
    """The download pod prints a progress line every 10 s; the operator reads its log's tail every 15 s
    while it runs and writes the status only when the words changed. Watched from outside: the PROGRESS
    column's words, the details, and every write of the resource (its resourceVersion)."""
    name = "qwen2-5-vl"
    snapshot = hub.synthetic_snapshot(REPO, ModelType.QWEN2_5_VL)
    hub.set_chunk_delay(kube.core.api_client, 3.0)  # shards of 4, 8, 12, 16 chunks: ended 12 s apart
    seen: list[tuple[float, str, str | None, dict[str, Any] | None]] = []
    try:
        resources.apply(example("qwen2_5_vl"))
        started = time.monotonic()
        while time.monotonic() - started < 240:
            body = resources.get(name)
            status = body.get("status") or {}
            weights = status.get("weights") or {}
            seen.append(
                (
                    time.monotonic(),
                    body["metadata"]["resourceVersion"],
                    status.get("progress"),
                    weights.get("progress"),
                )
            )
            if status.get("phase") in ("Deploying", "Ready", "Failed"):
                break
            time.sleep(0.5)
    finally:
        hub.set_chunk_delay(kube.core.api_client, 0.0)
    shown = [(at, words, details) for at, _, words, details in seen if words]
    if len({words for _, words, _ in shown}) < 2:  # say what the operator and the download pod said
        operator_log = tools.run(
            "kubectl", "logs", "-n", "mmd-system", "deploy/mmd-operator", "--tail=60"
        ).stdout
        pods = tools.run("kubectl", "get", "pods", "-n", namespace, "-o", "name").stdout.split()
        download = next((p for p in pods if "download" in p), "")
        pod_log = (
            tools.run("kubectl", "logs", "-n", namespace, download, "--tail=20").stdout if download else ""
        )
        conditions = resources.get(name).get("status", {}).get("conditions")
        pytest.fail(f"the column hardly moved: {shown}\n{operator_log}\n{pod_log}\n{conditions}")
    first, last = shown[0][2], shown[-1][2]
    assert first is not None and last is not None
    total = sum(len(content) for content in snapshot.values())
    assert (last["bytesTotal"], last["filesTotal"]) == (total, len(snapshot))
    done = [details["bytesDone"] for _, _, details in shown if details]
    assert done == sorted(done) and done[-1] > done[0], done
    assert re.fullmatch(r"\d+% [\d.]+/[\d.]+ kB", shown[-1][1]), shown[-1][1]
    assert not any(details and details["stalled"] for _, _, details in shown)
    # Writes while the progress showed: one per read at most (every 15 s), and the phase's own.
    window = shown[-1][0] - shown[0][0]
    versions = {version for at, version, words, _ in seen if words}
    per_minute = (len(versions) - 1) / (window / 60) if window else 0.0
    assert len(versions) - 1 <= window / 15 + 2, (len(versions), window)
    assert seen[-1][2] is None, "the progress stays after the download ended"
    print(
        f"\n{name}: download of {total} bytes, progress shown for {window:.0f} s as "
        f"{[words for words in dict.fromkeys(w for _, w, _ in shown)]}; {len(versions) - 1} status writes "
        f"in that time ({per_minute:.1f} a minute)"
    )
