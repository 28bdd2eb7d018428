"""Canary rollouts on real pods, both runtimes, judged on the real Prometheus's figures, under load.

The stable revision serves a (fake) checkpoint from a claim (Triton: a LLaVA checkpoint its engine is
built from; trtllm-serve: a Qwen2.5-VL snapshot) whose doubles take `PER_REQUEST` seconds a request. A
change starts one canary pod beside it, behind the same Service, and the operator judges it on Prometheus
(the local cluster's, which scrapes the serving pods): a serving-only change passes and is promoted with
no request lost; a new checkpoint whose double fails half its requests (`fail_share`; Triton only, as
TensorRT-LLM 1.2.1 counts no failures), or takes five times as long (`seconds_per_request`), is rolled
back while the stable pod serves on. A watcher samples the Service's ready endpoints and a bounded client
sends requests through it throughout (`test_rollouts.watching`); the operator is also killed
mid-analysis, and a new checkpoint rolled in with SurgeWhenPossible (no canary). `make test` runs each
case on one runtime (the failing canary and the killed operator on Triton, the rest on trtllm-serve);
`make rollouts` runs every case on both.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmarks.autoscale_proof import weights_on_a_claim
from mmd_operator.judgement.revisions import ROLLED_BACK
from mmd_operator.knowledge import ModelType
from mmd_operator.vocabulary import labels, names
from mmd_testbed.build_tools.trtllm_tools import write_model_repo
from mmd_testbed.localcluster import images
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.hub import synthetic_snapshot
from tests.pods.conftest import OPERATOR_NAMESPACE
from tests.pods.test_rollouts import TRITON, TRTLLM_SERVE, Served, Watch, _cases, watching
from tests.support.kube import Kube, Resources
from tests.support.pods import container_processes, serving_pods, signal_processes, wait_until

pytestmark = pytest.mark.pods
PER_REQUEST = 0.2
# Long enough that the figures of a loaded machine count: there, CI counted only 3-4 of a trtllm-serve
# canary's requests in a 30 s window however many were sent (its pod reached the route and Prometheus's
# last scrape about 25 s late), and readiness alone judged it.
ANALYSIS_SECONDS = 60
# A bound on one rollout's requests (and `MAX_SECONDS` on its time): two clients, each one a second, for
# four minutes. Paced, since unpaced a warm pod spent them in 80 s, before a canary was ready; two, since a
# loaded machine's kube-proxy may route to a new canary seconds after it is ready (CI counted 3 of the 5
# judged with one client: the canary saw few of the requests in its 30 s window).
CANARY_CLIENTS = 2
CANARY_REQUESTS = 480
CANARY_PACE_SECONDS = 1.0
# Latency within 3 times the stable pods': every pod here shares two cores, and a fresh canary's first few
# requests (5 judged) may take 1.8 times a warm pod's on a busy machine; the slow canary takes 5 times.
CANARY = {
    "strategy": "Canary",
    "canary": {"analysisSeconds": ANALYSIS_SECONDS, "minRequests": 5, "maxLatencyRatio": 3},
}


@dataclass(frozen=True)
class Checkpointed:
    """A runtime's resource serving a checkpoint from the claim `weights`, and how the checkpoint is made."""

    served: Served
    spec: dict[str, Any]
    write: Callable[[Path], None]

    @property
    def name(self) -> str:
        return self.served.instance

    def document(self, namespace: str, source: dict[str, Any], **serving: Any) -> dict[str, Any]:
        spec = {
            **self.spec,
            "model": {**self.spec["model"], **source},
            "serving": {**self.spec.get("serving", {}), "rollout": CANARY, **serving},
        }
        return images.for_stand_ins(
            {
                "apiVersion": "serving.multimodal.dev/v1alpha1",
                "kind": "MultimodalDeployment",
                "metadata": {"name": self.name, "namespace": namespace},
                "spec": spec,
            }
        )

    def checkpoint(self, kube: Kube, namespace: str, path: str, **knobs: float) -> dict[str, Any]:
        return weights_on_a_claim(kube.core, namespace, knobs, self.write, path=path)


def _snapshot(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for name, content in synthetic_snapshot("Qwen/Qwen2.5-VL-3B-Instruct", ModelType.QWEN2_5_VL).items():
        (where / name).write_bytes(content)


LLAVA = Checkpointed(
    TRITON, {"model": {"type": "llava"}}, lambda where: write_model_repo(where, "pvc/llava-1.5-7b")
)
QWEN = Checkpointed(
    TRTLLM_SERVE,
    {
        "runtime": "trtllm-serve",
        "model": {"type": "qwen2_5_vl"},
        "engine": {"maxBatchSize": 8, "maxSeqLen": 8192},
        "serving": {"modalities": ["image"]},
    },
    _snapshot,
)


@pytest.fixture(scope="module")
def metrics_path(real_cluster: LocalCluster) -> None:
    """Prometheus on the session's cluster (idempotent), which the operator's analysis asks."""
    real_cluster.start_metrics()


def _status(resources: Resources, name: str) -> dict[str, Any]:
    return dict(resources.get(name).get("status") or {})


def _canary_deployment(kube: Kube, namespace: str, name: str) -> bool:
    return any(
        d.metadata.name == names.canary(name) for d in kube.apps.list_namespaced_deployment(namespace).items
    )


def _canary_ready(kube: Kube, namespace: str, name: str) -> bool:
    return any(
        pod.metadata.labels.get(labels.TRACK) == labels.CANARY
        and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        for pod in serving_pods(kube, namespace, name)
    )


def _stable_hashes(kube: Kube, namespace: str, name: str) -> set[str]:
    return {
        pod.metadata.labels.get("pod-template-hash", "")
        for pod in serving_pods(kube, namespace, name)
        if pod.metadata.labels.get(labels.TRACK) != labels.CANARY
    }


@dataclass
class Rollout:
    """One canary rollout under watch, and when each of its steps was seen."""

    case: Checkpointed
    kube: Kube
    resources: Resources
    namespace: str
    marks: dict[str, float] = field(default_factory=dict)
    before: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.case.name

    def status(self) -> dict[str, Any]:
        return _status(self.resources, self.name)

    def wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        """Wait for `check` and mark when; on timeout, say what the resource's status shows."""
        try:
            wait_until(what, check, timeout=timeout)
        except AssertionError as error:
            shown = {
                key: self.status().get(key) for key in ("phase", "rollout", "canary", "revisions", "rollback")
            }
            raise AssertionError(f"{error}; the status shows {shown}") from None
        self.marks[what] = time.monotonic()

    def canary_ready(self, timeout: float) -> None:
        self.wait("canary ready", lambda: _canary_ready(self.kube, self.namespace, self.name), timeout)

    def canary_gone(self, timeout: float) -> None:
        self.wait(
            "canary gone", lambda: not _canary_deployment(self.kube, self.namespace, self.name), timeout
        )

    def since(self, mark: str, before: str) -> float:
        return self.marks[mark] - self.marks[before]

    @contextlib.contextmanager
    def change(
        self, picture: Path, to: Callable[[dict[str, Any]], dict[str, Any]], **serving: Any
    ) -> Iterator[Watch]:
        """The stable checkpoint served (with `serving`) and watched, then the spec `to(stable)` applied.

        Marks "change"; `before` holds the stable revision's pod-template hashes.
        """
        stable = self.case.checkpoint(self.kube, self.namespace, "stable", seconds_per_request=PER_REQUEST)
        self.resources.apply(self.case.document(self.namespace, stable, **serving))
        # Requests enough to last until the canary's analysis ends on a busy machine: the canary needs
        # minRequests of them in its window, and the window opens only once the canary is ready.
        with watching(
            self.case.served,
            self.kube,
            self.resources,
            self.namespace,
            picture,
            clients=CANARY_CLIENTS,
            max_requests=CANARY_REQUESTS,
            pace_seconds=CANARY_PACE_SECONDS,
        ) as watched:
            watched.marks = self.marks  # the rollout's steps on its timeline
            self.before = _stable_hashes(self.kube, self.namespace, self.name)
            self.marks["change"] = time.monotonic()
            self.resources.apply(to(stable))
            yield watched


def _rolled_back(
    case: Checkpointed,
    rollout: Rollout,
    picture: Path,
    knobs: dict[str, float],
    why: str,
) -> None:
    """A new checkpoint with `knobs` is rolled back: `why` is in the figures' words, the stable pod serves."""
    kube, namespace, name = rollout.kube, rollout.namespace, case.name
    candidate = case.checkpoint(kube, namespace, "candidate", **knobs)
    with rollout.change(picture, lambda _: case.document(namespace, candidate)) as watched:
        rollout.canary_ready(300)
        rollout.wait("rolled back", lambda: bool(rollout.status().get("rollback")), 180)
        rollout.canary_gone(60)
        time.sleep(2)
    status = rollout.status()
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (status["phase"], ready["reason"], status["rollout"]) == ("Degraded", ROLLED_BACK, ROLLED_BACK)
    assert status["canary"]["verdict"] == "Failed" and why in ready["message"], ready["message"]
    assert "keeps serving" in ready["message"]
    assert _stable_hashes(kube, namespace, name) == rollout.before  # the stable revision was never touched
    changed = rollout.marks["change"]
    assert not watched.zero_ready(changed), "a moment without a ready endpoint"
    kube.events_about(namespace, name, "CanaryStarted")
    kube.events_about(namespace, name, ROLLED_BACK)
    during = [r for r in watched.requests if r[0] >= changed]
    failed = [r for r in during if r[1] != 0]
    print(
        f"\n{name}: canary {knobs}: ready {rollout.since('canary ready', 'change'):.1f} s after the change "
        f"(its checkpoint prepared first), rolled back {rollout.since('rolled back', 'canary ready'):.1f} s "
        f"after it was ready, removed {rollout.since('canary gone', 'rolled back'):.1f} s later; "
        f"{len(during)} requests since the change, {len(failed)} failed (the canary's); figures "
        f"{status['canary']['figures']}"
    )
    # Only the canary answered errors, and it was stopped: after its removal every request is answered.
    assert not [r for r in failed if r[0] > rollout.marks["canary gone"] + 1]


@pytest.fixture
def rollout(request: pytest.FixtureRequest, kube: Kube, resources: Resources, namespace: str) -> Rollout:
    case: Checkpointed = request.param
    return Rollout(case, kube, resources, namespace)


@pytest.mark.parametrize("rollout", [pytest.param(LLAVA, id="triton")], indirect=True)
@pytest.mark.usefixtures("metrics_path")
def test_a_canary_that_fails_requests_is_rolled_back_while_the_stable_pod_serves(
    rollout: Rollout, picture: Path
) -> None:
    knobs = {"seconds_per_request": PER_REQUEST, "fail_share": 0.5}
    _rolled_back(rollout.case, rollout, picture, knobs, "maxFailureRatio")


@pytest.mark.parametrize(
    "rollout", _cases([pytest.param(QWEN, id="trtllm-serve")], [pytest.param(LLAVA, id="triton")]),
    indirect=True,
)  # fmt: skip
@pytest.mark.usefixtures("metrics_path")
def test_a_slow_canary_is_rolled_back_on_its_latency(rollout: Rollout, picture: Path) -> None:
    _rolled_back(rollout.case, rollout, picture, {"seconds_per_request": 5 * PER_REQUEST}, "maxLatencyRatio")


@pytest.mark.parametrize(
    "rollout",
    _cases([pytest.param(QWEN, id="trtllm-serve")], [pytest.param(LLAVA, id="triton")]),
    indirect=True,
)
@pytest.mark.usefixtures("metrics_path")
def test_a_canary_within_its_thresholds_is_promoted_and_no_request_is_lost(
    rollout: Rollout, picture: Path
) -> None:
    case, kube, namespace, name = rollout.case, rollout.kube, rollout.namespace, rollout.case.name
    with rollout.change(
        picture, lambda stable: case.document(namespace, stable, kvCacheFreeGpuMemFraction=0.8)
    ) as watched:
        rollout.canary_ready(180)
        analysing = rollout.status()
        rollout.wait(
            "promoted",
            lambda: (rollout.status().get("canary") or {}).get("verdict") == "Passed",
            ANALYSIS_SECONDS + 60,
        )
        rollout.canary_gone(180)
        rollout.resources.wait_phase(name, "Ready", timeout=60)
        time.sleep(2)
    status = rollout.status()
    assert analysing["rollout"].startswith("Canary"), analysing.get("rollout")
    assert {row["role"] for row in analysing["revisions"]} == {"Stable", "Canary"}, analysing["revisions"]
    verdict = status["canary"]
    assert verdict["gate"] == "Prometheus" and "within every threshold" in verdict["message"], verdict
    assert verdict["figures"]["requests"] >= 5, verdict
    assert status["rollout"] == "Stable" and _stable_hashes(kube, namespace, name) != rollout.before
    during = watched.unbroken_since(rollout.marks["change"], "a canary rollout")
    kube.events_about(namespace, name, "CanaryPromoted")
    print(
        f"\n{name}: canary of a serving change: ready {rollout.since('canary ready', 'change'):.1f} s after "
        f"the change, promoted {rollout.since('promoted', 'canary ready'):.1f} s after (analysis "
        f"{ANALYSIS_SECONDS} s), removed {rollout.since('canary gone', 'promoted'):.1f} s later; "
        f"{len(during)} requests, 0 failed, never 0 ready endpoints; figures {verdict['figures']}"
    )


def _operator_pod(kube: Kube) -> Any:
    (pod,) = [
        pod
        for pod in kube.core.list_namespaced_pod(OPERATOR_NAMESPACE).items
        if pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"
    ]
    return pod


def _restarts(pod: Any) -> int:
    return sum(status.restart_count for status in pod.status.container_statuses or [])


@pytest.mark.parametrize(
    "rollout",
    _cases([pytest.param(LLAVA, id="triton")], [pytest.param(QWEN, id="trtllm-serve")]),
    indirect=True,
)
@pytest.mark.usefixtures("metrics_path")
def test_an_operator_killed_mid_canary_resumes_the_same_analysis_on_restart(
    rollout: Rollout, picture: Path
) -> None:
    """SIGKILL, as the OOM killer sends it: the restarted operator reads the analysis from the status and
    goes on with the same canary pod, from the same start, to the same verdict; nothing is made twice."""
    case, kube, namespace, name = rollout.case, rollout.kube, rollout.namespace, rollout.case.name
    with rollout.change(
        picture, lambda stable: case.document(namespace, stable, kvCacheFreeGpuMemFraction=0.8)
    ) as watched:
        rollout.wait("analysing", lambda: bool((rollout.status().get("canary") or {}).get("readySince")), 180)
        analysis = rollout.status()["canary"]
        (canary_pod,) = [p.metadata.name for p in serving_pods(kube, namespace, name)
                         if p.metadata.labels.get(labels.TRACK) == labels.CANARY]  # fmt: skip
        operator = _operator_pod(kube)
        before = _restarts(operator)
        signal_processes(container_processes(operator.metadata.uid), signal.SIGKILL)
        rollout.marks["killed"] = time.monotonic()
        rollout.wait("operator restarted", lambda: _restarts(_operator_pod(kube)) > before, 120)
        rollout.wait(
            "promoted",
            lambda: (rollout.status().get("canary") or {}).get("verdict") == "Passed",
            ANALYSIS_SECONDS + 120,
        )
        rollout.canary_gone(180)
        rollout.resources.wait_phase(name, "Ready", timeout=60)
    verdict = rollout.status()["canary"]
    assert (verdict["revision"], verdict["readySince"]) == (analysis["revision"], analysis["readySince"])
    canary_sets = [
        rs.metadata.name
        for rs in kube.apps.list_namespaced_replica_set(namespace).items
        if rs.metadata.name.startswith(names.canary(name))
    ]
    assert len(canary_sets) <= 1, canary_sets  # one canary ReplicaSet (gone with its Deployment, or going)
    events = kube.core.list_namespaced_event(namespace).items
    canary_sets_events = [e for e in events if names.canary(name) in (e.involved_object.name or "")]
    created = [e for e in canary_sets_events if e.reason == "SuccessfulCreate"]
    assert len(created) == 1 and canary_pod in (created[0].message or ""), [e.message for e in created]
    during = watched.unbroken_since(rollout.marks["change"], "a canary rollout with its operator killed")
    print(
        f"\n{name}: operator SIGKILLed {rollout.since('killed', 'change'):.1f} s into the rollout: restarted "
        f"{rollout.since('operator restarted', 'killed'):.1f} s later, the same analysis (from "
        f"{verdict['readySince']}) promoted {rollout.since('promoted', 'killed'):.1f} s after the kill; one "
        f"canary pod ({canary_pod}); {len(during)} requests, 0 failed"
    )


@pytest.mark.parametrize(
    "rollout",
    _cases([pytest.param(QWEN, id="trtllm-serve")], [pytest.param(LLAVA, id="triton")]),
    indirect=True,
)
def test_a_new_checkpoint_surges_in_with_no_request_lost(rollout: Rollout, picture: Path) -> None:
    """SurgeWhenPossible with a new checkpoint (Triton builds a new engine first) and a spare GPU: the old
    pod serves through the build and the new pod's load."""
    case, kube, namespace, name = rollout.case, rollout.kube, rollout.namespace, rollout.case.name
    surge = {"strategy": "SurgeWhenPossible"}
    candidate = case.checkpoint(kube, namespace, "candidate", seconds_per_request=PER_REQUEST, load_seconds=5)
    with rollout.change(
        picture, lambda _: case.document(namespace, candidate, rollout=surge), rollout=surge
    ) as watched:

        def replaced() -> bool:
            pods = serving_pods(kube, namespace, name)
            hashes = {pod.metadata.labels.get("pod-template-hash") for pod in pods}
            return len(pods) == 1 and not hashes & rollout.before

        rollout.wait("replaced", replaced, 300)
        rollout.resources.wait_phase(name, "Ready", timeout=120)
        rollout.marks["ready"] = time.monotonic()
        watched.answered_since(rollout.marks["change"])
    during = watched.unbroken_since(rollout.marks["change"], "a new checkpoint's surge")
    print(
        f"\n{name}: new checkpoint, surge, spare GPU: Ready {rollout.since('ready', 'change'):.1f} s after "
        f"the change; {len(during)} requests, 0 failed, never 0 ready endpoints"
    )
