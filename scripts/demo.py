"""`make demo`: the operator's main job, end to end, on the local cluster.

By default on real nodes (scripts/demo_real.py): real containers for the operator, its build pods and its
serving pods, ending with an answer from a serving pod through its Service. Where this machine cannot run
real nodes (the reason is printed), or with `--kwok`, the demo below runs on kwok's simulated GPU nodes:
it starts (or reuses) the local control plane, installs the CRD, runs the operator, applies three
examples and follows them from Building through Deploying to Ready, then shows a cache hit, a failed
build with the builder's reason and a serving-only change that rolls without a build. Last, it serves the
llava resource's model repository, exactly as its ConfigMap holds it, on the local CPU tritonserver and
answers one `mmctl infer` request. What is simulated is said as it happens.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from engine_builder.result_format import BuildFailed, termination_message
from mmd_operator.api import crdgen
from mmd_operator.cli.localcluster import realnodes
from mmd_operator.cli.localcluster.cluster import LocalCluster
from mmd_operator.cli.localcluster.layout import default_state_dir
from mmd_operator.cli.localcluster.processes import free_port
from mmd_operator.cli.localcluster.stages import (
    BUILD_DURATION_ANNOTATION,
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)
from mmd_operator.cli.triton import media
from mmd_operator.cli.triton.localserver import TritonInstall
from mmd_operator.cli.triton.serving import serve
from mmd_operator.plan.model_repository import ModelRepository
from mmd_operator.plan.resource_plan import plan_resource

ROOT = Path(__file__).resolve().parents[1]
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


class Demo:
    """The cluster, the operator process and the API handles of one demo run."""

    def __init__(self, cluster: LocalCluster, api: k8s.ApiClient, kubectl: Path, out: Path) -> None:
        self.cluster = cluster
        self.custom = k8s.CustomObjectsApi(api)
        self.core = k8s.CoreV1Api(api)
        self.batch = k8s.BatchV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.extensions = k8s.ApiextensionsV1Api(api)
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
                ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
                shown = (str(status.get("phase")), f"{ready.get('reason')}: {ready.get('message')}")
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
        self.run_kubectl("get", "mmd", "-n", NAMESPACE)
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


def main(argv: list[str] | None = None) -> int:
    """Run the demo on real nodes where this machine can run them, else on kwok's; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keep-cluster", action="store_true", help="leave the control plane running at the end"
    )
    parser.add_argument("--kwok", action="store_true", help="the demo on kwok's simulated nodes only")
    args = parser.parse_args(argv)
    problems = [] if args.kwok else realnodes.preflight(default_state_dir(ROOT))
    if not args.kwok and not problems:
        from demo_real import real_demo

        code = real_demo(args.keep_cluster)
        say(f"Demo done in {time.monotonic() - STARTED:.0f} s.")
        return code
    if problems:
        say("Real nodes cannot run on this machine, so this demo runs on kwok's simulated nodes:")
        for problem in problems:
            say(f"  {problem}")
    return kwok_demo(args)


def kwok_demo(args: argparse.Namespace) -> int:
    """The demo on the control plane with kwok's simulated GPU nodes; returns the exit code."""
    out = ROOT / "out" / "demo"
    out.mkdir(parents=True, exist_ok=True)

    say("What is real and what is simulated here:")
    say("  real: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the operator, tritonserver")
    say("  simulated: the four GPU nodes (kwok), every pod's life (kwok marks them Running/Ready), and the")
    say("  engine build itself: a build pod ends after a few seconds with the builder's own success line for")
    say("  its cacheKey (no GPU, no TensorRT-LLM here); at the end the model code on tritonserver is doubles")

    step("Local control plane (the first run builds it from the Go module proxy, about 12 minutes)")
    cluster = LocalCluster(default_state_dir(ROOT), say=say)
    was_running = cluster.load_state() is not None
    state = cluster.up()
    kubectl = Path(state.binaries) / "bin" / "kubectl"
    with cluster.api_client() as api:
        demo = Demo(cluster, api, kubectl, out)
        demo.run_kubectl(
            "get",
            "nodes",
            "-o",
            "custom-columns=NODE:.metadata.name,GPUS:.status.allocatable.nvidia\\.com/gpu,PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product",
        )

        step("Installing the CRD and a fresh namespace")
        demo.install_crd()
        demo.fresh_namespace()
        say(f"  CRD {GROUP}/{VERSION} Established; namespace {NAMESPACE} ready")

        step("Starting the operator (python -m mmd_operator, the operator image's entry point)")
        metrics_port = free_port()
        with operator(cluster, out / "operator.log", metrics_port):
            say("  operator running, watching namespace " + NAMESPACE)

            step("Applying llava, llava-tp2-fp8 and whisper (each fake build takes 4-8 s)")
            documents = [
                example("llava", build_seconds=4),
                example("llava-tp2-fp8", build_seconds=8),
                example("whisper", build_seconds=6),
            ]
            for document in documents:
                demo.apply(document)
            names = [d["metadata"]["name"] for d in documents]
            times = demo.follow(names, ready)
            for name in names:
                say(f"  {name}: apply to Ready in {times[name]:.1f} s")

            step("A cache hit: llava-copy has llava's engine inputs, so no new build Job")
            jobs_before = demo.jobs()
            copy_document = copy.deepcopy(example("llava"))
            copy_document["metadata"]["name"] = "llava-copy"
            demo.apply(copy_document)
            demo.follow(["llava-copy"], ready)
            engine = demo.get("llava-copy")["status"]["engine"]
            say(
                f"  engine source: {engine['source']}; "
                f"build Jobs before {len(jobs_before)}, after {len(demo.jobs())}"
            )
            assert demo.jobs() == jobs_before, "the cache hit started a build"

            step("A failed build: the builder's step and last error line reach the status verbatim")
            failure = BuildFailed(
                step="build-llm", exit_code=1, reason="[TensorRT-LLM][ERROR] CUDA out of memory"
            )
            broken = example(
                "llava",
                engine={"maxBatchSize": 4},
                build={
                    "backoffLimit": 0,
                    "pod": {
                        "labels": {FAULT_LABEL: "fail"},
                        "annotations": {FAULT_MESSAGE_ANNOTATION: termination_message(failure)},
                    },
                },
            )
            broken["metadata"]["name"] = "llava-broken"
            say("  (simulated: the build pod carries a fault label and ends with this failure line)")
            demo.apply(broken)
            demo.follow(["llava-broken"], lambda b: (b.get("status") or {}).get("phase") == "Failed")

            step("A serving-only change: llava streams now; it rolls with a new repository, no build")
            before = demo.get("llava")["status"]
            demo.apply(example("llava", serving={"streaming": True}))
            demo.follow(
                ["llava"], lambda b: ready(b) and b["status"]["modelRepository"] != before["modelRepository"]
            )
            after = demo.get("llava")["status"]
            say(f"  model repository {before['modelRepository']} -> {after['modelRepository']}")
            say(f"  engine {after['engine']['cacheKey']} unchanged; build Jobs: {', '.join(demo.jobs())}")

            say(f"\n  The operator so far: {operator_figures(metrics_port)}")

            demo.show_what_exists("jobs,deployments,services,configmaps,persistentvolumeclaims")
            repository = after["modelRepository"]
            say(f"\n  The rendered repository of llava is ConfigMap {repository}:")
            say(f"    kubectl get configmap {repository} -n {NAMESPACE} -o yaml")
            say(
                "  and offline, with every object the operator applies:  "
                "mmctl render -f examples/llava.yaml -o out/llava"
            )

            step(
                "Serving llava's repository, exactly as its ConfigMap holds it, on the local CPU tritonserver"
            )
            configmap = demo.core.read_namespaced_config_map(repository, NAMESPACE)
            configs = {key.removesuffix(".pbtxt"): text for key, text in configmap.data.items()}
            _, plan = plan_resource(demo.get("llava"))
            assert configs == dict(plan.repository.configs), "the ConfigMap is not what the plan renders"
            served_plan = dataclasses.replace(
                plan, repository=ModelRepository(configs=configs, assembly=plan.repository.assembly)
            )
            say(
                "  (simulated: the GPU stages - the TensorRT-LLM engine, the vision encoder - run as doubles)"
            )
            install = TritonInstall.discover()
            with tempfile.TemporaryDirectory(prefix="mmd-demo-") as work:
                picture = media.image(Path(work) / "cat.jpg")
                with serve("llava", served_plan, install, Path(work), say) as server:
                    command = [
                        str(Path(sys.executable).parent / "mmctl"), "infer", "--url", server.url("grpc"),
                        "--model-type", "llava", "--image", str(picture),
                        "--text", "What is in this picture?",
                        "--stream", "--max-tokens", "16",
                    ]  # fmt: skip
                    say(
                        f"$ mmctl infer --url {server.url('grpc')} --model-type llava --image cat.jpg "
                        "--text 'What is in this picture?' --stream"
                    )
                    answer = subprocess.run(command, capture_output=True, text=True, check=False)
                    say(answer.stdout.rstrip())
                    say(answer.stderr.rstrip())
                    if answer.returncode != 0:
                        raise SystemExit("demo: mmctl infer failed")
                    say("  (the answer is the doubles' trace of what reached each model, not a real caption)")
            say("  tritonserver stopped")
    leave_cluster(cluster, keep=args.keep_cluster or was_running, what="control plane")
    say(f"Demo done in {time.monotonic() - STARTED:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
