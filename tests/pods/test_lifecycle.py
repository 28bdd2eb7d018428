"""Real pods through their life: a serving-only change rolls them, a hung server is restarted by its liveness
probe, a slow engine load is carried by the startup probe, and a build killed mid-write exposes nothing.

Faults are what a node would see: a hung tritonserver is SIGSTOPped (its health endpoints stop answering,
so the kubelet's probes time out), a builder is SIGKILLed (as the OOM killer does), both from this host,
which is the nodes' kernel. Slowness is a property of the (fake) weights: a model on a claim whose
`config.json` carries `mmd_double` knobs makes the build doubles slower per tool and the engine double
slower to load (testbed/mmd_testbed/build_tools/trtllm_tools.py, mmd_testbed.triton.doubles.image).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_operator.vocabulary import labels
from mmd_testbed.build_tools.trtllm_tools import write_model_repo
from tests.support.kube import Kube, Resources, Tools, new_namespace
from tests.support.pods import (
    container_processes,
    example,
    llava_requests,
    manifest,
    service_ip,
    serving_pods,
    signal_processes,
    volume_directory,
    wait_until,
)

pytestmark = pytest.mark.pods
# Bounds of the request loop that watches a rollout (requests only to this cluster's Service).
MAX_REQUESTS = 150
MAX_SECONDS = 180


def weights_on_a_claim(kube: Kube, namespace: str, **knobs: float) -> dict[str, Any]:
    """A claim holding a (fake) LLaVA checkpoint whose config carries `knobs`; the model source naming it."""
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "weights"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    kube.wait_for(
        "the weights claim to bind",
        lambda: (
            kube.core.read_namespaced_persistent_volume_claim("weights", namespace).status.phase == "Bound"
        ),
    )
    model = volume_directory(kube, namespace, "weights") / "llava-1.5-7b"
    write_model_repo(model, "pvc/llava-1.5-7b")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "mmd_double": knobs}))
    return {"source": {"pvc": {"claimName": "weights", "path": "llava-1.5-7b"}}}


@dataclass(frozen=True)
class Started:
    """A resource applied in a namespace of its own when the module starts, and when."""

    namespace: str
    resources: Resources
    applied: float


LOAD_SECONDS = 20
# Liveness gives up after one failed probe (10 s period, 2 s timeout); the startup budget is 120 s.
IMPATIENT_LIVENESS = {"livenessFailureThreshold": 1, "livenessTimeoutSeconds": 2}


@pytest.fixture(scope="module", autouse=True)
def started(api_client: Any, kube: Kube, operator_release: dict[str, Any]) -> Iterator[dict[str, Started]]:
    """The slow-loading and the soon-to-hang deployments, applied at once: their waits overlap the tests."""
    custom = k8s.CustomObjectsApi(api_client)
    found = {}
    for scenario in ("slow-load", "hung-server"):
        namespace = new_namespace(kube, scenario)
        resources = Resources(kube=kube, custom=custom, namespace=namespace)
        if scenario == "slow-load":
            source = weights_on_a_claim(kube, namespace, load_seconds=LOAD_SECONDS)
            probes = {"startupTimeoutSeconds": 120, **IMPATIENT_LIVENESS}
            resources.apply(example("llava", model=source, serving={"probes": probes}))
        else:
            resources.apply(example("llava", serving={"probes": IMPATIENT_LIVENESS}))
        found[scenario] = Started(namespace, resources, time.monotonic())
    yield found
    for scenario in found.values():
        kube.core.delete_namespace(scenario.namespace, propagation_policy="Background")


def test_a_serving_only_change_rolls_real_pods_while_the_service_keeps_answering(
    resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    resources.apply(example("llava", serving={"replicas": 2}))
    resources.wait_phase("llava", "Ready", timeout=240)
    url = f"grpc://{service_ip(kube, namespace, 'llava')}:8001"
    before = serving_pods(kube, namespace, "llava")
    old = {pod.metadata.name for pod in before}
    old_repository = {pod.metadata.annotations[labels.REPOSITORY] for pod in before}
    assert len(old) == 2 and len(old_repository) == 1

    def replaced() -> list[Any]:
        pods = serving_pods(kube, namespace, "llava")
        return pods if len(pods) == 2 and not old & {pod.metadata.name for pod in pods} else []

    with llava_requests(url, picture, max_requests=MAX_REQUESTS, max_seconds=MAX_SECONDS) as results:
        wait_until("a few answers before the change", lambda: len(results) >= 3, timeout=60)
        changed = time.monotonic()
        resources.apply(example("llava", serving={"replicas": 2, "kvCacheFreeGpuMemFraction": 0.8}))
        resources.wait_phase("llava", "Ready", timeout=240)
        pods = wait_until("the old pods to be replaced", replaced, timeout=120)
        rolled = time.monotonic() - changed
        time.sleep(2)
    repositories = {pod.metadata.annotations[labels.REPOSITORY] for pod in pods}
    assert len(repositories) == 1 and repositories != old_repository
    during = [result for result in results if result[0] >= changed]
    failed = [result for result in results if result[1] != 0]
    # Requests must span the rollout: several during it, and one answered once the old pods were gone
    # (each is a whole `mmctl infer` process, a few seconds apiece on two loaded cores).
    assert len(during) >= 3, f"only {len(during)} requests during the rollout"
    assert max(at for at, _, _ in during) >= changed + rolled, "no request after the old pods were replaced"
    assert not failed, f"{len(failed)} of {len(results)} requests failed during the rollout: {failed[:3]}"
    print(f"\nrollout of 2 real pods: {rolled:.1f} s, {len(during)} requests during it, none failed")


def test_a_hung_server_is_restarted_by_its_liveness_probe_and_the_status_says_so(
    started: dict[str, Started], kube: Kube
) -> None:
    namespace, resources = started["hung-server"].namespace, started["hung-server"].resources
    resources.wait_phase("llava", "Ready", timeout=240)
    (pod,) = serving_pods(kube, namespace, "llava")
    server = [p for p in container_processes(pod.metadata.uid) if p.argv[0].endswith("/bin/tritonserver")]
    assert len(server) == 1, server
    hung = time.monotonic()
    signal_processes(server, signal.SIGSTOP)
    degraded = resources.wait_phase("llava", "Degraded", timeout=120)
    noticed = time.monotonic() - hung
    ready = resources.condition("llava", "Ready")
    assert ready["status"] == "False" and ready["reason"] in ("PodsNotReady", "CrashLoop"), ready

    def restarted() -> Any:
        current = kube.core.read_namespaced_pod(pod.metadata.name, namespace)
        status = current.status.container_statuses[0]
        return status.restart_count >= 1 and status.ready and current

    current = wait_until("the server container to restart and be ready", restarted, timeout=180)
    resources.wait_phase("llava", "Ready", timeout=60)
    recovered = time.monotonic() - hung
    events = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod.metadata.name}"
    ).items
    assert any("failed liveness probe" in (event.message or "") for event in events), [
        e.message for e in events
    ]
    assert current.metadata.uid == pod.metadata.uid  # the same pod: the kubelet restarted its container
    print(
        f"\nhung server: Degraded after {noticed:.1f} s ({degraded['status']['phase']}), "
        f"restarted and Ready after {recovered:.1f} s"
    )


def test_a_slow_engine_load_is_carried_by_the_startup_probe_not_killed_by_liveness(
    started: dict[str, Started], kube: Kube
) -> None:
    namespace, resources = started["slow-load"].namespace, started["slow-load"].resources
    resources.wait_phase("llava", "Ready", timeout=240)
    (pod,) = serving_pods(kube, namespace, "llava")
    status = pod.status.container_statuses[0]
    assert status.restart_count == 0
    ready_at = next(c.last_transition_time for c in pod.status.conditions if c.type == "Ready")
    loading = (ready_at - status.state.running.started_at).total_seconds()
    assert loading >= LOAD_SECONDS, loading
    events = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod.metadata.name}"
    )
    messages = [event.message or "" for event in events.items]
    assert any("Startup probe failed" in message for message in messages), messages
    assert not any("failed liveness probe" in message or "Killing" in message for message in messages)
    print(f"\nslow load: {loading:.0f} s from container start to Ready, startup probe only, no restart")


def test_a_build_pod_killed_while_writing_never_exposes_a_partial_engine(
    resources: Resources, kube: Kube, tools: Tools, namespace: str
) -> None:
    source = weights_on_a_claim(kube, namespace, seconds_per_tool=3)
    resources.apply(example("llava", model=source, build={"backoffLimit": 1}))
    key = wait_until(
        "a cacheKey",
        lambda: (resources.get("llava").get("status") or {}).get("engine", {}).get("cacheKey"),
        60,
    )
    cache = wait_until("the engine cache volume", lambda: _cache_directory(kube, namespace), timeout=60)
    seen_partial: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        # Whatever appears under its final name must be complete: a manifest and every file it lists.
        while not stop.is_set():
            entry = cache / key
            if entry.exists():
                try:
                    files = manifest(entry)["files"]
                except (OSError, ValueError) as error:
                    seen_partial.append(f"{entry}: {error}")
                else:
                    seen_partial.extend(f"{entry / name}" for name in files if not (entry / name).is_file())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def writing_builder() -> Any:
        for pod in kube.core.list_namespaced_pod(namespace, label_selector=f"{labels.CACHE_KEY}={key}").items:
            if pod.status.phase != "Running":
                continue
            processes = container_processes(pod.metadata.uid)
            # The tool is a script: python3 runs it, with its path as the first argument.
            if any(arg.endswith("/trtllm-build") for p in processes for arg in p.argv[:2]):
                return pod, [p for p in processes if "engine_builder" in " ".join(p.argv)]
        return None

    pod, builder = wait_until("the builder to run trtllm-build", writing_builder, timeout=120, interval=0.2)
    assert resources.get("llava")["status"]["phase"] == "Building"
    signal_processes(builder, signal.SIGKILL)
    terminated = wait_until(
        "the killed build pod to fail", lambda: _terminated(kube, namespace, pod), timeout=60
    )
    assert terminated.exit_code == 137, terminated
    assert not (cache / key).exists()
    assert not kube.apps.list_namespaced_deployment(namespace).items  # nothing serves a missing engine
    resources.wait_phase("llava", "Ready", timeout=240)
    stop.set()
    watcher.join(timeout=10)
    assert not seen_partial, seen_partial[:5]
    assert manifest(cache / key)["cache_key"] == key
    job = kube.batch.read_namespaced_job(resources.get("llava")["status"]["engine"]["job"], namespace)
    assert job.status.failed == 1 and job.status.succeeded == 1
    print(f"\nbuild pod killed mid-write (exit {terminated.exit_code}); retried, nothing partial seen")


def _terminated(kube: Kube, namespace: str, pod: Any) -> Any:
    statuses = kube.core.read_namespaced_pod(pod.metadata.name, namespace).status.container_statuses or []
    return statuses[0].state.terminated if statuses else None


def _cache_directory(kube: Kube, namespace: str) -> Path | None:
    claims = kube.core.list_namespaced_persistent_volume_claim(namespace).items
    for claim in claims:
        if claim.metadata.name == "mmd-engine-cache" and claim.status.phase == "Bound":
            return volume_directory(kube, namespace, claim.metadata.name)
    return None
