"""The operator at scale against the API server's own floor, on the local control plane (`make bench`).

For each N: the *floor* creates, by a tight client loop at the operator's concurrency, exactly the
objects N resources lead to (the engine-index reads, the claim, one build Job per distinct engine and,
once built, every repository ConfigMap, Deployment and Service: `desired.state.manifests`), and waits
until every Deployment is available. Then the *operator* (its own process) gets the N resources applied
at once and is timed until every one is Ready. Both wait on the same kwok-played builds and pods, so
`T_op / T_floor` is what the operator costs over the API server's work. The resource mix: about 10 %
distinct engines (llava at several batch sizes, whisper, llava TP 2 with FP8), the rest cache hits or
shared builds.

Work in progress (issue 11): floor and operator times per N, API requests per reconcile, the operator's
CPU seconds and peak RSS. Not yet: steady-state writes over 2 minutes, apply-to-first-child latency,
the plot, the JSON report and the targets' exit code.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import watch

from mmd_operator.api import crdgen
from mmd_operator.cli.localcluster.cluster import LocalCluster
from mmd_operator.cli.localcluster.objects import NodePool
from mmd_operator.cli.localcluster.processes import free_port
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import state
from mmd_operator.kube.client import KubeClient
from mmd_operator.plan.resource_plan import plan_resource

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION, PLURAL = "serving.multimodal.dev", "v1alpha1", "multimodaldeployments"
WORKERS = 8  # the operator's default concurrency; the floor uses the same
STALL_SECONDS = 120.0  # no new ready object for this long: something is wrong, stop


def say(text: str) -> None:
    """Print one line at once (the benchmark is watched live)."""
    print(text, flush=True)


def progress(label: str, done: int, total: int, started: float) -> None:
    """Redraw one progress bar line."""
    width = 30
    filled = int(width * done / max(total, 1))
    bar = "#" * filled + "." * (width - filled)
    print(
        f"\r    {label:<9} [{bar}] {done:>5}/{total} {time.monotonic() - started:6.1f} s", end="", flush=True
    )
    if done >= total:
        print(flush=True)


def resource_mix(count: int) -> list[dict[str, Any]]:
    """`count` resources, about a tenth of them with an engine of their own; one in ten TP 2."""
    templates = {
        name: yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
        for name in ("llava", "whisper", "llava-tp2-fp8")
    }
    engines = max(count // 10, 3)
    variants = []
    for index in range(engines):
        base = ("llava", "whisper", "llava-tp2-fp8")[index % 3] if index < 3 else "llava"
        document = copy.deepcopy(templates[base])
        if index >= 3:
            document["spec"].setdefault("engine", {})["maxBatchSize"] = 2 + index
        variants.append(document)
    resources = []
    for index in range(count):
        document = copy.deepcopy(variants[index % engines])
        document["metadata"] = {"name": f"r{index:04d}"}
        resources.append(document)
    return resources


@dataclass
class Timeline:
    """When each of N things became ready, seconds after the start."""

    started: float
    ready_at: dict[str, float]

    def mark(self, name: str) -> None:
        """`name` is ready now."""
        self.ready_at.setdefault(name, time.monotonic() - self.started)


def watch_until(
    list_call: Callable[..., Any],
    args: tuple[Any, ...],
    is_ready: Callable[[dict[str, Any]], bool],
    expected: int,
    label: str,
    timeout: float,
) -> Timeline:
    """Watch until `expected` objects passed `is_ready`, drawing progress; stop when it stalls."""
    timeline = Timeline(started=time.monotonic(), ready_at={})
    deadline = time.monotonic() + timeout
    version = ""
    last_progress = time.monotonic()
    while len(timeline.ready_at) < expected and time.monotonic() < deadline:
        if time.monotonic() - last_progress > STALL_SECONDS:
            break
        stream = watch.Watch().stream(list_call, *args, resource_version=version, timeout_seconds=5)
        for event in stream:
            body = event["object"]
            body = body if isinstance(body, dict) else k8s.ApiClient().sanitize_for_serialization(body)
            version = body["metadata"]["resourceVersion"]
            if is_ready(body) and body["metadata"]["name"] not in timeline.ready_at:
                timeline.mark(body["metadata"]["name"])
                last_progress = time.monotonic()
                progress(label, len(timeline.ready_at), expected, timeline.started)
            if len(timeline.ready_at) >= expected:
                break
    if len(timeline.ready_at) < expected:
        raise SystemExit(f"{label}: only {len(timeline.ready_at)} of {expected} ready (stalled or timed out)")
    return timeline


def floor(api: k8s.ApiClient, namespace: str, resources: list[dict[str, Any]]) -> float:
    """Create what the operator would create for `resources`, as fast as the API server allows."""
    config = OperatorConfig()
    client = KubeClient(api, field_manager="mmd-floor")  # the operator's own request path
    per_resource = []
    for document in resources:
        resource, plan = plan_resource(
            {**document, "metadata": {**document["metadata"], "namespace": namespace}}
        )
        objects = state.manifests(resource, plan, config=config)
        for manifest in objects:
            manifest["metadata"].pop("ownerReferences", None)  # no owner exists: keep them from the collector
        per_resource.append((plan.cache_key, objects))
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        claim = per_resource[0][1][0]
        index = f"{claim['metadata']['name']}-index"
        list(pool.map(lambda _: client.get("v1", "ConfigMap", namespace, index), per_resource))
        client.apply(claim)
        jobs = {key: objects[1] for key, objects in per_resource}
        list(pool.map(client.apply, jobs.values()))
        batch = k8s.BatchV1Api(api)
        watch_until(
            batch.list_namespaced_job,
            (namespace,),
            lambda body: bool((body.get("status") or {}).get("succeeded")),
            len(jobs),
            "builds",
            600,
        )
        serving = [manifest for _, objects in per_resource for manifest in objects[2:]]
        list(pool.map(client.apply, serving))
    apps = k8s.AppsV1Api(api)
    watch_until(
        apps.list_namespaced_deployment,
        (namespace,),
        lambda body: (body.get("status") or {}).get("availableReplicas") == body["spec"]["replicas"],
        len(resources),
        "floor",
        900,
    )
    return time.monotonic() - started


def release_gpus(core: k8s.CoreV1Api, namespace: str) -> None:
    """Delete the floor's namespace and wait until its pods are gone (they hold the GPUs)."""
    core.delete_namespace(namespace, propagation_policy="Background")
    deadline = time.monotonic() + 300
    while core.list_namespaced_pod(namespace, limit=1).items:
        if time.monotonic() > deadline:
            raise SystemExit(f"the pods of {namespace} were not gone after 300 s")
        time.sleep(0.5)


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def _process_figures(pid: int) -> tuple[float, float]:
    """CPU seconds and peak resident MiB of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    return cpu, peak_kib / 1024


def operator_run(
    cluster: LocalCluster, api: k8s.ApiClient, namespace: str, resources: list[dict[str, Any]], log: Path
) -> dict[str, float]:
    """Run the operator, apply `resources` at once, and time them to Ready; return its figures."""
    metrics_port, health_port = free_port(), free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "MMD_METRICS_PORT": str(metrics_port),
        "MMD_HEALTH_PORT": str(health_port),
        "MMD_WORKERS": str(WORKERS),
        "MMD_NAMESPACES": namespace,
    }
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "mmd_operator"], env=env, stdout=output, stderr=output
        )
    try:
        deadline = time.monotonic() + 60
        while "Operator started" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit(f"the operator did not start; see {log}")
            time.sleep(0.1)
        custom = k8s.CustomObjectsApi(api)
        started = time.monotonic()
        ready: dict[str, Timeline] = {}

        def follow() -> None:
            ready["op"] = watch_until(
                custom.list_namespaced_custom_object,
                (GROUP, VERSION, namespace, PLURAL),
                lambda body: (
                    (body.get("status") or {}).get("phase") == "Ready"
                    and body["status"].get("observedGeneration") == body["metadata"]["generation"]
                ),
                len(resources),
                "operator",
                900,
            )

        follower = threading.Thread(target=follow)
        follower.start()
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            list(
                pool.map(
                    lambda document: custom.patch_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, document["metadata"]["name"],
                        {**document, "metadata": {**document["metadata"], "namespace": namespace}},
                        field_manager="kubectl", force=True, _content_type="application/apply-patch+yaml",
                    ),
                    resources,
                )
            )  # fmt: skip
        follower.join()
        seconds = time.monotonic() - started
        requests = _metric(metrics_port, "mmd_api_requests_total")
        reconciles = _metric(metrics_port, "mmd_reconciles_total")
        cpu, peak = _process_figures(process.pid)
        return {
            "seconds": seconds,
            "api_requests": requests,
            "reconciles": reconciles,
            "requests_per_reconcile": requests / max(reconciles, 1),
            "cpu_seconds": cpu,
            "peak_rss_mib": peak,
        }
    finally:
        process.terminate()
        process.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    """`make bench`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1000", help="N values (comma-separated)")
    parser.add_argument("--short", action="store_true", help="N = 100 only (the harness check in make test)")
    args = parser.parse_args(argv)
    sizes = [100] if args.short else [int(n) for n in args.sizes.split(",")]
    gpus = max(sizes) * 11 // 10 + 64
    pool = NodePool(count=-(-gpus // 8), gpus_per_node=8)
    work = Path(tempfile.mkdtemp(prefix="mmd-bench-"))
    cluster = LocalCluster(work / "cluster", say=say, bind_to_parent=True)
    results = []
    try:
        cluster.up(pool)
        with cluster.api_client() as api:
            extensions = k8s.ApiextensionsV1Api(api)
            extensions.create_custom_resource_definition(crdgen.crd())
            time.sleep(2)
            core = k8s.CoreV1Api(api)
            for n in sizes:
                say(f"==> N = {n}")
                resources = resource_mix(n)
                for kind in ("floor", "op"):
                    core.create_namespace({"metadata": {"name": f"{kind}-{n}"}})
                time.sleep(1)  # the ServiceAccount controller makes `default`
                with cluster.api_client() as floor_api:
                    t_floor = floor(floor_api, f"floor-{n}", resources)
                release_gpus(core, f"floor-{n}")
                figures = operator_run(cluster, api, f"op-{n}", resources, work / f"operator-{n}.log")
                figures = {"n": n, "t_floor": t_floor, "t_op": figures.pop("seconds"), **figures}
                figures["ratio"] = figures["t_op"] / figures["t_floor"]
                results.append(figures)
                say(json.dumps(figures, indent=None))
    finally:
        cluster.down()
    say("\n   N   T_floor     T_op   ratio  req/reconcile  CPU s  peak RSS MiB")
    for row in results:
        say(
            f"{row['n']:>4} {row['t_floor']:8.1f} s {row['t_op']:7.1f} s {row['ratio']:6.2f} "
            f"{row['requests_per_reconcile']:14.2f} {row['cpu_seconds']:6.1f} {row['peak_rss_mib']:13.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
