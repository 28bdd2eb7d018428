"""Real pods through change and disruption, on both runtimes (Triton's llava, trtllm-serve's qwen2_5_vl).

A serving change with one replica and a spare GPU surges the new pod in beside the old one, and the
Service always has a ready endpoint; with none, the rollout goes on in place after `surgeWaitSeconds`,
says so (condition and Event) before the Deployment is told, and the downtime is the new pod's load. A
revision whose pod cannot start (an image that cannot be pulled, or a container that exits at start) is
undone to the last Ready one, held there when the same spec is applied again, and tried once more on the
retry annotation. A drain of a node with a serving pod, with two replicas, loses no request. `make test`
runs each case on one runtime at least (the surge on both); `make rollouts` runs the whole matrix.

A watcher samples, every quarter second, the Service's ready endpoints and the resource's rollout
condition, while a bounded client sends requests to the Service (`mmctl infer` or `mmctl chat`, only to
this cluster's private network). "No spare GPU" is made on one real node: the resource's pods are pinned
to it, and a busybox pod takes every GPU there but the one the serving pod holds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_operator.api.v1alpha1 import GPU_RESOURCE
from mmd_operator.desired import pods as pod_settings
from mmd_operator.judgement import node_silence
from mmd_operator.judgement.revisions import RETRY_ANNOTATION, ROLLED_BACK
from mmd_operator.judgement.rollout import CONDITION, SURGE, SURGE_UNSCHEDULABLE
from mmd_operator.vocabulary import labels
from mmd_testbed.localcluster import addons
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from tests.pods.conftest import OPERATOR_NAMESPACE
from tests.support.kube import Kube, Resources, Tools
from tests.support.pods import example, mmctl_chat, mmctl_infer, service_ip, serving_pods, wait_until

pytestmark = pytest.mark.pods
MAX_REQUESTS = 120
MAX_SECONDS = 240
SAMPLE_SECONDS = 0.25


@dataclass(frozen=True)
class Served:
    """A resource of one runtime, and how a client asks it something through its Service."""

    instance: str
    example: str
    port: int
    ask: Callable[[str, Path], subprocess.CompletedProcess[str]]

    def document(self, **serving: Any) -> dict[str, Any]:
        return example(self.example, serving=serving)


# A connection not made in 2 s is made again, up to 10 times (docs/clients.md): with one dead endpoint of
# two, all 11 tries reach it once in 2,048 requests.
RECONNECTS = ("--connect-timeout", "2", "--connect-retries", "10")
TRITON = Served(
    "llava",
    "llava",
    8001,
    lambda address, picture: mmctl_infer(
        f"grpc://{address}:8001",
        *("--model-type", "llava", "--image", str(picture), "--timeout", "20", *RECONNECTS),
        timeout=60,
    ),
)
TRTLLM_SERVE = Served(
    "qwen2-5-vl",
    "qwen2_5_vl",
    8000,
    lambda address, picture: mmctl_chat(
        f"http://{address}:8000",
        *("--image", str(picture), "--text", "What is this?", "--timeout", "20", *RECONNECTS),
        timeout=60,
    ),
)
RUNTIMES = [pytest.param(TRITON, id="triton"), pytest.param(TRTLLM_SERVE, id="trtllm-serve")]
# `make test` runs each case on one runtime at least (the lost node in a short version) and the surge
# cases on both; `make rollouts` (MMD_ROLLOUTS_ALL=1) runs every case on both runtimes and strategies.
ALL_CASES = os.environ.get("MMD_ROLLOUTS_ALL") == "1"
# Each watched case's timeline (ready endpoints, requests, marks), as docs/rollouts.md shows them.
TIMELINES = Path(__file__).resolve().parents[2] / "out" / "rollouts"


def _cases(always: list[Any], more: list[Any]) -> list[Any]:
    return always + more if ALL_CASES else always


@dataclass
class Watch:
    """What a rollout looked like from outside: samples of (time, ready endpoints, condition reason), and
    the requests (when sent, exit code, last words)."""

    samples: list[tuple[float, int, str]] = field(default_factory=list)
    requests: list[tuple[float, int, str]] = field(default_factory=list)
    # When the requests were sent that reached no server at first and connected again (mmctl said so).
    reconnected: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    # Steps a test names (the change, a canary ready, a node lost), drawn on the timeline.
    marks: dict[str, float] = field(default_factory=dict)

    def plot(self, path: Path, title: str) -> Path:
        """The timeline as a PNG: ready endpoints and the rollout condition's reason over time, and
        every request at its send time, answered or failed, with the marks."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        start = min([at for at, _, _ in self.samples] + [at for at, _, _ in self.requests])
        figure, (endpoints, requests) = plt.subplots(2, 1, sharex=True, figsize=(9, 5))
        endpoints.step(
            [at - start for at, _, _ in self.samples], [n for _, n, _ in self.samples], where="post"
        )
        shown = ""
        for at, _, reason in self.samples:
            if reason != shown:
                endpoints.annotate(reason or "(none)", (at - start, 0), fontsize=7, rotation=90, va="bottom")
                shown = reason
        endpoints.set_ylabel("ready endpoints")
        endpoints.set_ylim(bottom=0)
        endpoints.yaxis.get_major_locator().set_params(integer=True)
        for code, colour, label in ((0, "tab:green", "answered"), (1, "tab:red", "failed")):
            chosen = [at - start for at, answer, _ in self.requests if (answer == 0) == (code == 0)]
            requests.scatter(
                chosen, [code] * len(chosen), s=9, color=colour, label=f"{label} ({len(chosen)})"
            )
        if self.reconnected:
            again = [at - start for at in self.reconnected]
            requests.scatter(again, [0.25] * len(again), s=9, color="tab:orange", label="connected again")
        requests.set_yticks([0, 1], ["answered", "failed"])
        requests.set_ylim(-0.5, 1.5)
        requests.set_xlabel("seconds")
        requests.legend(loc="center right", fontsize=7)
        for name, at in self.marks.items():
            for axis in (endpoints, requests):
                axis.axvline(at - start, color="grey", linestyle="--", linewidth=0.8)
            requests.annotate(name, (at - start, 1.4), fontsize=7, rotation=90, va="top")
        endpoints.set_title(title, fontsize=9)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=80)
        plt.close(figure)
        return path

    def zero_ready(self, since: float) -> list[float]:
        return [at for at, ready, _ in self.samples if at >= since and ready == 0]

    def first_reason(self, reason: str) -> float | None:
        return next((at for at, _, shown in self.samples if shown == reason), None)

    def failed(self) -> list[tuple[float, int, str]]:
        return [request for request in self.requests if request[1] != 0]

    def answered_since(self, since: float, count: int = 2, timeout: float = 60) -> None:
        """Wait until `count` requests sent at or after `since` were answered (a block's last seconds).

        Each request is a whole client process, several seconds on two loaded cores: a rollout that is
        over in ten seconds may otherwise end the block with one request in it.
        """
        wait_until(
            f"{count} answers to requests sent since the change",
            lambda: sum(1 for at, _, _ in self.requests if at >= since) >= count,
            timeout=timeout,
        )

    def unbroken_since(self, since: float, what: str) -> list[tuple[float, int, str]]:
        """Assert a ready endpoint and an answer throughout `what`; return its requests."""
        during = [request for request in self.requests if request[0] >= since]
        assert not self.zero_ready(since), f"a moment without a ready endpoint during {what}"
        assert len(during) >= 2, f"only {len(during)} requests during {what}"
        failed = [request for request in during if request[1] != 0]
        assert not failed, f"{len(failed)} requests failed: {failed[:3]}"
        return during


def test_a_timeline_draws_the_endpoints_the_requests_and_the_marks(tmp_path: Path) -> None:
    """The plot each watched case leaves in out/rollouts (no cluster: recorded figures)."""
    watched = Watch(
        samples=[(100.0 + t / 4, 2 if t < 40 else 1, "Surge" if t < 20 else "") for t in range(80)],
        requests=[(100.0 + t, 0 if t % 7 else 1, "") for t in range(20)],
        marks={"change": 105.0},
    )
    path = watched.plot(tmp_path / "case.png", "a case")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 10_000


def ready_endpoints(kube: Kube, namespace: str, service: str) -> int:
    slices = k8s.DiscoveryV1Api(kube.core.api_client).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return sum(
        1
        for endpoint_slice in slices.items
        for endpoint in endpoint_slice.endpoints or []
        if endpoint.conditions is not None and endpoint.conditions.ready
    )


def rollout_reason(resources: Resources, name: str) -> str:
    conditions = (resources.get(name).get("status") or {}).get("conditions", [])
    return next((c["reason"] for c in conditions if c["type"] == CONDITION), "")


@contextlib.contextmanager
def watching(
    served: Served,
    kube: Kube,
    resources: Resources,
    namespace: str,
    picture: Path,
    clients: int = 1,
    max_requests: int = MAX_REQUESTS,
    pace_seconds: float = 0.0,
) -> Iterator[Watch]:
    """Watch `served` once it is Ready: the sampler and `clients` clients run until the block ends, or
    `max_requests` were sent, or `MAX_SECONDS` passed. A client starts a request at most every
    `pace_seconds`, so a fast server does not spend the requests before the block's end."""
    name = served.instance
    resources.wait_phase(name, "Ready", timeout=240)
    address = service_ip(kube, namespace, name)
    watched = Watch()

    def sample() -> None:
        started = time.monotonic()
        while not watched.stop.is_set() and time.monotonic() - started < MAX_SECONDS:
            # Endpoints first: a condition seen after a zero was written before it.
            ready = ready_endpoints(kube, namespace, name)
            watched.samples.append((time.monotonic(), ready, rollout_reason(resources, name)))
            time.sleep(SAMPLE_SECONDS)

    def send() -> None:
        started = time.monotonic()
        while (
            not watched.stop.is_set()
            and len(watched.requests) < max_requests
            and time.monotonic() - started < MAX_SECONDS
        ):
            sent = time.monotonic()
            try:
                answer = served.ask(address, picture)
            except subprocess.TimeoutExpired as expired:  # a connection to a dead address hangs
                watched.requests.append((sent, -1, f"no answer in {expired.timeout:.0f} s"))
                continue
            watched.requests.append((sent, answer.returncode, answer.stderr.strip()[-300:]))
            if "trying again" in answer.stderr:
                watched.reconnected.append(sent)
            watched.stop.wait(max(0.0, sent + pace_seconds - time.monotonic()))

    threads = [threading.Thread(target=target, daemon=True) for target in (sample, *[send] * clients)]
    for thread in threads:
        thread.start()
    # A first answer: the Service's rules may reach the nodes a moment after the resource says Ready.
    wait_until(
        "a first answer and samples",
        lambda: any(code == 0 for _, code, _ in watched.requests) and watched.samples,
        timeout=60,
    )
    try:
        yield watched
    finally:
        watched.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        case = os.environ.get("PYTEST_CURRENT_TEST", name).split("::")[-1].split(" ")[0]
        watched.plot(TIMELINES / f"{case}.png", f"{case} ({name})")


def _change_and_wait(
    resources: Resources, kube: Kube, namespace: str, name: str, document: dict[str, Any]
) -> float:
    """Apply `document`; wait until its pod replaced the old one and the resource is Ready; return when."""
    old = {pod.metadata.name for pod in serving_pods(kube, namespace, name)}
    changed = time.monotonic()
    resources.apply(document)

    def replaced() -> bool:
        pods = serving_pods(kube, namespace, name)
        return len(pods) == 1 and not old & {pod.metadata.name for pod in pods}

    wait_until("the old pod to be replaced", replaced, timeout=240)
    resources.wait_phase(name, "Ready", timeout=240)
    return changed


@pytest.mark.parametrize("served", RUNTIMES)
def test_a_serving_change_with_a_spare_gpu_surges_and_keeps_a_ready_endpoint_throughout(
    served: Served, resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    name = served.instance
    resources.apply(served.document())
    with watching(served, kube, resources, namespace, picture) as watched:
        strategy = kube.apps.read_namespaced_deployment(name, namespace).spec.strategy.rolling_update
        assert (strategy.max_surge, strategy.max_unavailable) == (1, 0)
        document = served.document(kvCacheFreeGpuMemFraction=0.8)
        changed = _change_and_wait(resources, kube, namespace, name, document)
        watched.marks["change"] = changed
        ready_again = time.monotonic() - changed
        watched.answered_since(changed)
    assert rollout_reason(resources, name) == SURGE
    during = watched.unbroken_since(changed, "a surge rollout")
    print(
        f"\n{name}: surge, 1 replica, spare GPU: Ready {ready_again:.1f} s after the change, {len(during)} "
        f"requests during it, 0 failed, never 0 ready endpoints ({len(watched.samples)} samples)"
    )


def _busybox() -> str:
    return addons.image_names(ensure_node_binaries(Layout.discover(), say=print))["busybox"]


def free_gpus(kube: Kube, node: str) -> int:
    """Allocatable GPUs of `node` less what its unfinished pods request (a terminating pod still holds)."""
    allocatable = int(kube.core.read_node(node).status.allocatable.get(GPU_RESOURCE, "0"))
    pods = kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    held = 0
    for pod in pods:
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        for container in pod.spec.containers:
            limits = (container.resources.limits or {}) if container.resources else {}
            held += int(limits.get(GPU_RESOURCE, "0"))
    return allocatable - held


def gpu_filler(kube: Kube, namespace: str, node: str, gpus: int, name: str = "gpu-filler") -> None:
    """A busybox pod on `node` holding `gpus` GPUs, `restricted`."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "securityContext": pod_settings.pod_security_context(),
            "containers": [
                {
                    "name": "hold",
                    "image": _busybox(),
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                    "securityContext": pod_settings.container_security_context(),
                }
            ],
        },
    }
    kube.core.create_namespaced_pod(namespace, body)


def pod_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def no_pod_stopping(kube: Kube, node: str) -> bool:
    """No pod on `node` is terminating (its GPUs would come free during the test)."""
    pods = kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return not any(pod.metadata.deletion_timestamp for pod in pods)


@pytest.mark.parametrize(
    "served", _cases([pytest.param(TRITON, id="triton")], [pytest.param(TRTLLM_SERVE, id="trtllm-serve")])
)
def test_with_no_spare_gpu_the_rollout_says_it_goes_in_place_first_and_is_down_for_one_load(
    served: Served, resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    name = served.instance
    node = sorted(n.metadata.name for n in kube.core.list_node().items)[0]
    pinned = {"pod": {"nodeSelector": {"kubernetes.io/hostname": node}}, "rollout": {"surgeWaitSeconds": 5}}
    resources.apply(served.document(**pinned))
    resources.wait_phase(name, "Ready", timeout=240)
    wait_until(f"no pod terminating on {node}", lambda: no_pod_stopping(kube, node), timeout=120)
    gpu_filler(kube, namespace, node, free_gpus(kube, node))
    wait_until(
        "the GPU filler to run",
        lambda: kube.core.read_namespaced_pod("gpu-filler", namespace).status.phase == "Running",
        timeout=60,
    )
    (old,) = serving_pods(kube, namespace, name)
    with watching(served, kube, resources, namespace, picture) as watched:
        document = served.document(**pinned, kvCacheFreeGpuMemFraction=0.8)
        changed = _change_and_wait(resources, kube, namespace, name, document)
        watched.marks["change"] = changed
        ready_again = time.monotonic() - changed
        time.sleep(2)

    said = watched.first_reason(SURGE_UNSCHEDULABLE)
    down = watched.zero_ready(changed)
    assert said is not None, "the status never said the rollout goes on in place"
    assert down, "no moment without a ready endpoint: was there a spare GPU after all?"
    assert said <= down[0], f"the status said it {said - down[0]:.2f} s after the pod went"
    rolling = [event.message for event in kube.events_about(namespace, name, "RollingInPlace")]
    assert len(rolling) == 1 and f"pod {old.metadata.name} stops before its replacement loads" in rolling[0]
    assert f"offer 8 ({node} 8)" in rolling[0] and "Insufficient nvidia.com/gpu" in rolling[0], rolling[0]
    assert rollout_reason(resources, name) == SURGE  # the next change surges again
    strategy = kube.apps.read_namespaced_deployment(name, namespace).spec.strategy.rolling_update
    assert (strategy.max_surge, strategy.max_unavailable) == (1, 0)
    downtime = down[-1] - down[0] + SAMPLE_SECONDS
    failed = [r for r in watched.failed() if r[0] >= changed]
    during = [r for r in watched.requests if r[0] >= changed]
    print(
        f"\n{name}: in place, 1 replica, no spare GPU: said {said - changed:.1f} s after the change "
        f"({down[0] - said:.1f} s before the pod went), no ready endpoint for {downtime:.1f} s, "
        f"Ready {ready_again:.1f} s after the change; {len(during)} requests during it, {len(failed)} failed"
    )


BAD_IMAGE = "registry.invalid/mmd/no-such-server:0"


def _undone(status: dict[str, Any]) -> bool:
    ready: dict[str, Any] = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    return ready.get("reason") == ROLLED_BACK and bool(status.get("rollback"))


def _only_the_stable_pods(kube: Kube, namespace: str, name: str, stable_hash: str) -> bool:
    pods = serving_pods(kube, namespace, name)
    return bool(pods) and all(
        pod.metadata.labels.get(labels.DEPLOYMENT_REVISION) == stable_hash and pod.status.phase == "Running"
        for pod in pods
    )


@pytest.mark.parametrize(
    ("served", "strategy"),
    _cases(
        [
            pytest.param(TRITON, "InPlace", id="triton-InPlace"),
            pytest.param(TRTLLM_SERVE, "SurgeWhenPossible", id="trtllm-serve-SurgeWhenPossible"),
        ],
        [
            pytest.param(TRITON, "SurgeWhenPossible", id="triton-SurgeWhenPossible"),
            pytest.param(TRTLLM_SERVE, "InPlace", id="trtllm-serve-InPlace"),
        ],
    ),
)
def test_a_revision_that_cannot_start_is_undone_to_the_last_ready_one_and_held(
    served: Served, strategy: str, resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    name = served.instance
    rollout = {"rollout": {"strategy": strategy}}
    resources.apply(served.document(**rollout))
    ready = resources.wait_phase(
        name, "Ready", timeout=240, status_also=lambda s: bool(s.get("stableRevision"))
    )
    stable = ready["status"]["stableRevision"]["podTemplateHash"]
    bad = served.document(**rollout, image=BAD_IMAGE)
    with watching(served, kube, resources, namespace, picture) as watched:
        changed = watched.marks["change"] = time.monotonic()
        resources.apply(bad)
        degraded = resources.wait_phase(name, "Degraded", timeout=180, status_also=_undone)
        undone_after = time.monotonic() - changed
        alone = functools.partial(_only_the_stable_pods, kube, namespace, name, stable)
        wait_until("the stable pod alone", alone, 240)
        resources.wait_phase(name, "Degraded", timeout=240, status_also=lambda s: s.get("readyReplicas") == 1)
        serving_again = time.monotonic() - changed
        time.sleep(2)

    rollback = degraded["status"]["rollback"]
    message = rollback["message"]
    assert message.startswith(
        f"revision {rollback['failed']} did not start: pod {name}-{rollback['failed']}-"
    )
    assert "ErrImagePull" in message or "ImagePullBackOff" in message, message
    assert f"rolled back to revision {stable}" in message
    assert degraded["status"]["stableRevision"]["podTemplateHash"] == stable
    template = kube.apps.read_namespaced_deployment(name, namespace).spec.template
    assert BAD_IMAGE not in [c.image for c in template.spec.containers]
    assert [e.message for e in kube.events_about(namespace, name, ROLLED_BACK)] == [message]

    # Held: the same spec again changes nothing; the retry annotation tries the revision once more.
    resources.apply(bad)
    time.sleep(3)
    assert resources.get(name)["status"]["rollback"] == rollback
    bad["metadata"]["annotations"] = {RETRY_ANNOTATION: "1"}
    resources.apply(bad)
    again = resources.wait_phase(
        name, "Degraded", timeout=180, status_also=lambda s: _undone(s) and s["rollback"].get("retry") == "1"
    )
    assert again["status"]["rollback"]["failed"] == rollback["failed"]
    wait_until(
        "the stable pod alone again", lambda: _only_the_stable_pods(kube, namespace, name, stable), 240
    )

    during = [r for r in watched.requests if r[0] >= changed]
    failed = [r for r in watched.failed() if r[0] >= changed]
    down = watched.zero_ready(changed)
    downtime = (down[-1] - down[0] + SAMPLE_SECONDS) if down else 0.0
    if strategy == "SurgeWhenPossible":
        assert not down and not failed, f"{len(failed)} failed, {len(down)} samples without a ready endpoint"
    print(
        f"\n{name}: {strategy}, a revision that cannot start (image pull): undone {undone_after:.1f} s after "
        f"the change, the stable pod serving alone {serving_again:.1f} s after it; {len(during)} requests, "
        f"{len(failed)} failed, no ready endpoint for {downtime:.1f} s; held on re-apply, retried once on "
        "the annotation and undone again"
    )


@pytest.mark.parametrize(
    "served", _cases([pytest.param(TRITON, id="triton")], [pytest.param(TRTLLM_SERVE, id="trtllm-serve")])
)
def test_a_drain_of_a_node_with_a_serving_pod_loses_no_request_with_two_replicas(
    served: Served, resources: Resources, kube: Kube, tools: Tools, namespace: str, picture: Path
) -> None:
    """The disruption budget lets the drain take one serving pod at a time; the other serves meanwhile."""
    name = served.instance
    resources.apply(served.document(replicas=2))
    resources.wait_phase(name, "Ready", timeout=240)
    budget = k8s.PolicyV1Api(kube.core.api_client).read_namespaced_pod_disruption_budget(name, namespace)
    assert budget.spec is not None and budget.spec.max_unavailable == 1
    node = serving_pods(kube, namespace, name)[0].spec.node_name
    drained_pods = {p.metadata.name for p in serving_pods(kube, namespace, name) if p.spec.node_name == node}
    selector = f"app.kubernetes.io/instance={name}"
    try:
        with watching(served, kube, resources, namespace, picture) as watched:
            started = watched.marks["drain"] = time.monotonic()
            tools.run(
                "kubectl", "drain", node, "--pod-selector", selector, "--delete-emptydir-data",
                "--ignore-daemonsets", "--timeout", "240s", timeout=300,
            )  # fmt: skip
            drained = time.monotonic() - started

            def moved() -> bool:
                pods = serving_pods(kube, namespace, name)
                ready = [p for p in pods if pod_ready(p)]
                return len(ready) == 2 and not drained_pods & {p.metadata.name for p in pods}

            wait_until("two ready pods off the drained node", moved, timeout=240)
            recovered = time.monotonic() - started
            watched.answered_since(started)
    finally:
        tools.run("kubectl", "uncordon", node, check=False)
    during = watched.unbroken_since(started, "the drain")
    print(
        f"\n{name}: drain of {node} ({len(drained_pods)} of 2 serving pods on it): drained in "
        f"{drained:.1f} s, 2 ready pods again {recovered:.1f} s after it began; {len(during)} requests, "
        "0 failed"
    )


def test_a_revision_whose_container_exits_at_start_is_undone_while_the_old_pod_serves(
    resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    """A serving change naming model code the image does not hold: the repository's assembly exits 1 at
    every start (CrashLoopBackOff), and the surge's old pod serves until the revision is undone."""
    served = TRITON
    name = served.instance
    resources.apply(served.document())
    ready = resources.wait_phase(
        name, "Ready", timeout=240, status_also=lambda s: bool(s.get("stableRevision"))
    )
    stable = ready["status"]["stableRevision"]["podTemplateHash"]
    with watching(served, kube, resources, namespace, picture) as watched:
        changed = watched.marks["change"] = time.monotonic()
        resources.apply(served.document(modelCodePath="/no/such/model/code"))
        degraded = resources.wait_phase(name, "Degraded", timeout=240, status_also=_undone)
        undone_after = time.monotonic() - changed
        alone = functools.partial(_only_the_stable_pods, kube, namespace, name, stable)
        wait_until("the stable pod alone", alone, 240)
        watched.answered_since(changed)
    message = degraded["status"]["rollback"]["message"]
    assert "is in CrashLoopBackOff" in message and "exit code 1" in message, message
    assert f"rolled back to revision {stable}" in message
    during = watched.unbroken_since(changed, "a revision that exits at start")
    print(
        f"\n{name}: a revision whose container exits at start: undone {undone_after:.1f} s after the change "
        f"(the kubelet's back-off first); {len(during)} requests, 0 failed, never 0 ready endpoints"
    )


# A target no load here reaches: the autoscaler holds its minimum throughout the change.
STEADY_AUTOSCALING = {
    "minReplicas": 2,
    "maxReplicas": 3,
    "metric": {"name": "QueueTimePerRequest", "target": 60000},
}


@pytest.mark.parametrize(
    "served", _cases([pytest.param(TRITON, id="triton")], [pytest.param(TRTLLM_SERVE, id="trtllm-serve")])
)
def test_with_the_autoscaler_a_change_surges_one_pod_above_its_replicas_and_leaves_them_to_it(
    served: Served,
    resources: Resources,
    kube: Kube,
    namespace: str,
    picture: Path,
    real_cluster: LocalCluster,
) -> None:
    """The HorizontalPodAutoscaler owns `replicas` (2 here): a change surges one pod above them, never
    writes them, and the autoscaler's wish is unchanged after it."""
    real_cluster.start_metrics()
    name = served.instance
    resources.apply(served.document(autoscaling=STEADY_AUTOSCALING))

    def two_ready() -> bool:
        return sum(1 for pod in serving_pods(kube, namespace, name) if pod_ready(pod)) == 2

    wait_until("the autoscaler's two ready pods", two_ready, timeout=240)
    resources.wait_phase(name, "Ready", timeout=120)
    scaling = k8s.AutoscalingV2Api(kube.core.api_client)
    old = {pod.metadata.labels.get(labels.DEPLOYMENT_REVISION) for pod in serving_pods(kube, namespace, name)}
    seen: list[tuple[int, int | None, int | None]] = []  # (pods, HPA's desired, Deployment's replicas)
    with watching(served, kube, resources, namespace, picture) as watched:
        changed = watched.marks["change"] = time.monotonic()
        resources.apply(served.document(autoscaling=STEADY_AUTOSCALING, kvCacheFreeGpuMemFraction=0.8))

        def rolled() -> bool:
            pods = serving_pods(kube, namespace, name)
            hpa = scaling.read_namespaced_horizontal_pod_autoscaler(name, namespace)
            replicas = kube.apps.read_namespaced_deployment(name, namespace).spec.replicas
            seen.append((len(pods), hpa.status.desired_replicas, replicas))
            hashes = {pod.metadata.labels.get(labels.DEPLOYMENT_REVISION) for pod in pods}
            return len(pods) == 2 and not hashes & old and all(pod_ready(pod) for pod in pods)

        wait_until("both pods replaced", rolled, timeout=300, interval=0.5)
        resources.wait_phase(name, "Ready", timeout=120)
        ready_again = time.monotonic() - changed
        watched.answered_since(changed)
    during = watched.unbroken_since(changed, "a surge under the autoscaler")
    assert max(pods for pods, _, _ in seen) <= 3, seen  # two replicas and one surge pod at most
    assert {desired for _, desired, _ in seen} == {2} and {replicas for _, _, replicas in seen} == {2}, seen
    print(
        f"\n{name}: surge under the autoscaler (2 replicas it owns): Ready {ready_again:.1f} s after the "
        f"change, at most {max(p for p, _, _ in seen)} pods, the autoscaler's wish 2 throughout; "
        f"{len(during)} requests, 0 failed, never 0 ready endpoints"
    )


@pytest.mark.parametrize(
    "served", _cases([pytest.param(TRITON, id="triton")], [pytest.param(TRTLLM_SERVE, id="trtllm-serve")])
)
def test_a_lost_node_costs_only_the_requests_in_flight_on_it(
    served: Served,
    resources: Resources,
    kube: Kube,
    namespace: str,
    picture: Path,
    real_cluster: LocalCluster,
) -> None:
    """Two replicas; the node of one of them loses power (its kubelet, containerd and containers
    SIGKILLed). Its Lease falls silent, and the operator (lostNodeSeconds, 20 s by default) marks the
    pod not ready long before the node controller would (120 s here): the resource says NodeLost
    (Degraded) and the Service stops sending to the dead pod. Until then a new connection to it is
    never made, and the client makes it again (mmctl's reconnects): only the requests the dead pod held
    when it died fail.
    The resource is Ready again once the replacement runs on the other node; the node comes back
    afterwards. `make test`'s short version brings the node back once the pod is marked (its kubelet
    writes the pod's real readiness back) rather than wait for the node controller's eviction."""
    name = served.instance
    # One pod per node while it can be, as a user who plans for node loss asks (the scheduler may put
    # both on one); preferred, so the replacement may join the other on the node left.
    term = {
        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": name}},
        "topologyKey": "kubernetes.io/hostname",
    }
    apart = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }
    resources.apply(served.document(replicas=2, pod={"affinity": apart}))
    resources.wait_phase(name, "Ready", timeout=240)
    # Not the operator's node: this test watches what the operator says while the node is gone.
    operator_nodes = {pod.spec.node_name for pod in kube.core.list_namespaced_pod(OPERATOR_NAMESPACE).items}
    candidates = [p.spec.node_name for p in serving_pods(kube, namespace, name)]
    node = next((n for n in candidates if n not in operator_nodes), None)
    assert node is not None, f"both serving pods share the operator's node {operator_nodes}"
    on_node = {p.metadata.name for p in serving_pods(kube, namespace, name) if p.spec.node_name == node}
    revived = False
    try:
        # Two clients: one may wait out its timeout on a request the dead pod held while the other goes on.
        with watching(served, kube, resources, namespace, picture, clients=2) as watched:
            lost = watched.marks["node lost"] = time.monotonic()
            real_cluster.lose_node(node)
            # Its pod may take a request while its processes are being killed: in flight until here.
            gone = time.monotonic()
            degraded = resources.wait_phase(name, "Degraded", timeout=240)
            said = time.monotonic() - lost
            watched.marks["NodeLost"] = lost + said
            (marked,) = on_node
            marked_ready = next(
                c
                for c in kube.core.read_namespaced_pod(marked, namespace).status.conditions
                if c.type == "Ready"
            )

            def moved() -> bool:
                pods = serving_pods(kube, namespace, name)
                ready = [p for p in pods if pod_ready(p) and p.spec.node_name != node]
                return len(ready) == 2 and not on_node & {p.metadata.name for p in pods}

            if ALL_CASES:
                wait_until("two ready pods off the lost node", moved, timeout=240)
                how = f"two ready pods elsewhere after {time.monotonic() - lost:.1f} s"
            else:
                time.sleep(5)  # requests sent after the mark
                real_cluster.revive_node(node)
                revived = True
                how = f"node back after {time.monotonic() - lost:.1f} s"
            resources.wait_phase(name, "Ready", timeout=120)
            ready_again = time.monotonic() - lost
            time.sleep(2)
    finally:
        if not revived:
            real_cluster.revive_node(node)

        def back() -> bool:  # the add-ons there too (Prometheus, the Hub double, CoreDNS), for later tests
            pods = kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            return all(pod_ready(p) for p in pods if p.status.phase not in ("Succeeded", "Failed"))

        wait_until(f"every pod on {node} ready again", back, timeout=180)
    ready = next(c for c in degraded["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NodeLost" and f"its node {node} stopped reporting" in ready["message"], ready
    # The operator's mark, not the node controller's (which comes after its 120 s grace period).
    assert (marked_ready.status, marked_ready.reason) == ("False", node_silence.REASON), marked_ready
    assert said < 60, f"NodeLost only {said:.1f} s after the node died"
    dropped = next(at for at, ready, _ in watched.samples if at >= lost and ready < 2) - lost
    # Requests sent before the node was gone that had not been answered: the ones it may have held.
    in_flight = [r for r in watched.requests if r[0] < gone and r[1] != 0]
    since = [r for r in watched.requests if r[0] >= gone]
    late = [(round(r[0] - lost, 1), r[2][-80:]) for r in since if r[1] != 0]
    assert not late, f"sent after the node was gone (the Service dropped its pod at {dropped:.1f} s): {late}"
    reconnected = [at for at in watched.reconnected if at >= gone]
    assert not watched.zero_ready(lost), "a moment without a ready endpoint"
    print(
        f"\n{name}: lost {node} ({len(on_node)} of 2 serving pods on it): out of the Service after "
        f"{dropped:.1f} s, Degraded (NodeLost) after {said:.1f} s, {how}, Ready after "
        f"{ready_again:.1f} s; {len(since)} requests since, 0 failed, {len(reconnected)} of them connected "
        f"again, the last sent {max((at - lost for at in reconnected), default=0):.1f} s after the loss; "
        f"{len(in_flight)} in flight at the loss failed"
    )
