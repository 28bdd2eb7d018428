"""Autoscaling proven under load on real pods (`make test` runs it short; `make autoscale-demo` longer).

The session's cluster gets its metrics path (Prometheus scraping the serving pods, prometheus-adapter
behind the API server's aggregation layer); llava is applied with `serving.autoscaling` and weights whose
`seconds_per_request` knob makes the LLM double answer one request at a time, half a second each. A
bounded closed-loop load on its Service (only this cluster's addresses) fills Triton's queue; the
controller manager's real HPA controller reads the metric through custom.metrics.k8s.io and adds pods,
which take traffic only once their startup and readiness probes pass; when the load stops, the pods go
back to one after the scale-down window. The timeline is printed (`-s`) and written with its plot to
out/autoscale/ (`MMD_AUTOSCALE_OUT` elsewhere).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.autoscale_proof import ProofSettings, resource_document, run_proof, weights_on_a_claim
from mmd_operator.scaling_metrics import ScalingMetric
from mmd_testbed.build_tools.trtllm_tools import write_model_repo
from mmd_testbed.localcluster import images
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.kube import Kube, Resources
from tests.support.pods import service_ip

pytestmark = pytest.mark.pods

REPO = Path(__file__).resolve().parents[2]
DEMO = os.environ.get("MMD_AUTOSCALE_DEMO") == "1"
# `make test`: pending requests (a gauge: the HPA sees the queue at once, and its end), 1 -> 2 pods.
# The scale-down window outlasts the new pod's start and the hold: with 15 s, two pods held the gauge at
# its target, a scrape's dip made the HPA want one pod, and it scaled down before the load ended (with
# 30 s, 9 s after it ended).
SHORT = ProofSettings(
    metric=ScalingMetric.PENDING_REQUESTS,
    target=2,
    max_replicas=2,
    clients=6,
    seconds_per_request=0.5,
    scale_down_stabilization_seconds=45,
    # Bounds for two loaded cores (a new pod's tritonserver loads in 15-60 s there).
    max_load_seconds=210,
    hold_seconds=10,
    down_timeout=150,
)
# `make autoscale-demo`: queue time per request over a 1-minute rate window, 1 -> 3 pods.
LONG = ProofSettings(
    metric=ScalingMetric.QUEUE_TIME_PER_REQUEST,
    target=500,
    max_replicas=3,
    clients=8,
    seconds_per_request=0.5,
    scale_down_stabilization_seconds=30,
    max_load_seconds=300,
    hold_seconds=30,
    down_timeout=300,
)
SETTINGS = LONG if DEMO else SHORT


@pytest.fixture(scope="module")
def metrics_path(real_cluster: LocalCluster) -> None:
    """Prometheus and prometheus-adapter on the session's cluster (idempotent)."""
    real_cluster.start_metrics()


@pytest.mark.timeout(1200 if DEMO else 900)
@pytest.mark.usefixtures("metrics_path")
def test_load_scales_real_serving_pods_up_on_tritons_metric_and_back_down(
    real_cluster: LocalCluster, api_client: Any, kube: Kube, resources: Resources, namespace: str
) -> None:
    knobs = {"seconds_per_request": SETTINGS.seconds_per_request}
    source = weights_on_a_claim(
        kube.core, namespace, knobs, lambda path: write_model_repo(path, "pvc/llava-1.5-7b")
    )
    resources.apply(images.for_stand_ins(resource_document("llava", namespace, source, SETTINGS)))
    resources.wait_phase("llava", "Ready", timeout=300)
    state = real_cluster.load_state()
    assert state is not None and state.network is not None
    url = f"grpc://{service_ip(kube, namespace, 'llava')}:8001"
    timeline = run_proof(api_client, namespace, "llava", url, state.network.supernet, SETTINGS, print)
    out = Path(os.environ.get("MMD_AUTOSCALE_OUT", REPO / "out" / "autoscale"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "timeline.md").write_text(timeline.table() + "\n")
    (out / "timeline.json").write_text(timeline.to_json())
    plot = timeline.plot(out / "timeline.png")
    print(f"\n{timeline.table()}\n\n(plot {plot}, data {out / 'timeline.json'})")

    # The load saturated one pod, then more took it; no request failed on the way.
    assert timeline.load.failed == 0, timeline.load.errors
    assert timeline.peak_pods() >= 2
    milestones = timeline.milestones()

    def first(prefix: str, default: float | None = None) -> float:
        found = next((t for t, what in milestones if what.startswith(prefix)), default)
        assert found is not None, f"no {prefix!r} in\n{timeline.table()}"
        return found

    # The decision: the HPA's SuccessfulRescale event, or its status if sampled first (the status is
    # sampled once a second and written after the scale, so it can lag the event by more than a second).
    above = first(f"{timeline.metric} above target")
    rescaled = first("event HorizontalPodAutoscaler SuccessfulRescale: New size: 2", default=math.inf)
    decided = min(first("HPA wants "), rescaled)
    new_pods = [pod for pod in timeline.pods if pod.name not in timeline.first_pods]
    assert new_pods, timeline.table()
    # The metric crossed its target before the HPA decided; each new pod was created after the decision,
    # passed its startup probe, then became Ready. Pods were removed only after the load stopped (the
    # Deployment picks which), down to min_replicas.
    # A look takes a second or more on a busy machine, and an event's time has whole seconds: so the claim
    # is that the last look finding the metric at or below target came before the decision.
    looks = [(s.t - timeline.load.started, s.metrics.get(timeline.metric)) for s in timeline.samples]
    quiet = [t for t, value in looks if 0 <= t < above and value is not None and value <= timeline.target]
    assert not quiet or max(quiet) <= decided + 1, [(round(t, 1), v) for t, v in looks if t <= above]
    for pod in new_pods:
        assert pod.started is not None and pod.ready is not None, pod
        assert timeline.load.started + decided - 1 <= pod.created <= pod.started <= pod.ready
    removed = [pod for pod in timeline.pods if pod.gone is not None]
    assert len(removed) == len(timeline.pods) - SETTINGS.min_replicas, timeline.table()
    assert all(pod.gone > timeline.load.stopped for pod in removed), timeline.table()
    # The HPA's own events and the operator's say what happened, both ways.
    reasons = [(kind, reason) for _, kind, reason, _ in timeline.events]
    assert reasons.count(("HorizontalPodAutoscaler", "SuccessfulRescale")) >= 2
    assert ("MultimodalDeployment", "Autoscaled") in reasons
    status = resources.get("llava")["status"]
    assert status["autoscaling"]["desiredReplicas"] == SETTINGS.min_replicas, status["autoscaling"]
