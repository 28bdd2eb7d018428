"""What both demos share: narration, examples in the demo namespace, the watcher, the operator process.

Imports the kubernetes client, the CRD generator and the local cluster.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from mmd_operator.api import crdgen
from mmd_testbed.localcluster import images
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.layout import find_repo_root
from mmd_testbed.localcluster.stages import (
    BUILD_DURATION_ANNOTATION,
)
from mmd_testbed.ports import free_port

ROOT = find_repo_root()
EXAMPLES = ROOT / "examples"
# A new namespace per run (an old one takes a while to delete, and its engine cache would make every
# build a cache hit); earlier runs' namespaces are deleted in the background.
NAMESPACE = f"mmd-demo-{time.strftime('%H%M%S')}"
DEMO_LABEL = "mmd-operator.dev/demo"
GROUP, VERSION, PLURAL = "serving.multimodal.dev", "v1alpha1", "multimodaldeployments"
STARTED = time.monotonic()


def say(text: str = "") -> None:
    """Print one line at once (the demo is watched live)."""
    print(text, flush=True)


def step(title: str) -> None:
    """Announce a step with the time since the demo started."""
    say(f"\n\033[1m==> {title}\033[0m  ({time.monotonic() - STARTED:.0f} s into the demo)")


# llava's answer streamed, a few tokens long.
LLAVA_STREAM = ("--model-type", "llava", "--stream", "--max-tokens", "16")


def ask(command: str, url: str, picture: Path, text: str, *options: str) -> subprocess.CompletedProcess[str]:
    """Run `mmctl <command>` against `url` with `picture` and `text`; stop the demo if it fails.

    The command is said as typed first (the picture by its file name), then what it answered.
    """
    shown = ["mmctl", command, "--url", url, "--image", picture.name, "--text", text, *options]
    say(f"$ {shlex.join(shown)}")
    answer = subprocess.run(
        [str(Path(sys.executable).parent / "mmctl"), command, "--url", url, "--image", str(picture),
         "--text", text, *options],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    say(answer.stdout.rstrip())
    say(answer.stderr.rstrip())
    if answer.returncode != 0:
        raise SystemExit(f"demo: mmctl {command} failed")
    return answer


def example(name: str, *, build_seconds: int | None = None, **spec: dict[str, Any]) -> dict[str, Any]:
    """`examples/<name>.yaml` in the demo namespace, with spec sections merged and a fake build time."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    for section, fields in spec.items():
        document["spec"].setdefault(section, {}).update(fields)
    if build_seconds is not None:
        pod = document["spec"].setdefault("build", {}).setdefault("pod", {})
        pod.setdefault("annotations", {})[BUILD_DURATION_ANNOTATION] = f"{build_seconds}s"
    document["metadata"]["namespace"] = NAMESPACE
    return document


def tp2_on_a100s(*, build_seconds: int | None = None) -> dict[str, Any]:
    """`llava-tp2-fp8.yaml` as `llava-tp2`, with a 16-bit KV cache and no H100 selector.

    Its FP8 KV cache needs compute capability 8.9 (its pods select H100s); the demo's GPUs are A100s.
    """
    document = example("llava-tp2-fp8", build_seconds=build_seconds)
    document["metadata"]["name"] = "llava-tp2"
    document["spec"]["engine"]["kvCacheDtype"] = "auto"
    del document["spec"]["serving"]["pod"]
    return document


class Demo:
    """The cluster, the operator process and the API handles of one demo run."""

    def __init__(
        self, cluster: LocalCluster, api: k8s.ApiClient, kubectl: Path, out: Path, *, stand_ins: bool = False
    ) -> None:
        self.cluster = cluster
        # Real nodes run the CPU stand-ins, which ask for far less than a GPU server (`images.for_stand_ins`).
        self.stand_ins = stand_ins
        self.api = api
        # Untyped handles: the demo reads and writes plain dicts, which the client's models do not declare.
        self.custom: Any = k8s.CustomObjectsApi(api)
        self.core: Any = k8s.CoreV1Api(api)
        self.batch: Any = k8s.BatchV1Api(api)
        self.apps: Any = k8s.AppsV1Api(api)
        self.extensions: Any = k8s.ApiextensionsV1Api(api)
        self.kubectl = kubectl
        self.out = out

    def run_kubectl(self, *args: str) -> None:
        """Show a kubectl command and what it printed."""
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
        say(f"$ kubectl {' '.join(args)}")
        result = subprocess.run(
            [str(self.kubectl), *args], env=env, capture_output=True, text=True, check=False
        )
        say((result.stdout + result.stderr).rstrip())

    def apply(self, document: dict[str, Any]) -> None:
        """Server-side apply, as `kubectl apply --server-side` does."""
        if self.stand_ins:
            document = images.for_stand_ins(copy.deepcopy(document))
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, document["metadata"]["name"], document,
            field_manager="kubectl", force=True, _content_type="application/apply-patch+yaml",
        )  # fmt: skip

    def get(self, name: str) -> dict[str, Any]:
        """One MultimodalDeployment of the demo namespace."""
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, name
        )
        return found

    def jobs(self) -> list[str]:
        """Names of the build Jobs."""
        items = self.batch.list_namespaced_job(
            NAMESPACE, label_selector="app.kubernetes.io/component=engine-build"
        )
        return sorted(job.metadata.name for job in items.items)

    def follow(
        self, names: list[str], until: Callable[[dict[str, Any]], bool], timeout: float = 180
    ) -> dict[str, float]:
        """Print every phase change of `names` with the elapsed time; return when each reached `until`."""
        started = time.monotonic()
        seen: dict[str, tuple[str, str]] = {}
        done: dict[str, float] = {}
        while len(done) < len(names):
            if time.monotonic() - started > timeout:
                raise SystemExit(f"demo: {sorted(set(names) - set(done))} did not finish in {timeout:.0f} s")
            for name in names:
                body = self.get(name)
                status = body.get("status") or {}
                if status.get("observedGeneration") != body["metadata"]["generation"]:
                    continue
                ready: dict[str, Any] = next(
                    (c for c in status.get("conditions", []) if c["type"] == "Ready"), {}
                )
                # The PROGRESS column's words while a build or download runs.
                progress = f" [{status['progress']}]" if status.get("progress") else ""
                shown = (str(status.get("phase")), f"{ready.get('reason')}{progress}: {ready.get('message')}")
                if seen.get(name) != shown:
                    seen[name] = shown
                    say(f"  {time.monotonic() - started:6.1f} s  {name:<16} {shown[0]:<9} {shown[1]}")
                if name not in done and until(body):
                    done[name] = time.monotonic() - started
            time.sleep(0.25)
        return done

    def install_crd(self) -> None:
        """Create or replace the CRD and wait until it is Established."""
        body = crdgen.crd()
        try:
            self.extensions.create_custom_resource_definition(body)
        except ApiException as error:
            if error.status != 409:
                raise
            current = self.extensions.read_custom_resource_definition(body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            self.extensions.replace_custom_resource_definition(body["metadata"]["name"], body)
        for _ in range(120):
            crd = self.extensions.read_custom_resource_definition(body["metadata"]["name"])
            if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
                return
            time.sleep(0.5)
        raise SystemExit("demo: the CRD never became Established")

    def fresh_namespace(self) -> None:
        """A new demo namespace; the namespaces of earlier runs are deleted in the background."""
        for old in self.core.list_namespace(label_selector=DEMO_LABEL).items:
            self.core.delete_namespace(old.metadata.name)
            say(f"  deleting {old.metadata.name}, the namespace of an earlier run (in the background)")
        self.core.create_namespace({"metadata": {"name": NAMESPACE, "labels": {DEMO_LABEL: "true"}}})
        for _ in range(120):
            try:
                self.core.read_namespaced_service_account("default", NAMESPACE)
                return
            except ApiException:
                time.sleep(0.25)

    def show_what_exists(self, kinds: str) -> None:
        """The resources and their children of `kinds` (comma-separated, as kubectl takes them)."""
        step("What exists now")
        self.run_kubectl("get", "mmd", "-n", NAMESPACE, "-o", "wide")  # -o wide: the GPU kind of each engine
        self.run_kubectl("get", kinds, "-n", NAMESPACE)


def leave_cluster(cluster: LocalCluster, *, keep: bool, what: str) -> None:
    """Stop the cluster this demo started, unless asked to keep it or it ran before the demo."""
    if keep:
        say(
            f"\nThe {what} keeps running: export KUBECONFIG={cluster.kubeconfig}; "
            "'make cluster-down' stops it."
        )
    else:
        cluster.down()
        say(f"\nThe {what} this demo started is stopped (make demo ARGS=--keep-cluster keeps it).")


def ready(body: dict[str, Any]) -> bool:
    """Whether a resource reports Ready."""
    return (body.get("status") or {}).get("phase") == "Ready"


def operator_figures(port: int) -> str:
    """Reconciles and API requests so far, from the operator's own /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'^mmd_(reconciles|api_requests)_total\{(\w+)="(\w+)"\} (\S+)$', line)
        if match:
            values[f"{match[1]}:{match[3]}"] = float(match[4])
    reconciles = sum(v for k, v in values.items() if k.startswith("reconciles:"))
    requests = sum(v for k, v in values.items() if k.startswith("api_requests:"))
    writes = requests - values.get("api_requests:GET", 0)
    changed = values.get("reconciles:changed", 0)
    return (
        f"{reconciles:.0f} reconciles ({changed:.0f} wrote something), {requests:.0f} API requests "
        f"({writes:.0f} writes): {requests / max(reconciles, 1):.2f} requests per reconcile"
    )


@contextmanager
def operator(cluster: LocalCluster, log: Path, metrics_port: int) -> Iterator[subprocess.Popen[bytes]]:
    """Run the operator (its image's entry point) for the demo namespace until the block ends."""
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "MMD_METRICS_PORT": str(metrics_port),
        "MMD_HEALTH_PORT": str(free_port()),
        "MMD_RETRY_SECONDS": "3",
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "mmd_operator", "--namespace", NAMESPACE],
            env=env,
            stdout=output,
            stderr=output,
        )
    try:
        for _ in range(600):
            if process.poll() is not None:
                raise SystemExit(f"demo: the operator exited:\n{log.read_text()[-2000:]}")
            if "Operator started" in log.read_text(errors="replace"):
                break
            time.sleep(0.1)
        else:
            raise SystemExit("demo: the operator did not start in 60 s")
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        say(f"  operator stopped (its log: {log})")
