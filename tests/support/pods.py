"""Helpers of the real-pod tier: host processes of containers, client pods, requests through Services.

A real node here is a network namespace on this machine, so its containers are processes on this host:
a container's processes are found by their cgroup (which names the pod's UID), and signalled as a node's
kernel would see them (a hung server is SIGSTOPped, a builder SIGKILLed). `llava_requests` keeps asking
a Service while a test changes what serves it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmd_operator.desired import pods as pod_settings
from mmd_testbed.localcluster import images
from tests.support.kube import Kube, Tools

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MMCTL = Path(sys.executable).parent / "mmctl"


def example(name: str, **spec_changes: Any) -> dict[str, Any]:
    """`examples/<name>.yaml` with top-level spec sections merged in (`serving={...}` updates serving),
    asking for what the CPU stand-ins need of a real node (`images.for_stand_ins`) unless a change says."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    for section, values in spec_changes.items():
        document["spec"][section] = {**document["spec"].get(section, {}), **values}
    return images.for_stand_ins(document)


@dataclass(frozen=True)
class HostProcess:
    """A process of a container, as this host sees it."""

    pid: int
    argv: list[str]


def container_processes(pod_uid: str) -> list[HostProcess]:
    """Every live process of the pod with `pod_uid` (its containers and sandbox), by their cgroup."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"pod{pod_uid}" in cgroups and state != "Z":
            found.append(HostProcess(int(entry.name), [part for part in argv if part]))
    return found


def signal_processes(processes: list[HostProcess], signum: signal.Signals) -> None:
    """Send `signum` to each process (gone ones are skipped)."""
    for process in processes:
        try:
            os.kill(process.pid, signum)
        except ProcessLookupError:
            continue


def mmctl_infer(url: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`mmctl infer --url URL ...` as a user runs it (a bounded single request)."""
    return subprocess.run(
        [str(MMCTL), "infer", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# One `mmctl infer` of `llava_requests`: when it ended (monotonic), its exit code, the end of its stderr.
Answer = tuple[float, int, str]


@contextmanager
def llava_requests(
    url: str, picture: Path, *, max_requests: int, max_seconds: float, pause: float = 0.0
) -> Iterator[list[Answer]]:
    """Send LLaVA requests to `url` from a thread until the block ends; yields the answers as they come.

    Bounded in count and time (requests only to the test's own cluster); `pause` seconds between requests.
    The loop stops when the block ends, and the list is complete once it has.
    """
    answers: list[Answer] = []
    stop = threading.Event()

    def send() -> None:
        started = time.monotonic()
        while not stop.is_set() and len(answers) < max_requests and time.monotonic() - started < max_seconds:
            answer = mmctl_infer(url, "--model-type", "llava", "--image", str(picture), "--timeout", "20")
            answers.append((time.monotonic(), answer.returncode, answer.stderr.strip()[-300:]))
            stop.wait(pause)

    client = threading.Thread(target=send, daemon=True)
    client.start()
    try:
        yield answers
    finally:
        stop.set()
        client.join(timeout=40)


def mmctl_chat(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`mmctl chat --url URL ...` as a user runs it (one OpenAI chat request)."""
    return subprocess.run(
        [str(MMCTL), "chat", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def client_pod(
    kube: Kube, namespace: str, name: str, image: str, *, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A busybox pod that sleeps, `restricted`, on a real node; returns the created pod."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "securityContext": pod_settings.pod_security_context(),
            "containers": [
                {
                    "name": "client",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "securityContext": pod_settings.container_security_context(),
                }
            ],
        },
    }
    kube.core.create_namespaced_pod(namespace, body)
    kube.wait_for(f"pod {name} Ready", lambda: _ready(kube, namespace, name), timeout=60)
    return body


def web_pod(kube: Kube, namespace: str, name: str, image: str, port: int, labels: dict[str, str]) -> str:
    """A busybox httpd pod answering `name` on `port`; returns its IP."""
    serve = f"mkdir -p /tmp/www && echo {name} > /tmp/www/index.html && exec httpd -f -p {port} -h /tmp/www"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "securityContext": pod_settings.pod_security_context(),
            "containers": [
                {
                    "name": "web",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", serve],
                    "ports": [{"containerPort": port}],
                    "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
                    "securityContext": pod_settings.container_security_context(),
                }
            ],
        },
    }
    kube.core.create_namespaced_pod(namespace, body)
    kube.wait_for(f"pod {name} Ready", lambda: _ready(kube, namespace, name), timeout=60)
    return str(kube.core.read_namespaced_pod(name, namespace).status.pod_ip)


def _ready(kube: Kube, namespace: str, name: str) -> bool:
    pod = kube.core.read_namespaced_pod(name, namespace)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def http_get(tools: Tools, namespace: str, pod: str, host: str, port: int, path: str = "/") -> str:
    """The first response line of GET `path` from inside `pod` (busybox nc; empty if refused or timed out)."""
    request = f"printf 'GET {path} HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' | nc -w 3 {host} {port} | head -1"
    result = tools.run(
        "kubectl", "exec", "-n", namespace, pod, "--", "sh", "-c", request, check=False, timeout=30
    )
    return result.stdout.strip()


def pod_connects(tools: Tools, namespace: str, pod: str, container: str, host: str, port: int) -> bool:
    """Whether a Python container of `pod` opens a TCP connection to host:port within 3 s."""
    program = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {port}), timeout=3).close()\n"
        "except OSError as error:\n"
        "    sys.exit(str(error))\n"
    )
    result = tools.run(
        "kubectl", "exec", "-n", namespace, pod, "-c", container, "--", "python3", "-c", program,
        check=False, timeout=30,
    )  # fmt: skip
    return result.returncode == 0


def service_ip(kube: Kube, namespace: str, name: str) -> str:
    """The ClusterIP of a Service."""
    return str(kube.core.read_namespaced_service(name, namespace).spec.cluster_ip)


def serving_pods(kube: Kube, namespace: str, instance: str) -> list[Any]:
    """The serving pods of a resource that are not being deleted."""
    selector = f"app.kubernetes.io/instance={instance},app.kubernetes.io/component=serving"
    items = kube.core.list_namespaced_pod(namespace, label_selector=selector).items
    return [pod for pod in items if pod.metadata.deletion_timestamp is None]


def volume_directory(kube: Kube, namespace: str, claim: str) -> Path:
    """Where a local-path claim's volume lives on this host (its PV's hostPath)."""
    volume = kube.core.read_namespaced_persistent_volume_claim(claim, namespace).spec.volume_name
    return Path(kube.core.read_persistent_volume(volume).spec.host_path.path)


def wait_until(what: str, check: Any, timeout: float, interval: float = 0.5) -> Any:
    """Poll `check` until truthy; raise AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def manifest(entry: Path) -> dict[str, Any]:
    """The engine cache entry's manifest.json."""
    loaded: dict[str, Any] = json.loads((entry / "manifest.json").read_text())
    return loaded
