"""Canary rollouts on real pods (Triton's llava), judged on the real Prometheus's figures, under load.

The stable revision serves a (fake) LLaVA checkpoint from a claim whose doubles take `PER_REQUEST` seconds a
request. A change starts one canary pod beside it, behind the same Service, and the operator judges it on
Prometheus (the local cluster's, which scrapes the serving pods): a serving-only change passes and is
promoted with no request lost; a new engine whose double fails half its requests (`fail_share`), or takes
five times as long (`seconds_per_request`), is rolled back while the stable pod serves on. A watcher
samples the Service's ready endpoints and a bounded client sends requests through it throughout
(`test_rollouts.watching`). `make test` runs the failing canary; `make rollouts` runs all three.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.autoscale_proof import weights_on_a_claim
from mmd_operator.judgement.revisions import ROLLED_BACK
from mmd_operator.vocabulary import labels, names
from mmd_testbed.build_tools.trtllm_tools import write_model_repo
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.pods.test_rollouts import ALL_CASES, TRITON, Watch, watching
from tests.support.kube import Kube, Resources
from tests.support.pods import serving_pods, wait_until

pytestmark = pytest.mark.pods
PER_REQUEST = 0.2
ANALYSIS_SECONDS = 30
CANARY = {"strategy": "Canary", "canary": {"analysisSeconds": ANALYSIS_SECONDS, "minRequests": 5}}
NAME = TRITON.instance


@pytest.fixture(scope="module")
def metrics_path(real_cluster: LocalCluster) -> None:
    """Prometheus on the session's cluster (idempotent), which the operator's analysis asks."""
    real_cluster.start_metrics()


def _document(namespace: str, source: dict[str, Any], **serving: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.multimodal.dev/v1alpha1",
        "kind": "MultimodalDeployment",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"model": {"type": "llava", **source}, "serving": {"rollout": CANARY, **serving}},
    }


def _checkpoint(kube: Kube, namespace: str, path: str, **knobs: float) -> dict[str, Any]:
    return weights_on_a_claim(
        kube.core, namespace, knobs, lambda where: write_model_repo(where, "pvc/llava-1.5-7b"), path=path
    )


def _status(resources: Resources) -> dict[str, Any]:
    return dict(resources.get(NAME).get("status") or {})


def _canary_deployment(kube: Kube, namespace: str) -> bool:
    return any(
        d.metadata.name == names.canary(NAME) for d in kube.apps.list_namespaced_deployment(namespace).items
    )


def _canary_ready(kube: Kube, namespace: str) -> bool:
    return any(
        pod.metadata.labels.get(labels.TRACK) == labels.CANARY
        and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        for pod in serving_pods(kube, namespace, NAME)
    )


def _events(kube: Kube, namespace: str) -> list[str]:
    found = kube.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={NAME}").items
    return [event.reason for event in found]


def _wait(what: str, check: Callable[[], bool], timeout: float, resources: Resources) -> float:
    """Wait for `check`; on timeout, say what the resource's status shows."""
    try:
        wait_until(what, check, timeout=timeout)
    except AssertionError as error:
        status = _status(resources)
        shown = {key: status.get(key) for key in ("phase", "rollout", "canary", "revisions", "rollback")}
        raise AssertionError(f"{error}; the status shows {shown}") from None
    return time.monotonic()


def _stable_hashes(kube: Kube, namespace: str) -> set[str]:
    return {
        pod.metadata.labels.get("pod-template-hash", "")
        for pod in serving_pods(kube, namespace, NAME)
        if pod.metadata.labels.get(labels.TRACK) != labels.CANARY
    }


def _requests(watched: Watch, since: float) -> tuple[int, int]:
    during = [r for r in watched.requests if r[0] >= since]
    return len(during), sum(1 for r in during if r[1] != 0)


def _rolled_back(
    resources: Resources, kube: Kube, namespace: str, picture: Path, knobs: dict[str, float], why: str
) -> None:
    """A new engine with `knobs` is rolled back: `why` is in the figures' words, the stable pod serves."""
    stable = _checkpoint(kube, namespace, "llava-stable", seconds_per_request=PER_REQUEST)
    candidate = _checkpoint(kube, namespace, "llava-candidate", **knobs)
    resources.apply(_document(namespace, stable))
    with watching(TRITON, kube, resources, namespace, picture) as watched:
        before = _stable_hashes(kube, namespace)
        changed = time.monotonic()
        resources.apply(_document(namespace, candidate))
        canary_ready = _wait(
            "the canary pod to be ready", lambda: _canary_ready(kube, namespace), 300, resources
        )
        undone = _wait("the rollback", lambda: bool(_status(resources).get("rollback")), 180, resources)
        gone = _wait("the canary to go", lambda: not _canary_deployment(kube, namespace), 60, resources)
        time.sleep(2)
    status = _status(resources)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (status["phase"], ready["reason"], status["rollout"]) == ("Degraded", ROLLED_BACK, ROLLED_BACK)
    assert status["canary"]["verdict"] == "Failed" and why in ready["message"], ready["message"]
    assert "keeps serving" in ready["message"]
    assert _stable_hashes(kube, namespace) == before  # the stable revision was never touched
    assert not watched.zero_ready(changed), "a moment without a ready endpoint"
    assert {"CanaryStarted", ROLLED_BACK} <= set(_events(kube, namespace))
    sent, failed = _requests(watched, changed)
    figures = status["canary"]["figures"]
    print(
        f"\n{NAME}: canary {knobs}: ready {canary_ready - changed:.1f} s after the change (its engine "
        f"built first), rolled back {undone - canary_ready:.1f} s after it was ready, removed "
        f"{gone - undone:.1f} s later; {sent} requests since the change, {failed} failed (the canary's); "
        f"figures {figures}"
    )
    # Only the canary answered errors, and it was stopped: after its removal every request is answered.
    assert not [r for r in watched.requests if r[0] > gone + 1 and r[1] != 0]


@pytest.mark.usefixtures("metrics_path")
def test_a_canary_that_fails_requests_is_rolled_back_while_the_stable_pod_serves(
    resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    _rolled_back(
        resources, kube, namespace, picture, {"seconds_per_request": PER_REQUEST, "fail_share": 0.5},
        "maxFailureRatio",
    )  # fmt: skip


@pytest.mark.skipif(not ALL_CASES, reason="make rollouts (MMD_ROLLOUTS_ALL=1) runs it")
@pytest.mark.usefixtures("metrics_path")
def test_a_slow_canary_is_rolled_back_on_its_latency(
    resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    _rolled_back(
        resources, kube, namespace, picture, {"seconds_per_request": 5 * PER_REQUEST}, "maxLatencyRatio"
    )


@pytest.mark.usefixtures("metrics_path")
def test_a_canary_within_its_thresholds_is_promoted_and_no_request_is_lost(
    resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    stable = _checkpoint(kube, namespace, "llava-stable", seconds_per_request=PER_REQUEST)
    resources.apply(_document(namespace, stable))
    with watching(TRITON, kube, resources, namespace, picture) as watched:
        before = _stable_hashes(kube, namespace)
        changed = time.monotonic()
        resources.apply(_document(namespace, stable, kvCacheFreeGpuMemFraction=0.8))
        canary_ready = _wait(
            "the canary pod to be ready", lambda: _canary_ready(kube, namespace), 180, resources
        )
        analysing = _status(resources)
        promoted = _wait(
            "the promotion",
            lambda: (_status(resources).get("canary") or {}).get("verdict") == "Passed",
            ANALYSIS_SECONDS + 60,
            resources,
        )
        gone = _wait("the canary to go", lambda: not _canary_deployment(kube, namespace), 180, resources)
        resources.wait_phase(NAME, "Ready", timeout=60)
        time.sleep(2)
    status = _status(resources)
    assert analysing["rollout"].startswith("Canary"), analysing.get("rollout")
    assert {row["role"] for row in analysing["revisions"]} == {"Stable", "Canary"}, analysing["revisions"]
    verdict = status["canary"]
    assert verdict["gate"] == "Prometheus" and "within every threshold" in verdict["message"], verdict
    assert status["canary"]["figures"]["requests"] >= 5, status["canary"]
    assert status["rollout"] == "Stable" and _stable_hashes(kube, namespace) != before
    during = watched.unbroken_since(changed, "a canary rollout")
    assert "CanaryPromoted" in _events(kube, namespace)
    print(
        f"\n{NAME}: canary of a serving change: ready {canary_ready - changed:.1f} s after the change, "
        f"promoted {promoted - canary_ready:.1f} s after (analysis {ANALYSIS_SECONDS} s), canary removed "
        f"{gone - promoted:.1f} s later; {len(during)} requests, 0 failed, never 0 ready endpoints; "
        f"figures {status['canary']['figures']}"
    )
